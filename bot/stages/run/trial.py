"""Run one candidate as a trial: check the lock, launch, measure, classify, record.

The journal gets a ``running`` row before launch and the record right after the
trial ends, before anything else happens.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bot.workspace.worktrees import ensure_infrarsi_dir
from infrarsi.contract.lock import Lock, verify_lock
from infrarsi.contract.model import PYTHON_PLACEHOLDER, Contract, KnobValue
from infrarsi.seams.executor import Executor, TrialSpec
from infrarsi.journal import Journal
from infrarsi.measure import classify, summarize
from infrarsi.trial import Candidate, Outcome, TrialMetrics, TrialRecord


class CandidateError(ValueError):
    """A candidate that names an unknown knob or a value outside its domain."""


def state_dir(root: Path) -> Path:
    """``<repo>/.infrarsi``: journal, logs and worktrees; it ignores itself in git."""
    return ensure_infrarsi_dir(root)


def journal_path(root: Path) -> Path:
    return state_dir(root) / "journal.sqlite"


def parse_knob_value(contract: Contract, name: str, text: str) -> KnobValue:
    """A ``--knob name=value`` string as a value of that knob's type, checked against its domain."""
    try:
        knob = contract.knob(name)
    except KeyError:
        known = ", ".join(k.name for k in contract.knobs) or "none"
        raise CandidateError(f"unknown knob {name!r} (the contract defines: {known})") from None
    value: KnobValue
    try:
        if knob.kind == "bool":
            lowered = text.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(text)
            value = lowered in ("1", "true", "yes", "on")
        elif knob.kind == "int":
            value = int(text)
        elif knob.kind == "float":
            value = float(text)
        else:
            matches = [v for v in knob.values or () if str(v) == text]
            value = matches[0] if matches else text
    except ValueError:
        raise CandidateError(f"knob {name}: expected {knob.domain_text()}, got {text!r}") from None
    if not knob.contains(value):
        raise CandidateError(f"knob {name}: expected {knob.domain_text()}, got {text!r}")
    return value


def make_candidate(contract: Contract, assignments: list[str], patches: tuple[str, ...] = ()) -> Candidate:
    """The contract's defaults overridden by ``name=value`` strings; constraints checked."""
    values = contract.defaults()
    for item in assignments:
        name, sep, text = item.partition("=")
        if not sep:
            raise CandidateError(f"expected --knob name=value, got {item!r}")
        values[name.strip()] = parse_knob_value(contract, name.strip(), text.strip())
    for c in contract.constraints:
        if not c.allows(values):
            raise CandidateError(f"candidate violates a constraint: {c.describe()}"
                                 + (f" ({c.reason})" if c.reason else ""))
    return Candidate.of(values, patches)


def trial_spec(contract: Contract, candidate: Candidate, *, tree: Path, memory_limit_bytes: int | None,
               timeout_s: float | None = None, log_dir: Path | None = None) -> TrialSpec:
    """The launch of ``candidate`` in ``tree``: fixed arguments first, then every knob explicitly."""
    command = list(contract.workload.command)
    if command and command[0] == PYTHON_PLACEHOLDER:
        command[0] = sys.executable
    argv = command + list(contract.workload.args)
    env: list[tuple[str, str]] = []
    values = candidate.knob_dict()
    for knob in contract.knobs:
        value = values.get(knob.name, knob.default)
        if knob.env is not None:
            env.append((knob.env, knob.format(value)))
        elif knob.switch:
            if value:
                argv.append(knob.flag or "")
        else:
            argv += [knob.flag or "", knob.format(value)]
    return TrialSpec(
        argv=tuple(argv), cwd=str(tree / contract.workload.cwd), env=tuple(env),
        timeout_s=timeout_s if timeout_s is not None else contract.budget.trial_timeout_s,
        memory_limit_bytes=memory_limit_bytes, source=contract.timing.source,
        stdout_regex=contract.timing.stdout_regex, expected_steps=contract.timing.total_steps,
        log_dir=str(log_dir) if log_dir else None,
    )


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


def witness_step(contract: Contract) -> int:
    """The optimizer step whose work the witness counts: the last warm-up step (at least the second, so that
    first-step compilation and lazy initialisation are not what is counted), outside the measured intervals
    whenever the contract has two or more warm-up steps."""
    return max(2, contract.timing.warmup_steps)


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


def executor_for(contract: Contract, executor: Executor) -> Executor:
    """The executor the contract's ``[launch]`` asks for: a local executor becomes a torchrun one
    (same step callback, same interrupt) when ``launch.executor = "torchrun"``; any other executor
    (a remote runner, which runs ``infrarsi trial`` there) is kept as it is."""
    if contract.launch.executor != "torchrun" or executor.name != "local":
        return executor
    from bot.executors.torchrun import TorchrunExecutor

    return TorchrunExecutor(contract.launch, on_step=getattr(executor, "on_step", None),
                            stop=getattr(executor, "_stop", None),
                            passthrough_env=getattr(executor, "passthrough_env", ()),
                            base_env=getattr(executor, "base_env", None))


def run_trial(contract: Contract, lock: Lock, request: TrialRequest, *, executor: Executor,
              journal: Journal, trial_no: int | None = None,
              audit: tuple[dict[str, Any], ...] = ()) -> TrialRecord:
    """Run, measure and record one trial; always returns its record (failures included).

    ``trial_no`` is passed when the caller already reserved it (to name a worktree branch).
    """
    executor = executor_for(contract, executor)
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

    log_dir = state_dir(contract.root) / "logs" / request.run_id / str(trial_no)
    spec = trial_spec(contract, request.candidate, tree=request.tree, memory_limit_bytes=memory_limit,
                      timeout_s=request.timeout_s, log_dir=log_dir)
    if request.witness:
        spec = replace(spec, witness=witness_step(contract))
    execution = executor.execute(spec)
    timing = contract.timing
    metrics = summarize(execution, warmup=timing.warmup_steps, measured=timing.measured_steps,
                        memory_limit_bytes=memory_limit)
    outcome, reason = classify(execution, metrics, warmup=timing.warmup_steps, measured=timing.measured_steps,
                               tokens_per_step=contract.workload.tokens_per_step)
    broken = verify_lock(contract, lock, request.tree)
    if broken and outcome is Outcome.OK:
        outcome, reason = Outcome.INVALID, "lock broken during the trial: " + "; ".join(map(str, broken))
    record = TrialRecord(**base, outcome=outcome, reason=reason, metrics=metrics,
                         cost_s=execution.wall_s * execution.devices, ended_at=time.time(),
                         returncode=execution.returncode, stderr_tail=execution.stderr_tail[-2000:])
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
        "memory_limit_bytes": record.memory_limit_bytes,
        "loss": list(m.loss),
        "child_step_time_s": m.child_step_time_s,
        "cost_s": record.cost_s,
        "returncode": record.returncode,
    }
