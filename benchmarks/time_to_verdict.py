"""Time to a verdict: ``infrarsi run`` from the command alone, as a multiple of one baseline trial.

    python -m benchmarks.time_to_verdict [--fixtures tinygpt chargpt ...] [--repo PATH --command "..."]
                                         [--previous REV] [--budget 8] [--workdir DIR] [--out docs/BENCHMARKS.md]

For each fixture (the corpus's, :mod:`benchmarks.corpus`, with its README's preparation) and each ``--repo``
given with its ``--command``, a fresh git repository is driven through the real CLI as a new user would:
``init --command`` (a fixture that ships its contract keeps it), then ``run --budget-trials N --no-bank``, the
doctor included. Printed per row: the trials the run made (the doctor's, the search's, the controls',
verification's: every trial in the journal), its wall time, one baseline trial (the median wall time of the
doctor's baseline runs), wall / one trial, the verdict and the speedup. Beside it, the same figures for the
previous release's policy (``--previous``, default the commit this benchmark was written against), measured in
the same invocation from a git worktree of that revision: the two run one after the other on the same
machine, fixture by fixture, so a drift of the machine hits both alike. The table goes to the
``time-to-verdict`` section of docs/BENCHMARKS.md with the command and the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.corpus import CORPUS, Fixture, machine, prepare_repo  # noqa: E402

#: The last commit before the verdict's time was cut (issue 44): the previous release's policy.
PREVIOUS = "4076a20"
RUN_ID = "ttv"


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    trials: int
    wall_s: float
    one_trial_s: float | None
    verdict: str
    speedup: float | None
    error: str = ""

    @property
    def ratio(self) -> float | None:
        return self.wall_s / self.one_trial_s if self.one_trial_s else None


def _cli(code: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI of the tree at ``code`` (this one, or the previous release's worktree)."""
    path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": path})


def _trials(repo: Path) -> list[dict[str, Any]]:
    """Every trial of the run, from the journal (the doctor's, the search's, the controls', verification's)."""
    import sqlite3

    db = repo / ".infrarsi" / "journal.sqlite"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT record FROM trials WHERE run_id = ? AND record IS NOT NULL", (RUN_ID,)).fetchall()
    return [json.loads(r[0]) for r in rows]


def run_once(code: Path, fixture: Fixture, workdir: Path, budget: int) -> Measured:
    """One fixture from its command alone to a verdict, with the CLI of ``code``."""
    repo = prepare_repo(fixture, workdir) if not Path(fixture.name).is_absolute() else _copied(Path(fixture.name),
                                                                                                 workdir)
    shipped = (repo / "infrarsi.toml").exists()
    step = _cli(code, "lock", str(repo)) if shipped else _cli(code, "init", str(repo), "--command", fixture.command)
    if step.returncode != 0:
        return Measured(trials=0, wall_s=0.0, one_trial_s=None, verdict="-", speedup=None,
                        error=f"init exited {step.returncode}: {(step.stderr or step.stdout).strip()[-200:]}")
    t0 = time.perf_counter()
    run = _cli(code, "run", str(repo), "--run-id", RUN_ID, "--budget-trials", str(budget), "--no-bank")
    wall = time.perf_counter() - t0
    summary = repo / ".infrarsi" / "runs" / RUN_ID / "run.json"
    if not summary.exists():
        return Measured(trials=len(_trials(repo)), wall_s=wall, one_trial_s=None, verdict="-", speedup=None,
                        error=f"run exited {run.returncode}: {(run.stderr or run.stdout).strip()[-200:]}")
    data = json.loads(summary.read_text())
    doctor = json.loads((repo / ".infrarsi" / "runs" / RUN_ID / "doctor.json").read_text())
    doctor_trials = set(doctor.get("trials") or ())
    trials = _trials(repo)
    walls = [float((t.get("metrics") or {}).get("wall_s") or 0.0) for t in trials if t.get("trial_no") in doctor_trials]
    promoted = [v for v in data.get("verdicts", []) if v.get("verdict") == "promoted"]
    best = max(promoted, key=lambda v: v.get("speedup") or 0.0) if promoted else None
    kinds = sorted({str(v.get("verdict")) for v in data.get("verdicts", [])})
    return Measured(trials=len(trials), wall_s=wall, one_trial_s=statistics.median(walls) if walls else None,
                    verdict="promoted" if best else ("nothing promoted" + (f" ({', '.join(kinds)})" if kinds else
                                                                           " (nothing verified)")),
                    speedup=best.get("speedup") if best else None)


