"""``infrarsi run --resume`` with Slurm: the jobs of a bot that died ran on without it.

A trial the dead bot left pending has a pointer file in its log directory naming
its job. That job is followed to its end (it may still be running) and its
record is read back and classified exactly as a live trial's would be, so the
trial counts once and is never repeated. A pending trial without a pointer
(the bot died between reserving the trial and submitting) has its job, if any,
cancelled by name and is left to be recorded ``interrupted``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.executors.slurm.cli import SlurmCLI
from bot.executors.slurm.records import POINTER_FILE, SPEC_FILE, read_json, spec_from_dict
from infrarsi.contract.model import Contract
from infrarsi.journal import Journal
from infrarsi.measure import classify, summarize
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.candidates import CandidateError, candidate_from_description, parse_knob_value
from infrarsi.trial_record import Candidate, TrialRecord

from bot.executors.slurm.logs import copy_logs


@dataclass(frozen=True, kw_only=True, slots=True)
class SubmittedJobs:
    """What recovering needs of the Slurm executor, handed in by it (so this module never imports it): its
    Slurm commands (to cancel a job), how it follows a job to its record, and its name for the record."""

    cli: SlurmCLI
    follow: Callable[..., Execution]  # follow(job_id, job_dir, *, attempts) -> Execution
    executor: str


def _branch_commit(root: Path, run_id: str, trial_no: int) -> tuple[str, str] | None:
    """(commit id, message) of the trial's branch, when the trial ran in a worktree."""
    from bot.workspace.naming import trial_branch

    from bot.workspace.refs import branch_commit_message

    return branch_commit_message(root, trial_branch(run_id, trial_no))


def _from_description(contract: Contract, text: str) -> Candidate | None:
    """``Candidate.describe()`` read back (``k=v … +patch``), as the trial's commit message carries it."""
    try:
        return candidate_from_description(contract, text)
    except CandidateError:
        return None


def _from_launch(contract: Contract, spec: TrialSpec) -> Candidate | None:
    """The knob values as the launch passed them (flags, switches, variables); no patches."""
    argv, env = list(spec.argv), dict(spec.env)
    values = contract.defaults()
    try:
        for knob in contract.knobs:
            if knob.env is not None:
                if knob.env in env:
                    values[knob.name] = parse_knob_value(contract, knob.name, env[knob.env])
            elif knob.switch:
                values[knob.name] = knob.flag in argv
            elif knob.flag in argv:
                i = len(argv) - 1 - argv[::-1].index(knob.flag)
                if i + 1 < len(argv):
                    values[knob.name] = parse_knob_value(contract, knob.name, argv[i + 1])
    except CandidateError:
        return None
    return Candidate.of(values)


def candidate_of(contract: Contract, digest: str, *, commit_message: str | None,
                 spec: TrialSpec | None) -> Candidate | None:
    """The pending trial's candidate, rebuilt and checked against the digest the journal kept (else None)."""
    guesses = []
    if commit_message:
        title = commit_message.splitlines()[0]
        guesses.append(_from_description(contract, title.split(": ", 1)[1] if ": " in title else ""))
    if spec is not None:
        guesses.append(_from_launch(contract, spec))
    return next((c for c in guesses if c is not None and c.digest() == digest), None)


def recover_pending(jobs: SubmittedJobs, contract: Contract, journal: Journal, run_id: str,
                    candidates: Mapping[str, Candidate]) -> int:
    from infrarsi.rundir import state_dir

    recovered = 0
    for pending in journal.orphaned(run_id):
        log_dir = state_dir(contract.root) / "logs" / run_id / str(pending.trial_no)
        pointer = read_json(log_dir / POINTER_FILE)
        if pointer is None:
            jobs.cli.cancel_named(f"infrarsi-{run_id}-{pending.trial_no}")
            continue
        attempts = [str(a) for a in pointer.get("attempts") or [pointer["job_id"]]]
        job_dir = Path(pointer["job_dir"])
        data = read_json(job_dir / SPEC_FILE)
        commit = _branch_commit(contract.root, run_id, pending.trial_no)
        candidate = candidates.get(pending.candidate_hash) or candidate_of(
            contract, pending.candidate_hash, commit_message=commit[1] if commit else None,
            spec=spec_from_dict(data) if data else None)
        if candidate is None:  # cannot say what ran: do not guess; the trial is recorded interrupted
            jobs.cli.cancel(str(pointer["job_id"]))
            continue
        execution = jobs.follow(str(pointer["job_id"]), job_dir, attempts=attempts)
        copy_logs(job_dir, log_dir)
        timing = contract.timing
        memory_limit = contract.budget.memory_limit_bytes
        metrics = summarize(execution, warmup=timing.warmup_steps, measured=timing.measured_steps,
                            memory_limit_bytes=memory_limit, steps_per_line=timing.steps_per_line)
        outcome, reason = classify(execution, metrics, warmup=timing.warmup_steps, measured=timing.measured_steps,
                                   tokens_per_step=contract.workload.tokens_per_step, memory_limit_bytes=memory_limit)
        record = TrialRecord(run_id=run_id, trial_no=pending.trial_no,
                             candidate=candidate, outcome=outcome,
                             reason=reason, metrics=metrics, cost_s=execution.wall_s * execution.devices,
                             started_at=pending.started_at, ended_at=time.time(),
                             commit=commit[0] if commit else None, executor=jobs.executor,
                             memory_limit_bytes=memory_limit, returncode=execution.returncode,
                             stderr_tail=execution.stderr_tail[-2000:],
                             placement=execution.placement + (("recovered_on_resume", True),))
        journal.record_trial(record)
        recovered += 1
    return recovered
