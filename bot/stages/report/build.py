"""``infrarsi report REPO [--run-id ID]``: report.md and report.json of a finished run, from the journal.

The bot side of :mod:`infrarsi.report`: it reads run.json, the doctor report,
every trial of the run from the journal and the winner's trial commit from git
through the :class:`~infrarsi.seams.workspace.Workspace` it is given (its diff is
written beside the report as ``winner.diff``), then renders.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from bot.stages.doctor.baseline import load_doctor
from bot.workspace.naming import trial_branch
from infrarsi.contract import load_contract
from infrarsi.contract.entry import entry_file
from infrarsi.contract.model import Contract
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.journal import Journal
from infrarsi.report import RepoFacts, Report, build_report, render_markdown
from infrarsi.rundir import RunDir, journal_path, latest_run, runs_dir, write_json, write_text
from infrarsi.run_summary import RunSummary
from infrarsi.seams.workspace import Workspace
from infrarsi.trial_record import Outcome, TrialRecord
from infrarsi.verdict import Verdict

__all__ = ["ReportError", "ReportFiles", "latest_finished_run", "load_report", "winner_branches", "winner_record",
           "write_report"]


class ReportError(InfraRSIError):
    """The run cannot be reported (no such run, not finished); the message says which and why."""

    exit_code = BAD_INPUT


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportFiles:
    report: Report
    markdown: Path
    json: Path
    diff: Path | None
    records: tuple[TrialRecord, ...]


def latest_finished_run(root: Path) -> str | None:
    """The latest run that wrote run.json (:func:`infrarsi.rundir.latest_run`'s rule)."""
    return latest_run(root, finished=True)


def winner_record(report_records: list[TrialRecord], best: Verdict | None) -> TrialRecord | None:
    """The winner's first committed verification trial (its commit holds the patches; its branch is the one a
    finished run keeps)."""
    if best is None:
        return None
    wanted = set(best.candidate_trials)
    for r in sorted(report_records, key=lambda r: r.trial_no):
        if r.trial_no in wanted and r.commit and r.outcome is Outcome.OK:
            return r
    return None


def winner_branches(root: Path, journal: Journal) -> dict[str, str]:
    """Branch -> why it stays, for the verified winner of every finished run of the repo at ``root``: the
    report's ``winner.diff`` and the promotion commit are read from its commit. A run.json this InfraRSI cannot
    read keeps nothing."""
    out: dict[str, str] = {}
    runs = runs_dir(root)
    for path in sorted(runs.glob("*/run.json")) if runs.is_dir() else ():
        run_id = path.parent.name
        try:
            winner = winner_record(journal.trials(run_id), read_run_summary(path).best)
            if winner is not None:
                out[trial_branch(run_id, winner.trial_no)] = (f"the verified winner of run {run_id} (report and "
                                                              "apply read its commit)")
        except (ReportError, ValueError):  # unreadable, or a directory no run id names
            continue
    return out


def read_run_summary(path: Path) -> RunSummary:
    """``run.json`` as a record (an older one upgraded); a malformed one is a :class:`ReportError`."""
    try:
        return RunSummary.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportError(f"{path}: not a run summary this InfraRSI can read ({type(exc).__name__}: {exc}); "
                          "rerun `infrarsi run` for this run") from None


def _write_diff(workspace: Workspace, commit: str, out: Path | None) -> tuple[str | None, Path | None]:
    found = workspace.diff_to_parent(commit)
    if found is None:
        return None, None
    base, patch = found
    if out is not None:
        write_text(out, patch)
    return base, out


def write_report(contract: Contract, run_id: str | None = None, *, workspace: Workspace,
                 write: bool = True) -> ReportFiles:
    """Build the run's report and write report.md, report.json (and winner.diff) into its run dir.

    With ``write=False`` nothing is written (``apply --dry-run``); the paths say where the files would go."""
    root = contract.root
    run_id = run_id or latest_finished_run(root)
    if run_id is None:
        raise ReportError(f"{root}: no finished run (run.json) to report; run `infrarsi run {root}` first")
    rundir = RunDir(root, run_id)
    if not rundir.path.is_dir():
        raise ReportError(f"no run {run_id!r} in {rundir.path.parent} (the latest finished run is "
                          f"{latest_finished_run(root) or 'none'}; `infrarsi journal` lists every run)")
    if not rundir.run_json.is_file():
        raise ReportError(f"run {run_id!r} has no run.json in {rundir.path}: it never finished "
                          "(resume it with `infrarsi run --resume`)")
    run = read_run_summary(rundir.run_json)
    doctor = load_doctor(root, run_id)
    if doctor is None:
        raise ReportError(f"run {run_id!r} has no doctor.json")
    with Journal(journal_path(root)) as journal:
        records = journal.trials(run_id)
    winner = winner_record(records, run.best)
    base = diff = None
    if winner is not None and winner.commit:
        base, diff = _write_diff(workspace, winner.commit, rundir.winner_diff if write else None)
    from bot.patching.catalog import applicable_patches

    try:
        specs = applicable_patches(contract)
    except Exception:  # noqa: BLE001 - a catalog that cannot scan the tree only costs the attribution
        specs = {}
    facts = RepoFacts(repo=root.name, base_commit=base, winner_commit=winner.commit if winner else None,
                      winner_branch=trial_branch(run_id, winner.trial_no) if winner else None,
                      diff_link=str(diff.relative_to(root)) if diff else None,
                      entry=entry_file(root, contract.workload.workdir, contract.workload.command) or "the job")
    report = build_report(run=run, doctor=doctor, records=records, knobs=contract.knobs,
                          command=contract.workload.command, args=contract.workload.args, facts=facts,
                          workdir=contract.workload.workdir, env=contract.workload.env,
                          created_at=time.time(), patch_specs=specs, precision_allow=contract.precision.allow)
    md, js = rundir.report_md, rundir.report_json
    if write:
        write_text(md, render_markdown(report))
        write_json(js, report.to_dict())
    return ReportFiles(report=report, markdown=md, json=js, diff=diff, records=tuple(records))


def load_report(root: Path, run_id: str | None = None, *, workspace: Workspace, write: bool = True,
                contract: Contract | None = None) -> ReportFiles:
    """The run's report, built now from the journal (it is cheap and always current).

    A command that already loaded the contract passes it, so one command reads it once."""
    return write_report(contract if contract is not None else load_contract(root), run_id, workspace=workspace,
                        write=write)