def _copied(source: Path, workdir: Path) -> Path:
    """A repo given on the command line, copied into its own fresh git repository (its data included)."""
    import shutil

    from bot.workspace.commits import commit_all
    from bot.workspace.refs import init_repository

    repo = workdir / source.name
    shutil.copytree(source, repo, ignore=shutil.ignore_patterns(".git", ".infrarsi", "__pycache__"))
    init_repository(repo, initial_head="main")
    commit_all(repo, f"{source.name} as given")
    return repo


def previous_tree(rev: str, workdir: Path) -> Path:
    """A worktree of the previous release (``git worktree add``; read-only use)."""
    tree = workdir / f"previous-{rev}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
    return tree


def _fmt(m: Measured | None) -> str:
    if m is None:
        return "| – | – | – | – | – "
    if m.error:
        return f"| {m.trials} | {m.wall_s:.0f} s | – | – | {m.error[:80]} "
    speed = f" {m.speedup:.2f}x" if m.speedup else ""
    one = f"{m.one_trial_s:.1f} s" if m.one_trial_s else "–"
    ratio = f"**{m.ratio:.0f}x**" if m.ratio else "–"
    return f"| {m.trials} | {m.wall_s:.0f} s | {one} | {ratio} | {m.verdict}{speed} "


def render(rows: list[tuple[str, Measured, Measured | None]], command: str, here: dict[str, Any], rev: str) -> str:
    out = ["## Time to a verdict", "",
           f"Measured {time.strftime('%Y-%m-%d', time.gmtime())} on {here.get('cpu', '?')} "
           f"({here.get('cores', '?')} cores; {here.get('note') or 'nothing else ran beside it'}) with `{command}`: "
           f"`infrarsi run` from the command alone, the doctor included; \"one trial\" is the median wall time of the "
           f"doctor's baseline runs. Previous: the policy of `{rev}`, measured in the same invocation.", "",
           "| fixture | trials | wall | one trial | wall / one trial | verdict "
           "| previous: trials | wall | one trial | wall / one trial | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, now, before in rows:
        out.append(f"| {name} {_fmt(now)}{_fmt(before)}|")
    ratios = [m.ratio for _, m, _ in rows if m.ratio]
    old = [b.ratio for _, _, b in rows if b is not None and b.ratio]
    if ratios:
        out += ["", f"Median wall / one trial: **{statistics.median(ratios):.0f}x**"
                + (f" (previous: {statistics.median(old):.0f}x)" if old else "") + "."]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.time_to_verdict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", nargs="*", default=None, help="corpus fixtures (default: all)")
    parser.add_argument("--repo", type=Path, action="append", default=[], help="another repo (with --command)")
    parser.add_argument("--command", action="append", default=[], help="the command of each --repo, in order")
    parser.add_argument("--previous", default=PREVIOUS, help="the revision whose policy is measured beside")
    parser.add_argument("--no-previous", action="store_true", help="measure this tree only")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "BENCHMARKS.md")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if len(args.repo) != len(args.command):
        parser.error("give one --command for each --repo")
    chosen = [f for f in CORPUS if args.fixtures is None or f.name in args.fixtures]
    chosen += [Fixture(name=str(repo.resolve()), command=cmd) for repo, cmd in zip(args.repo, args.command)]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="infrarsi-ttv-"))
    old_code = None if args.no_previous else previous_tree(args.previous, workdir)
    rows = []
    for fixture in chosen:
        print(f"time_to_verdict: {fixture.name} (this tree)", file=sys.stderr, flush=True)
        now = run_once(REPO_ROOT, fixture, workdir / "now", args.budget)
        before = None
        if old_code is not None:
            print(f"time_to_verdict: {fixture.name} ({args.previous})", file=sys.stderr, flush=True)
            before = run_once(old_code, fixture, workdir / "before", args.budget)
        rows.append((Path(fixture.name).name, now, before))
    command = "python -m benchmarks.time_to_verdict " + " ".join(argv if argv is not None else sys.argv[1:])
    text = render(rows, command.strip(), machine(None, args.note), args.previous)
    print(text)
    if not args.no_write:
        from benchmarks.doc_sections import write_section

        write_section(args.out, "time-to-verdict", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
