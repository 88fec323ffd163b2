"""Run one candidate as a trial: check the lock, launch, measure, classify, record.

The journal gets a ``running`` row before launch and the record right after the
trial ends, before anything else happens.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infrarsi.contract.import_roots import import_roots, with_import_roots
from infrarsi.contract.lock import Lock, verify_lock
from infrarsi.contract.job_line import contract_job_line
from infrarsi.contract.model import Contract
from infrarsi.seams.executor import Executor, TrialSpec
from infrarsi.seams.workspace import Workspace
from infrarsi.journal import Journal
from infrarsi.rundir import logs_dir
from infrarsi.measure import classify, summarize
from infrarsi.step_clock import draw_count_step
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

log = logging.getLogger(__name__)


def trial_spec(contract: Contract, candidate: Candidate, *, tree: Path, memory_limit_bytes: int | None,
               timeout_s: float | None = None, log_dir: Path | None = None) -> TrialSpec:
    """The launch of ``candidate`` in ``tree``: fixed arguments first, then every knob explicitly."""
    line = contract_job_line(contract, candidate.knob_dict(), interpreter=sys.executable)
    cwd = tree / contract.workload.workdir
    return TrialSpec(
        argv=line.argv, cwd=str(cwd), root=str(tree),
        env=with_import_roots(line.env, import_roots(tree, contract.workload.workdir, line.argv)),
        timeout_s=timeout_s if timeout_s is not None else contract.budget.trial_timeout_s,
        memory_limit_bytes=memory_limit_bytes, source=contract.timing.source,
        stdout_regex=contract.timing.stdout_regex, expected_steps=contract.timing.total_steps,
        steps_per_line=contract.timing.steps_per_line,
        step_stream=contract.timing.stream,
        log_dir=str(log_dir) if log_dir else None,
        step_tokens=contract.workload.tokens_per_step if contract.timing.source == "optimizer" else None,
    )


def launch_lock(lock: Lock) -> tuple[tuple[str, str], ...]:
    """The hashes a launcher checks in the job's tree: every locked file (the contract itself is checked where it
    governs the run, in the bot's repository; a trial's tree need not hold it)."""
    return lock.files


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialRequest:
    """One trial to run: which candidate, where, under which limits."""

    run_id: str
    candidate: Candidate
    tree: Path  # the working tree the job runs in (the repo itself, or a worktree)
    memory_limit_bytes: int | None = None
    timeout_s: float | None = None
    commit: str | None = None
    witness: bool = False  # run the witness in the trial's interpreter (verification and the doctor)
    past_window: int = 0  # step lines the job runs on after the measured ones (verification's look past them)


def witness_step(contract: Contract, rng: random.Random | None = None) -> int:
    """The optimizer step whose work the witness counts, drawn per trial inside the measured window
    (:func:`infrarsi.step_clock.draw_count_step`); the job never sees it (the witness's key channel carries it)."""
    timing = contract.timing
    return draw_count_step(timing.warmup_steps, timing.measured_steps, timing.steps_per_line, rng)


def _memory_limit(contract: Contract, request: TrialRequest) -> int | None:
    return request.memory_limit_bytes if request.memory_limit_bytes is not None \
        else contract.budget.memory_limit_bytes


def record_rejected(contract: Contract, request: TrialRequest, *, trial_no: int, reason: str, journal: Journal,
                    executor_name: str, audit: tuple[dict[str, Any], ...] = ()) -> TrialRecord:
    """A candidate that never launched (its patch failed or left the scope): recorded, zero device time."""
    now = time.time()
    record = TrialRecord(run_id=request.run_id, trial_no=trial_no, candidate=request.candidate,
                         outcome=Outcome.REJECTED, reason=reason, cost_s=0.0, started_at=now, ended_at=now,
                         commit=request.commit, executor=executor_name,
                         memory_limit_bytes=_memory_limit(contract, request), audit=audit)
    journal.record_trial(record)
    return record


def run_trial(contract: Contract, lock: Lock, request: TrialRequest, *, executor: Executor,
              journal: Journal, trial_no: int | None = None, audit: tuple[dict[str, Any], ...] = (),
              workspace: Workspace | None = None) -> TrialRecord:
    """Run, measure and record one trial; always returns its record (failures included).

    ``trial_no`` is passed when the caller already reserved it (to name a worktree branch). ``executor``
    is the one :func:`bot.executors.registry.build_executor` chose for the contract; it is used as given.
    ``workspace``: the repo's, when the trial runs in a worktree of it (a crash then names the data it lacked).
    """
    if trial_no is None:
        trial_no = journal.begin_trial(request.run_id, request.candidate)
    started = time.time()
    memory_limit = _memory_limit(contract, request)
    base = dict(run_id=request.run_id, trial_no=trial_no, candidate=request.candidate, started_at=started,
                commit=request.commit, executor=executor.name, memory_limit_bytes=memory_limit, audit=audit)

    broken = verify_lock(contract, lock, request.tree)
    if broken:
        record = TrialRecord(**base, outcome=Outcome.INVALID, ended_at=time.time(),
                             reason="lock broken before launch: " + "; ".join(map(str, broken)))
        journal.record_trial(record)
        return record

    log_dir = logs_dir(contract.root, request.run_id, trial_no)
    spec = trial_spec(contract, request.candidate, tree=request.tree, memory_limit_bytes=memory_limit,
                      timeout_s=request.timeout_s, log_dir=log_dir)
    # the launcher checks the lock where the job runs, before and after (a runner's checkout is not this tree)
    spec = replace(spec, commit=request.commit, lock=launch_lock(lock))
    if request.witness:
        spec = replace(spec, witness=witness_step(contract))
    if request.past_window > 0 and spec.expected_steps:
        spec = replace(spec, expected_steps=spec.expected_steps + request.past_window)
    log.debug("trial %s/%s on the %s executor: %s (cwd %s, timeout %s s, logs %s)", request.run_id, trial_no,
              executor.name, " ".join(spec.argv), spec.cwd, spec.timeout_s, log_dir)
    execution = executor.execute(spec)
    timing = contract.timing
    metrics = summarize(execution, warmup=timing.warmup_steps, measured=timing.measured_steps,
                        memory_limit_bytes=memory_limit, steps_per_line=timing.steps_per_line)
    outcome, reason = classify(execution, metrics, warmup=timing.warmup_steps, measured=timing.measured_steps,
                               tokens_per_step=contract.workload.tokens_per_step,
                               steps_per_line=timing.steps_per_line, memory_limit_bytes=memory_limit)
    if outcome is Outcome.CRASH:
        from bot.stages.init.data_check import missing_in_trial  # reads the job's code only when it crashed

        outside = workspace.outside_git() if workspace is not None else {}
        missing = missing_in_trial(contract, request.tree, execution.stderr_tail, outside)
        reason += f"; {missing}" if missing else ""
    broken = verify_lock(contract, lock, request.tree)
    if broken and outcome is Outcome.OK:
        outcome, reason = Outcome.INVALID, "lock broken during the trial: " + "; ".join(map(str, broken))
    record = TrialRecord(**base, outcome=outcome, reason=reason, metrics=metrics,
                         cost_s=execution.wall_s * execution.devices, ended_at=time.time(),
                         returncode=execution.returncode, stderr_tail=execution.stderr_tail[-2000:],
                         placement=execution.placement)
    journal.record_trial(record)
    return record


def metrics_summary(record: TrialRecord) -> dict[str, object]:
    """The figures ``infrarsi trial --json`` prints (the full record is in the journal)."""
    m: TrialMetrics = record.metrics
    return {
        "run_id": record.run_id,
        "trial_no": record.trial_no,
        "candidate": record.candidate.describe(),
        "outcome": record.outcome.value,
        "reason": record.reason,
        "step_time_s": m.step_time_s,
        "step_time_cv": m.step_time_cv,
        "step_times_s": list(m.step_times_s),
        "tokens_per_step": m.tokens_per_step,
        "tokens_per_s": m.tokens_per_s,
        "peak_mem_bytes": m.peak_mem_bytes,
        "peak_mem_censored": m.peak_mem_censored,
        "steady_mem_bytes": m.steady_mem_bytes,
        "memory_limit_bytes": record.memory_limit_bytes,
        "device_peak_mem_bytes": m.device_peak_mem_bytes,
        "device_steady_mem_bytes": m.device_steady_mem_bytes,
        "device_capacity_bytes": m.device_capacity_bytes,
        "device_peak_censored": m.device_peak_censored,
        "loss": list(m.loss),
        "child_step_time_s": m.child_step_time_s,
        "cost_s": record.cost_s,
        "returncode": record.returncode,
    }
