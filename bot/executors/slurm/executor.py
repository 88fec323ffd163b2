"""The bot side of the Slurm executor: submit one batch job per trial, wait for it, read its record back.

Each ``execute`` writes the trial's launch into its own directory under the
shared working directory, submits it (``sbatch --export=NIL``), polls
``scontrol show job`` until the job is over and merges the agents' records with
what the scheduler says. The scheduler's verdict wins where it knows better:

=============================  =====================================================
job state                      outcome (through ``infrarsi.measure.classify``)
=============================  =====================================================
COMPLETED / FAILED             the agents' records (a FAILED job without one: crash).
                               A multi-rank job the bot ended after its measured
                               steps reads FAILED by design: rank 0's agent exits
                               non-zero so that srun stops the peers
OUT_OF_MEMORY                  ``oom``, peak censored at the job's memory
TIMEOUT                        ``timeout``
CANCELLED                      ``interrupted`` (by the bot, or by someone else: said so)
NODE_FAIL / BOOT_FAIL          ``crash`` naming the node; rerun once elsewhere when
                               ``retry_node_fail``
PREEMPTED                      with ``requeue`` the job is waited for again, else
                               ``interrupted``
=============================  =====================================================

The cost is the allocation's elapsed time (the scheduler's start to end) times
its devices; time spent pending is in the placement, never charged. Every job
still in the queue when ``execute`` leaves (an interrupt, an exception) is
cancelled. Thread-safe: ``--parallel K`` runs K ``execute`` calls at once, so K
jobs are submitted.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.executors.environment import scrubbed_environment
from bot.executors.slurm.cli import JobInfo, SlurmCLI, SlurmError
from bot.executors.slurm.logs import copy_logs
from bot.executors.slurm.recover import SubmittedJobs, recover_pending
from bot.executors.slurm.records import (
    BATCH_LOG,
    POINTER_FILE,
    SCRIPT_FILE,
    SPEC_FILE,
    merge_ranks,
    read_json,
    read_ranks,
    spec_from_dict,
    spec_to_dict,
    write_json,
)
from bot.executors.slurm.script import batch_script, sbatch_args, time_limit_min
from infrarsi.contract.model import SlurmLaunch
from infrarsi.seams.executor import Executor, Execution, TrialSpec

# What the bot's own Slurm clients (sbatch, scontrol, scancel) run with: enough to find the cluster.
CLIENT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "SLURM_CONF")
NODE_FAILURES = ("NODE_FAIL", "BOOT_FAIL")
_OVER_MEMORY = re.compile(r"[Ee]xceeded (job )?memory limit")
_TRIAL_LOG = re.compile(r"logs/([^/]+)/(\d+)/?$")


def client_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k in CLIENT_ENV or k.startswith(("SBATCH_", "LC_"))}


def job_name(spec: TrialSpec) -> str:
    """``infrarsi-<run>-<trial>`` for a trial of a run (its log directory says which), else ``infrarsi-trial``."""
    m = _TRIAL_LOG.search((spec.log_dir or "").replace(os.sep, "/"))
    return f"infrarsi-{m.group(1)}-{m.group(2)}" if m else "infrarsi-trial"


class SlurmExecutor(Executor):
    """An :class:`infrarsi.seams.executor.Executor` whose trials are Slurm batch jobs."""

    name = "slurm"

    def __init__(self, settings: SlurmLaunch, *, workdir: Path, on_step: Callable[[int], None] | None = None,
                 stop: threading.Event | None = None, environ: Mapping[str, str] | None = None,
                 python: str = sys.executable, passthrough_env: tuple[str, ...] = (),
                 poll_s: float | None = None) -> None:
        self.settings = settings
        self.workdir = Path(workdir)
        self.on_step = on_step
        self.environ = dict(os.environ if environ is None else environ)
        self.cli = SlurmCLI(client_environment(self.environ))
        self.python = python
        self.passthrough_env = passthrough_env
        self.poll_s = poll_s if poll_s is not None else settings.poll_s
        self._stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._live: set[str] = set()
        self._cancelled: set[str] = set()  # jobs this bot cancelled (anything else cancelled was someone else)

    # -- control ---------------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Cancel every job this executor has in the queue; the waiting ``execute`` calls record them interrupted."""
        self._stop.set()
        with self._lock:
            live = sorted(self._live)
        for job_id in live:
            self._cancel(job_id)

    def _cancel(self, job_id: str) -> None:
        with self._lock:
            self._cancelled.add(job_id)
        try:
            self.cli.cancel(job_id)
        except SlurmError:
            pass

    def submitted(self) -> list[str]:
        """Jobs submitted by this executor that have not been seen to end."""
        with self._lock:
            return sorted(self._live)

    # -- one trial -------------------------------------------------------------------------------------
    def execute(self, spec: TrialSpec) -> Execution:
        name = job_name(spec)
        job_dir = self.workdir / f"{name}-{uuid.uuid4().hex[:8]}"
        try:
            self._prepare(spec, job_dir)
        except (OSError, ValueError) as e:
            return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0, devices=self.settings.devices,
                             stderr_tail=f"could not prepare the Slurm job in {job_dir}: {e}")
        exclude: tuple[str, ...] = ()
        attempts: list[str] = []
        while True:
            try:
                job_id = self.cli.submit(sbatch_args(self.settings, job_dir=job_dir, name=name,
                                                     timeout_s=spec.timeout_s, exclude=exclude))
            except SlurmError as e:
                return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0,
                                 devices=self.settings.devices, stderr_tail=f"could not submit the trial: {e}")
            attempts.append(job_id)
            with self._lock:
                self._live.add(job_id)
            if spec.log_dir:
                Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
                write_json(Path(spec.log_dir) / POINTER_FILE, {"schema_version": 1, "job_id": job_id,
                                                               "job_dir": str(job_dir), "attempts": attempts})
            ended = False
            try:
                info = self.wait(job_id, timeout_s=spec.timeout_s)
                ended = True
            finally:
                if not ended:  # leaving early (an exception, Ctrl-C): nothing of ours stays in the queue
                    self._cancel(job_id)
                    with self._lock:
                        self._live.discard(job_id)
            execution = self.read_back(job_id, job_dir, info, spec=spec, attempts=attempts)
            if (info is not None and info.state in NODE_FAILURES and self.settings.retry_node_fail
                    and len(attempts) == 1 and not self._stop.is_set()):
                exclude = info.nodes
                for stale in job_dir.glob("record.*.json"):
                    stale.unlink()
                continue
            if spec.log_dir:
                copy_logs(job_dir, Path(spec.log_dir))
            if self.on_step and execution.events:
                self.on_step(len(execution.events))
            return execution

    def _prepare(self, spec: TrialSpec, job_dir: Path) -> None:
        job_dir.mkdir(parents=True, exist_ok=False)
        # the bot's environment, scrubbed as for a local trial; the node adds its own SLURM_* and devices
        base = {k: v for k, v in scrubbed_environment(base=self.environ, passthrough=self.passthrough_env).items()
                if not k.startswith("SLURM_")}
        scrubbed_environment(dict(spec.env))  # a secret-looking knob variable is refused here, before submit
        write_json(job_dir / SPEC_FILE, spec_to_dict(spec, base_env=base, world_size=self.settings.world_size,
                                                     tasks_per_node=self.settings.tasks_per_node), mode=0o600)
        script = job_dir / SCRIPT_FILE
        script.write_text(batch_script(self.settings, job_dir=job_dir, python=self.python,
                                       slurm_conf=self.environ.get("SLURM_CONF"), path=self.environ.get("PATH")), encoding="utf-8")
        script.chmod(0o755)

    def wait(self, job_id: str, *, timeout_s: float) -> JobInfo | None:
        """Poll until the job is over (None: slurmctld forgot it). An interrupt cancels it and waits for the end.

        The bot's own deadline is generous (the job's time limit plus five minutes after it started):
        the agent and Slurm end a slow trial; this only guards against a scheduler that lost the job.
        """
        limit_s = time_limit_min(self.settings, timeout_s) * 60.0 + 300.0
        started: float | None = None
        asked_to_stop = False
        info: JobInfo | None = None
        while True:
            try:
                info = self.cli.show(job_id)
            except SlurmError:  # slurmctld busy or restarting: ask again (an interrupt still ends the wait)
                if self._stop.is_set() and asked_to_stop:
                    return info
                if self._stop.is_set():
                    asked_to_stop = True
                    self._cancel(job_id)
                time.sleep(self.poll_s)
                continue
            if info is None or (info.terminal and info.state != "PREEMPTED") or \
                    (info.state == "PREEMPTED" and not self.settings.requeue):
                return info
            if info.state == "RUNNING" and started is None:
                started = time.monotonic()
            if (self._stop.is_set() and not asked_to_stop) or \
                    (started is not None and time.monotonic() - started > limit_s and not asked_to_stop):
                asked_to_stop = True
                self._cancel(job_id)
            time.sleep(self.poll_s)

    # -- reading back ----------------------------------------------------------------------------------
    def read_back(self, job_id: str, job_dir: Path, info: JobInfo | None, *, spec: TrialSpec,
                  attempts: list[str]) -> Execution:
        """The trial as the agents recorded it, corrected by the scheduler's final state."""
        with self._lock:
            self._live.discard(job_id)
            by_us = job_id in self._cancelled
        ranks = read_ranks(job_dir)
        merged = merge_ranks({r: ex for r, (ex, _) in ranks.items()})
        nodes = info.nodes if info else ()
        placement: dict[str, Any] = {"job_id": job_id, "attempts": list(attempts),
                                     "nodes": sorted({str(f.get("node")) for _, f in ranks.values()}) or list(nodes)}
        if info is not None:
            placement.update(state=info.state, exit_code=info.exit_code, reason=info.reason,
                             pending_s=info.pending_s, elapsed_s=info.elapsed_s, scheduler_nodes=list(nodes),
                             mem_bytes=info.mem_bytes, restarts=info.restarts)
        if merged is not None:
            placement["agent_wall_s"] = merged.wall_s
        acct = self.cli.sacct(job_id) if info is not None else {}
        rss = [int(row["MaxRSS"]) for row in acct.values() if row.get("MaxRSS", "").isdigit()]
        if rss:
            placement["sacct_max_rss_bytes"] = max(rss)  # sampled once a second: a cross-check, not the peak
        if info is not None and info.state == "CANCELLED":
            placement["cancelled_by"] = "bot" if by_us else "someone else"
        devices = self.settings.devices
        where = f"slurm job {job_id}"
        batch_tail = _tail(job_dir / BATCH_LOG)
        base = merged or Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0)
        elapsed = info.elapsed_s if info is not None and info.elapsed_s is not None else base.wall_s
        ex = replace(base, wall_s=max(elapsed, 0.0), devices=devices,
                     placement=tuple(sorted(placement.items())))
        if info is None:
            return replace(ex, returncode=None, killed_for=None,
                           stderr_tail=_join(ex.stderr_tail, f"{where} is no longer known to slurmctld "
                                             "(purged or lost) and left no complete record"))
        node_text = ",".join(nodes) or info.node_list or "?"
        state = info.state
        if state == "OUT_OF_MEMORY" or (state in ("FAILED", "CANCELLED") and _OVER_MEMORY.search(batch_tail)):
            # the second: no cgroups, so slurmstepd's own poll (OverMemoryKill) killed the step
            mem = info.mem_bytes or self.settings.memory_bytes or 0
            return replace(ex, killed_for="memory", peak_rss_bytes=max(ex.peak_rss_bytes, mem),
                           stderr_tail=_join(ex.stderr_tail, batch_tail,
                                             f"{where} OUT_OF_MEMORY on {node_text}: over its {mem} bytes"))
        if state == "TIMEOUT":
            return replace(ex, killed_for="timeout",
                           stderr_tail=_join(ex.stderr_tail, f"{where} reached its time limit "
                                             f"({time_limit_min(self.settings, spec.timeout_s)} min) on {node_text}"))
        if state in ("CANCELLED", "PREEMPTED"):
            who = "the bot" if by_us else ("the scheduler (preempted)" if state == "PREEMPTED" else "someone else")
            return replace(ex, killed_for="interrupt",
                           stderr_tail=_join(ex.stderr_tail, f"{where} {state} by {who} on {node_text}"))
        if state in NODE_FAILURES:
            return replace(ex, returncode=None, killed_for=None,
                           stderr_tail=_join(ex.stderr_tail, batch_tail,
                                             f"{where} ended {state} on node {node_text}: the node failed under "
                                             f"the trial (reason {info.reason})"))
        if state in ("COMPLETED", "FAILED") and merged is not None and len(ranks) >= 1:
            return ex
        return replace(ex, returncode=None if merged is None else ex.returncode, killed_for=None,
                       stderr_tail=_join(ex.stderr_tail, batch_tail,
                                         f"{where} ended {state} (exit {info.exit_code}, reason {info.reason}) on "
                                         f"{node_text} before every agent wrote its record"))

    def follow(self, job_id: str, job_dir: Path, *, attempts: list[str]) -> Execution:
        """Wait for a job submitted earlier (by a bot that died) and read it back: ``--resume``."""
        data = read_json(job_dir / SPEC_FILE)
        spec = spec_from_dict(data) if data else TrialSpec(argv=(), cwd=str(job_dir))
        with self._lock:
            self._live.add(job_id)
        ended = False
        try:
            info = self.wait(job_id, timeout_s=spec.timeout_s)
            ended = True
        finally:
            if not ended:
                self._cancel(job_id)
                with self._lock:
                    self._live.discard(job_id)
        return self.read_back(job_id, job_dir, info, spec=spec, attempts=attempts)

    def recover_pending(self, contract: Any, journal: Any, run_id: str, candidates: Mapping[str, Any]) -> int:
        """Reconcile the trials a dead bot left pending with their jobs; returns how many were read back."""
        jobs = SubmittedJobs(cli=self.cli, follow=self.follow, executor=self.name)
        return recover_pending(jobs, contract, journal, run_id, candidates)


def _tail(path: Path, max_chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-max_chars:].strip()
    except OSError:
        return ""


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p and p.strip())[-4000:]
