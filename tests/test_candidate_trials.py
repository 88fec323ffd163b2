"""Candidates as git branches on the real fixture: worktree, patch, audit, commit, trial — or rejection."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.stages.run.candidate import run_candidate
from bot.patching.catalog import applicable_patches
from bot.executors.local import LocalExecutor
from bot.workspace import GitWorkspace
from bot.workspace.commits import read_trailers
from bot.workspace.errors import StaleBranchError
from bot.workspace.worktrees import trial_branch
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.seams.executor import Executor, Execution, TrialSpec
from infrarsi.journal import Journal
from infrarsi.patches import Effect, PatchSpec
from infrarsi.trial_record import Candidate, Outcome
from tests.support.tinygpt import infrarsi
from tests.support.repos import commit_tree, git

pytestmark = pytest.mark.side_by_side  # its checks time nothing: CI runs it beside other tests (./dev)

EFFECT = Effect(time_ratio=1.0, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")


class MustNotLaunch(Executor):
    """An executor for candidates that must be rejected before anything runs."""

    name = "must-not-launch"

    def __init__(self) -> None:
        self.calls: list[TrialSpec] = []

    def execute(self, spec: TrialSpec) -> Execution:
        self.calls.append(spec)
        raise AssertionError(f"a rejected candidate was launched: {spec.argv}")


@pytest.fixture
def git_repo(tiny_repo: Path) -> Path:
    """The tiny fixture, contract and lock included, committed as a real repository."""
    commit_tree(tiny_repo, "fixture")
    return tiny_repo


def _replacement(pid: str, target: str, source: str) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=(target,), effect=EFFECT, kind="replacement",
                     replacement=source)


def _run(repo: Path, candidate: Candidate, patches: dict[str, PatchSpec], executor) -> tuple:
    contract = load_contract(repo)
    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        journal.ensure_run("t", kind="test")
        record = run_candidate(contract, read_lock(repo), workspace=GitWorkspace(repo),
                               base=git(repo, "rev-parse", "HEAD").strip(), run_id="t", candidate=candidate,
                               patches=patches, executor=executor, journal=journal)
        stored = journal.trials("t")
    return record, stored


@pytest.mark.slow
def test_a_catalog_patch_runs_as_one_commit_on_its_own_branch(git_repo: Path) -> None:
    before_status = git(git_repo, "status", "--porcelain")
    model_before = (git_repo / "model.py").read_bytes()
    patches = applicable_patches(load_contract(git_repo))
    candidate = Candidate.of(load_contract(git_repo).defaults(), ["sdpa_causal_attention"])
    record, stored = _run(git_repo, candidate, patches, LocalExecutor())
    assert record.outcome is Outcome.OK, record.reason
    branch = trial_branch("t", 1)
    log = git(git_repo, "log", "--format=%H %an%n%B", branch, "-1")
    assert log.startswith(f"{record.commit} infrarsi-bot")
    trailers = read_trailers(git_repo, record.commit)
    assert trailers == {"InfraRSI-Run": "t", "InfraRSI-Trial": "1", "InfraRSI-Candidate": candidate.digest()}
    assert git(git_repo, "rev-list", "--count", f"main..{branch}").strip() == "1"
    assert git(git_repo, "diff", "--name-only", "main", branch).split() == ["model.py"]
    assert "scaled_dot_product_attention" in git(git_repo, "show", f"{branch}:model.py")
    # The user's working tree is untouched and the worktree is gone.
    assert (git_repo / "model.py").read_bytes() == model_before
    assert git(git_repo, "status", "--porcelain") == before_status
    assert len(git(git_repo, "worktree", "list").splitlines()) == 1
    (change,) = record.audit
    assert change["path"] == "model.py" and change["symbol"] == "CausalSelfAttention.forward"
    assert change["lines_added"] > 0 and change["lines_removed"] > 0
    assert change["blob_before"] == git(git_repo, "rev-parse", "main:model.py").strip()
    assert change["blob_after"] == git(git_repo, "rev-parse", f"{branch}:model.py").strip()
    assert stored[0].audit == record.audit


REJECTIONS = {
    "locked file": (_replacement("edit-harness", "harness.py::run", "def run(args, model, optimizer, step):\n"
                                 "    pass\n"), "harness.py"),
    "symbol outside editable": (_replacement("edit-parse-args", "train.py::parse_args",
                                             "def parse_args(argv=None):\n    return None\n"),
                                "train.py::parse_args"),
    "does not parse": (_replacement("broken", "model.py::gelu_tanh", "def gelu_tanh(x):\n    return (x\n"),
                       "failed"),
    "no such symbol": (_replacement("ghost", "model.py::Ghost.forward", "def forward(self, x):\n    return x\n"),
                       "Ghost.forward"),
}


@pytest.mark.parametrize("case", sorted(REJECTIONS))
def test_rejected_candidates_launch_nothing_and_name_the_offender(git_repo: Path, case: str) -> None:
    spec, offender = REJECTIONS[case]
    executor = MustNotLaunch()
    record, stored = _run(git_repo, Candidate.of({}, [spec.id]), {spec.id: spec}, executor)
    assert record.outcome is Outcome.REJECTED
    assert offender in record.reason
    assert record.cost_s == 0.0 and executor.calls == []
    assert stored[0].outcome is Outcome.REJECTED
    # No branch is left for a candidate that never became a commit.
    assert trial_branch("t", 1) not in git(git_repo, "branch", "--list")


def test_a_patch_with_what_a_speed_patch_never_needs_is_quarantined_never_run(git_repo: Path) -> None:
    spec = _replacement("relay", "model.py::gelu_tanh",
                        'def gelu_tanh(x):\n    __import__("os").dup2(3, 1)\n'
                        '    return F.gelu(x, approximate="tanh")\n')
    executor = MustNotLaunch()
    record, stored = _run(git_repo, Candidate.of({}, ["relay"]), {"relay": spec}, executor)
    assert record.outcome is Outcome.REJECTED and record.cost_s == 0.0 and executor.calls == []
    assert record.reason.startswith("quarantined for review: model.py:"), record.reason
    assert ": os.dup2 (low-level fd trick: " in record.reason
    assert ": builtins.__import__ (dynamic import: " in record.reason
    flagged = [a for a in record.audit if a.get("kind") == "quarantined"]
    assert {a["construct"] for a in flagged} == {"os.dup2", "builtins.__import__"}
    assert all(a["symbol"] == "gelu_tanh" and a["path"] == "model.py" for a in flagged)
    assert stored[0].reason == record.reason and trial_branch("t", 1) not in git(git_repo, "branch", "--list")


def test_module_level_import_and_new_file_are_rejected(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.stages.run.candidate as ct

    real = ct.apply_patches

    def sneaky(root: Path, specs):  # the patch machinery applied, then something else wrote files
        results = real(root, specs)
        (root / "model.py").write_text("import os\n" + (root / "model.py").read_text())
        (root / "extra.py").write_text("X = 1\n")
        return results

    monkeypatch.setattr(ct, "apply_patches", sneaky)
    spec = _replacement("noop", "model.py::gelu_tanh",
                        'def gelu_tanh(x):\n    return F.gelu(x, approximate="tanh")\n')
    executor = MustNotLaunch()
    record, _ = _run(git_repo, Candidate.of({}, ["noop"]), {"noop": spec}, executor)
    assert record.outcome is Outcome.REJECTED and executor.calls == []
    assert "extra.py" in record.reason
    assert "model.py" in record.reason and "import" in record.reason


def test_a_stale_branch_is_refused_and_gc_cleans_it(git_repo: Path) -> None:
    head = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "branch", trial_branch("t", 1), head)  # left behind by a killed run
    with pytest.raises(StaleBranchError):
        _run(git_repo, Candidate.of({}, []), {}, MustNotLaunch())
    with Journal(git_repo / ".infrarsi" / "journal.sqlite") as journal:
        assert journal.pending("t") == []  # the reserved number is released
    result = infrarsi("gc", str(git_repo))
    assert result.returncode == 0, result.stderr
    assert trial_branch("t", 1) in result.stdout
    assert trial_branch("t", 1) not in git(git_repo, "branch", "--list")


def test_cli_trial_with_patch_and_patches_listing(git_repo: Path) -> None:
    listing = infrarsi("patches", str(git_repo))
    assert listing.returncode == 0
    assert "sdpa_causal_attention    applies" in listing.stdout
    bad = infrarsi("trial", str(git_repo), "--patch", "autocast_bf16")
    assert bad.returncode == 2 and "not a catalog patch that applies to this repo" in bad.stderr


@pytest.mark.slow
def test_every_catalog_patch_that_applies_keeps_the_loss_within_tolerance(git_repo: Path) -> None:
    contract = load_contract(git_repo)
    patches = applicable_patches(contract)
    assert len(patches) >= 8, sorted(patches)
    defaults = contract.defaults()
    baseline, _ = _run(git_repo, Candidate.of(defaults), patches, LocalExecutor())
    assert baseline.outcome is Outcome.OK, baseline.reason
    for pid in sorted(patches):
        record, _ = _run(git_repo, Candidate.of(defaults, [pid]), patches, LocalExecutor())
        assert record.outcome is Outcome.OK, (pid, record.reason)
        assert len(record.metrics.loss) == len(baseline.metrics.loss)
        for step, (a, b) in enumerate(zip(baseline.metrics.loss, record.metrics.loss), start=1):
            assert abs(b - a) <= contract.loss.rtol * abs(a), (pid, step, a, b)
