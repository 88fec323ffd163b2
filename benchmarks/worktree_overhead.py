"""How much does the git layer cost per trial?

    python benchmarks/worktree_overhead.py [--n 50] [--repo PATH] [--keep]

Copies a training repository (default ``fixtures/tinygpt/``; a generated one
with a few-hundred-line ``model.py`` if that is missing) into a temporary
directory, makes it a git repository with one commit, then runs N trials the
way the bot does: create the trial worktree, patch ``model.py``, commit with
trailers, remove the worktree. Prints mean/median/p95 milliseconds per phase
and the total bot overhead per trial.

On the fixture the patch step is real: one of its applicable catalog patches
(libcst), cycled, followed by the scope audit of the changed files.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bot.workspace import commit_worktree, create_trial_worktree, remove_trial_worktree  # noqa: E402
from tests.support.repos import commit_all  # noqa: E402

import pygit2  # noqa: E402

DEFAULT_FIXTURE = REPO_ROOT / "fixtures" / "tinygpt"
_SKIP = shutil.ignore_patterns(".git", ".infrarsi", "__pycache__", ".venv", "*.pyc")


# ---------------------------------------------------------------- PATCH STEP
def textual_patch(worktree: Path, trial_no: int) -> None:
    """Fallback for a generated repo: a small textual change to model.py."""
    model = worktree / "model.py"
    model.write_text(model.read_text() + f"\n# InfraRSI benchmark trial {trial_no}\n")


def catalog_patcher(repo: Path) -> Callable[[Path, int], None]:
    """Real candidates: the fixture's applicable catalog patches (libcst), cycled, each followed by the audit."""
    from bot.stages.run.candidate import changed_files
    from bot.patching.catalog import applicable_patches
    from bot.stages.init.draft import draft_contract
    from bot.patching.patch_set import apply_patches
    from bot.patching.audit import audit_tree
    from bot.stages.init.scan import scan_repo
    from bot.stages.init.toml_writer import render_contract
    from infrarsi.contract import load_contract

    (repo / "infrarsi.toml").write_text(render_contract(draft_contract("python train.py", scan_repo(repo, "train.py"))))
    contract = load_contract(repo)
    specs = sorted(applicable_patches(contract).values(), key=lambda s: s.id)
    (repo / "infrarsi.toml").unlink()

    def patch(worktree: Path, trial_no: int) -> None:
        spec = specs[trial_no % len(specs)]
        results = apply_patches(worktree, [spec])
        before, after = changed_files(worktree, "HEAD")
        audit = audit_tree(before, after, editable=contract.scope.editable, locked=contract.scope.locked,
                           allow_imports=contract.scope.allow_imports)
        if type(results[0]).__name__ != "Applied" or not audit.ok:
            raise RuntimeError(f"{spec.id}: {results[0]} / {audit.violations}")

    return patch
# ---------------------------------------------------------------------------


def generated_model(lines: int = 300) -> str:
    """A syntactically valid model.py of roughly ``lines`` lines."""
    out = ['"""Generated stand-in for a training repo\'s model."""', "import torch", "from torch import nn", ""]
    block = 0
    while len(out) < lines:
        out += [
            "",
            f"class Block{block}(nn.Module):",
            "    def __init__(self, width: int = 256) -> None:",
            "        super().__init__()",
            "        self.norm = nn.LayerNorm(width)",
            "        self.fc1 = nn.Linear(width, 4 * width)",
            "        self.fc2 = nn.Linear(4 * width, width)",
            "",
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:",
            "        h = self.fc1(self.norm(x))",
            "        return x + self.fc2(torch.nn.functional.gelu(h))",
        ]
        block += 1
    return "\n".join(out) + "\n"


def prepare_repo(source: Path | None, workdir: Path) -> tuple[Path, str]:
    """Copy ``source`` (or generate a repo) into ``workdir/repo``; init and commit."""
    repo = workdir / "repo"
    if source is not None and source.is_dir() and (source / "model.py").is_file():
        shutil.copytree(source, repo, ignore=_SKIP)
        origin = str(source)
    else:
        repo.mkdir()
        (repo / "model.py").write_text(generated_model())
        (repo / "train.py").write_text("from model import Block0\n\nprint(Block0())\n")
        origin = "generated (fixture missing)"
    pygit2.init_repository(str(repo), initial_head="main")
    commit_all(repo, "Benchmark base")
    return repo, origin


def summarize(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, max(0, round(0.95 * len(ms)) - 1))]
    return f"mean {statistics.fmean(ms):8.2f}  median {statistics.median(ms):8.2f}  p95 {p95:8.2f}"


def run(n: int, source: Path | None, keep: bool) -> dict[str, list[float]]:
    workdir = Path(tempfile.mkdtemp(prefix="infrarsi-bench-"))
    try:
        repo, origin = prepare_repo(source, workdir)
        files = sum(1 for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)
        print(f"repo: {origin} -> {repo} ({files} files), {n} trials, pygit2 {pygit2.__version__} / libgit2 {pygit2.LIBGIT2_VERSION}")
        patch_fn = catalog_patcher(repo) if (repo / "train.py").is_file() and origin != "generated (fixture missing)" \
            else textual_patch
        print(f"patch step: {'libcst catalog patches + scope audit' if patch_fn is not textual_patch else 'textual edit'}")
        phases: dict[str, list[float]] = {"create": [], "patch": [], "commit": [], "remove": [], "total": []}
        for trial_no in range(n):
            t0 = time.perf_counter()
            wt = create_trial_worktree(repo, base="main", run_id="bench", trial_no=trial_no)
            t1 = time.perf_counter()
            try:
                patch_fn(wt.path, trial_no)
                t2 = time.perf_counter()
                commit_worktree(
                    wt.path,
                    message=f"Benchmark trial {trial_no}",
                    trailers={
                        "InfraRSI-Run": "bench",
                        "InfraRSI-Trial": str(trial_no),
                        "InfraRSI-Candidate": "benchmark-edit",
                    },
                )
                t3 = time.perf_counter()
            finally:
                remove_trial_worktree(wt)
            t4 = time.perf_counter()
            for name, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                phases[name].append(value)
        return phases
    finally:
        if keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="number of trials (default 50)")
    parser.add_argument("--repo", type=Path, default=None, help=f"directory to copy (default {DEFAULT_FIXTURE})")
    parser.add_argument("--keep", action="store_true", help="keep the temporary repository")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    source = args.repo if args.repo is not None else DEFAULT_FIXTURE
    if args.repo is not None and not (args.repo / "model.py").is_file():
        parser.error(f"{args.repo} has no model.py")
    phases = run(args.n, source, args.keep)
    print("phase     milliseconds")
    for name, samples in phases.items():
        print(f"{name:<8}  {summarize(samples)}")
    print(f"bot git overhead per trial: {statistics.fmean(phases['total']) * 1000:.1f} ms (mean)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
