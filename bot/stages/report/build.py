"""``infrarsi report REPO [--run ID]``: report.md and report.json of a finished run, from the journal.

The bot side of :mod:`infrarsi.report`: it reads run.json, the doctor report,
every trial of the run from the journal and the winner's trial commit from git
(its diff is written beside the report as ``winner.diff``), then renders.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

from bot.stages.doctor.baseline import load_doctor, run_dir
from bot.workspace.naming import trial_branch
from bot.stages.run.trial import journal_path, state_dir
from infrarsi.contract import load_contract
from infrarsi.contract.model import Contract
from infrarsi.journal import Journal
from infrarsi.report import RepoFacts, Report, build_report, render_markdown
from infrarsi.run_summary import RunSummary
from infrarsi.trial import Outcome, TrialRecord
from infrarsi.verify import Verdict

__all__ = ["ReportError", "ReportFiles", "add_report_parser", "latest_finished_run", "load_report", "write_report"]


class ReportError(Exception):
    """The run cannot be reported (no such run, not finished); the message says which and why."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportFiles:
    report: Report
    markdown: Path
    json: Path
    diff: Path | None
    records: tuple[TrialRecord, ...]


def latest_finished_run(root: Path) -> str | None:
    runs = state_dir(root) / "runs"
    found = sorted(runs.glob("*/run.json"), key=lambda p: p.stat().st_mtime) if runs.is_dir() else []
    return found[-1].parent.name if found else None


def _winner_commit(report_records: list[TrialRecord], best: Verdict | None) -> TrialRecord | None:
    """The winner's first committed verification trial (its commit holds the patches)."""
    if best is None:
        return None
    wanted = set(best.candidate_trials)
    for r in sorted(report_records, key=lambda r: r.trial_no):
        if r.trial_no in wanted and r.commit and r.outcome is Outcome.OK:
            return r
    return None


def read_run_summary(path: Path) -> RunSummary:
    """``run.json`` as a record (an older one upgraded); a malformed one is a :class:`ReportError`."""
    try:
        return RunSummary.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportError(f"{path}: not a run summary this InfraRSI can read ({type(exc).__name__}: {exc}); "
                          "rerun `infrarsi run` for this run") from None


def _write_diff(root: Path, commit: str, out: Path | None) -> tuple[str | None, Path | None]:
    git = pygit2.Repository(str(root))
    c = git.get(commit)
    if c is None or not c.parents:
        return None, None
    base = c.parents[0]
    if out is not None:
        out.write_text(git.diff(base.tree, c.tree).patch or "", encoding="utf-8")
    return str(base.id), out


def write_report(contract: Contract, run_id: str | None = None, *, write: bool = True) -> ReportFiles:
    """Build the run's report and write report.md, report.json (and winner.diff) into its run dir.

    With ``write=False`` nothing is written (``apply --dry-run``); the paths say where the files would go."""
    root = contract.root
    run_id = run_id or latest_finished_run(root)
    if run_id is None:
        raise ReportError(f"{root}: no finished run (run.json) to report; run `infrarsi run {root}` first")
    summary_path = state_dir(root) / "runs" / run_id / "run.json"
    if not summary_path.is_file():
        raise ReportError(f"run {run_id!r} has no run.json in {summary_path.parent}: it never finished "
                          "(resume it with `infrarsi run --resume`)")
    run = read_run_summary(summary_path)
    doctor = load_doctor(root, run_id)
    if doctor is None:
        raise ReportError(f"run {run_id!r} has no doctor.json")
    with Journal(journal_path(root)) as journal:
        records = journal.trials(run_id)
    out = run_dir(root, run_id) if write else state_dir(root) / "runs" / run_id
    winner = _winner_commit(records, run.best)
    base = diff = None
    if winner is not None and winner.commit:
        base, diff = _write_diff(root, winner.commit, out / "winner.diff" if write else None)
    from bot.patching.catalog import applicable_patches

    try:
        targets = {pid: spec.targets for pid, spec in applicable_patches(contract).items()}
    except Exception:  # noqa: BLE001 - a catalog that cannot scan the tree only costs the attribution
        targets = {}
    facts = RepoFacts(repo=root.name, base_commit=base, winner_commit=winner.commit if winner else None,
                      winner_branch=trial_branch(run_id, winner.trial_no) if winner else None,
                      diff_link=str(diff.relative_to(root)) if diff else None,
                      entry=next((a for a in contract.workload.command if a.endswith(".py")), "the job"))
    report = build_report(run=run, doctor=doctor, records=records, knobs=contract.knobs,
                          command=contract.workload.command, args=contract.workload.args, facts=facts,
                          created_at=time.time(), patch_targets=targets)
    md, js = out / "report.md", out / "report.json"
    if write:
        md.write_text(render_markdown(report), encoding="utf-8")
        js.write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return ReportFiles(report=report, markdown=md, json=js, diff=diff, records=tuple(records))


def load_report(root: Path, run_id: str | None = None, *, write: bool = True,
                contract: Contract | None = None) -> ReportFiles:
    """The run's report, built now from the journal (it is cheap and always current).

    A command that already loaded the contract passes it, so one command reads it once."""
    return write_report(contract if contract is not None else load_contract(root), run_id, write=write)


def cmd_report(args: argparse.Namespace) -> int:
    root = Path(args.repo).resolve()
    try:
        files = load_report(root, args.run)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    r = files.report
    if args.json:
        print(files.json.read_text(encoding="utf-8"), end="")
        return 0
    if r.promoted and r.speedup is not None and r.speedup_ci:
        print(f"run {r.run_id}: verified speedup {r.speedup:.2f}x ({(r.ci_level or 0):.0%} CI "
              f"[{r.speedup_ci[0]:.2f}, {r.speedup_ci[1]:.2f}]) with {r.winner}")
    else:
        print(f"run {r.run_id}: no verified speedup")
    print(f"{len(r.trials)} trials, {len(r.failed)} failed costing {r.failed_cost_s:.1f} device-s")
    print(f"wrote {files.markdown}")
    print(f"wrote {files.json}")
    return 0


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write report.md and report.json of a finished run")
    p.add_argument("repo")
    p.add_argument("--run", help="the run id (default: the latest finished run)")
    p.add_argument("--json", action="store_true", help="print report.json")
    p.set_defaults(func=cmd_report)
