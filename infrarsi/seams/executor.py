"""The executor seam: what the engine asks a trial launcher for, and what it gets back.

An executor launches one job and measures it from the outside; it does not
judge it. Turning the raw :class:`Execution` into metrics and an outcome is the
engine's job (:mod:`infrarsi.measure`), so every executor is judged the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from infrarsi.trial_record import StepEvent

KillReason = Literal["timeout", "memory", "interrupt"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialSpec:
    """Everything needed to launch one candidate; nothing of the bot's own environment."""

    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...] = ()  # knob variables, added to the scrubbed base
    timeout_s: float = 600.0
    memory_limit_bytes: int | None = None
    source: Literal["probe", "stdout", "optimizer"] = "probe"
    stdout_regex: str | None = None
    expected_steps: int | None = None  # step events after which the job is ended (SIGTERM, grace, SIGKILL)
    step_stream: Literal["stdout", "stderr"] = "stdout"  # where stdout_regex reads step lines
    log_dir: str | None = None  # where stdout/stderr are kept in full
    witness: int | None = None  # witnessed: the optimizer step whose work the witness counts; None: unwitnessed
    steps_per_line: int = 1  # optimizer steps per step line: the witness reports after expected x this
    # The tree the job runs in (``cwd`` is inside it), the commit it must be at, and the sha256 of every locked
    # file in it (paths relative to ``root``): the launcher, wherever it runs, checks them before the job starts
    # and after it ends, so a locked file edited at run time is caught where the job ran (a runner's checkout).
    root: str | None = None
    commit: str | None = None
    lock: tuple[tuple[str, str], ...] = ()
    # With ``source = "optimizer"`` (the bot's own step clock): the tokens each of its step events carries, the
    # contract's ``tokens_per_step`` (the witness counts what a step really consumed).
    step_tokens: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    """What happened, as measured by the launcher."""

    events: tuple[StepEvent, ...]
    returncode: int | None  # negative: killed by that signal
    wall_s: float
    peak_rss_bytes: int
    killed_for: KillReason | None = None
    stderr_tail: str = ""
    probe_oom: str | None = None
    device_peak_mem_bytes: int | None = None
    steady_rss_bytes: int | None = None  # least resident memory sampled while steps ran (see TrialMetrics)
    device_steady_bytes: int | None = None  # GPU memory held after optimizer steps (the fullest rank's)
    device_capacity_bytes: int | None = None  # what the GPU allocator could have grown to (the tightest rank's)
    devices: int = 1
    pids: tuple[int, ...] = ()  # every process of the trial the launcher saw
    phases: tuple[tuple[int, str, float], ...] = ()  # (step, phase name, seconds by the job's clock)
    info: tuple[tuple[str, Any], ...] = ()  # facts the job reported about itself (e.g. parameter count)
    failed_rank: int | None = None
    placement: tuple[tuple[str, Any], ...] = ()  # where a scheduler ran it (job id, nodes, state, pending s)
    stopped_after_steps: bool = False  # the launcher ended the job once every expected step was seen
    witness: dict[str, Any] | None = None  # the witness's authenticated report (infrarsi.witness.WitnessReport)
    witness_error: str | None = None  # the witness was requested and its report is missing or not trusted
    # Every process's authenticated report when more than one reported (torchrun's and Slurm's ranks), by rank;
    # ``witness`` is rank 0's.
    witness_ranks: tuple[dict[str, Any], ...] = ()
    # The witness was requested and this executor could not run it (not the candidate's doing): the verdict
    # then says what was not checked, instead of judging the trial.
    witness_skipped: str | None = None
    # Locked files (``TrialSpec.lock``) found changed where the job ran, before or after it; None: not checked
    # (the spec named none).
    lock_changed: tuple[str, ...] | None = None
    # The host while it ran (bot/executors/host_load.py): the trial's own CPU seconds, the kernel's CPU pressure
    # stall and the hypervisor's steal over the trial, in seconds, and the CPU count; what the host lacks is absent.
    host: tuple[tuple[str, float], ...] = ()


class Executor(Protocol):
    """Launch one trial in isolation and measure it.

    Contract every implementation honours (``tests/test_executor_contract.py``):
    the job gets a scrubbed environment, its own process group, the timeout and
    the memory limit of the spec; step events are stamped by the launcher as they
    arrive; the witness runs in the job's interpreter when the spec asks for it
    and the locked files are checked where the job runs, or the execution says it
    could not (``witness_skipped``, ``lock_changed = None``); when ``execute``
    returns no process of the trial is left. Implementations subclass this
    Protocol, so the optional capabilities below have their defaults: callers
    never probe for them.
    """

    name: str

    def execute(self, spec: TrialSpec) -> Execution: ...

    def interrupt(self) -> None:
        """Ask a running ``execute`` to end its trial and return (from another thread or a signal handler)."""
        ...

    def recover_pending(self, contract: Any, journal: Any, run_id: str, candidates: Mapping[str, Any]) -> int:
        """Read back the trials a killed bot left running outside it (a scheduler's jobs outlive the bot), as
        ``infrarsi run --resume`` does; returns how many were. An executor whose trials die with the bot has
        none: the default."""
        del contract, journal, run_id, candidates
        return 0

    def host_busy(self) -> float | None:
        """The share of all the CPUs of the host where trials run that other work takes, read over a moment while
        no trial runs (a stage that meets disturbed runs waits for it to fall: infrarsi/quiet.py); None
        when the executor cannot see that host (a runner's, a scheduler's node): the default. Per-trial
        disturbance is read from what the launcher recorded where the trial ran, on every executor."""
        return None
