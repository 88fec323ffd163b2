"""The local process executor: one trial as a child process of the bot on this machine."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bot.executors.environment import scrubbed_environment
from bot.executors.host_load import HOST_SAMPLE_S, HostCounters, busy_share, host_facts
from bot.executors.locked_files import changed_locked_files, merged, refused
from bot.executors.process_tree import ProcessTree, die_with_parent
from bot.executors.supervise import supervise
from bot.executors.witness import device_memory_env, open_channel, step_clock_env, witness_final_step
from bot.executors.streams import (LineReader, StepCollector, ignore, on_step_line, open_probe_pipe,
                                   probe_handler, regex_handler)
from infrarsi.seams.executor import Executor, Execution, TrialSpec
from infrarsi.rundir import STDERR_LOG, STDOUT_LOG
from infrarsi.probe import FD_ENV


class LocalExecutor(Executor):
    """Runs a trial in its own session with a scrubbed environment, a timeout and a memory limit.

    Memory is sampled every ``sample_interval_s`` over the whole process tree; the
    kernel's own high-water mark of the root process (``wait4``'s ``ru_maxrss``)
    is folded in after exit so that a spike between samples is not lost.
    """

    name = "local"

    def __init__(self, *, sample_interval_s: float = 0.05, passthrough_env: tuple[str, ...] = (),
                 base_env: dict[str, str] | None = None,
                 on_step: Callable[[int], None] | None = None, stop: threading.Event | None = None) -> None:
        self.sample_interval_s = sample_interval_s
        self.passthrough_env = passthrough_env
        self.base_env = base_env
        self.on_step = on_step
        self._stop = stop or threading.Event()

    def host_busy(self) -> float | None:
        """This machine's busy share (its trials run here)."""
        return busy_share(HOST_SAMPLE_S)

    def interrupt(self) -> None:
        """Ask a running ``execute`` to kill its trial and return (from another thread or a signal handler)."""
        self._stop.set()

    def execute(self, spec: TrialSpec) -> Execution:
        self._stop.clear()
        before = changed_locked_files(spec)
        if before:
            return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0,
                             stderr_tail=refused(spec, before), lock_changed=before)
        collector = StepCollector(source=spec.source)
        probe_file, probe_fd = open_probe_pipe()
        env = scrubbed_environment({**dict(spec.env), FD_ENV: str(probe_fd)}, base=self.base_env,
                                   passthrough=self.passthrough_env)
        env.update(device_memory_env(env.get("PYTHONPATH")))
        env.update(step_clock_env(spec))
        witness = open_channel(count_step=spec.witness, pythonpath=env.get("PYTHONPATH"),
                               final_step=witness_final_step(spec)) if spec.witness else None
        if witness is not None:
            env.update(witness.env)
        log_dir = Path(spec.log_dir) if spec.log_dir else None
        if log_dir:
            log_dir.mkdir(parents=True, exist_ok=True)
        host_before = HostCounters.read()
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(
                list(spec.argv), cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, pass_fds=(probe_fd, *(witness.child_fds if witness else ())), preexec_fn=die_with_parent,
            )
        except OSError as e:
            os.close(probe_fd)
            probe_file.close()
            if witness is not None:
                witness.abandon()
            return Execution(events=(), returncode=127, wall_s=time.perf_counter() - start, peak_rss_bytes=0,
                             stderr_tail=f"could not start {spec.argv[0]!r}: {e}", lock_changed=before)
        os.close(probe_fd)  # the child holds the only write end now: EOF when it (and its heirs) exit
        if witness is not None:
            witness.started()
        assert proc.stdout is not None and proc.stderr is not None
        on_stdout = regex_handler(collector, spec.stdout_regex) if spec.source == "stdout" and spec.stdout_regex \
            else ignore
        readers = [
            LineReader(probe_file, probe_handler(collector)),
            LineReader(proc.stdout, on_step_line(spec, "stdout", on_stdout),
                       log_path=log_dir / STDOUT_LOG if log_dir else None),
            LineReader(proc.stderr, on_step_line(spec, "stderr", on_stdout),
                       log_path=log_dir / STDERR_LOG if log_dir else None),
        ]
        for reader in readers:
            reader.start()

        tree = ProcessTree(proc.pid)
        try:
            run = supervise(proc, spec, start=start, sample=tree.rss_bytes, kill=tree.kill, stop=self._stop,
                            interval_s=self.sample_interval_s, steps=lambda: len(collector.steps),
                            on_step=self.on_step)
        finally:
            for reader in readers:
                reader.join(timeout=5.0)
            for stream in (probe_file, proc.stdout, proc.stderr):
                stream.close()

        seen = witness.result() if witness is not None else None
        killed, maxrss, peak, status, wall = run.killed_for, run.maxrss_bytes, run.peak_bytes, run.status, run.wall_s
        if spec.memory_limit_bytes is not None and killed is None and maxrss >= spec.memory_limit_bytes:
            killed = "memory"  # the kernel saw a peak the sampler missed
        return Execution(
            events=tuple(collector.steps),
            returncode=status,
            wall_s=wall,
            peak_rss_bytes=max(peak, maxrss),
            killed_for=killed,
            stderr_tail=readers[2].tail_text(),
            probe_oom=collector.oom,
            device_peak_mem_bytes=collector.device_peak,
            device_steady_bytes=collector.device_steady,
            device_capacity_bytes=collector.device_capacity,
            steady_rss_bytes=run.steady_bytes,
            pids=tuple(sorted(tree.seen)),
            phases=tuple(collector.phases),
            info=tuple(sorted(collector.info.items())),
            stopped_after_steps=run.stopped,
            witness=seen.report.to_dict() if seen is not None and seen.report is not None else None,
            witness_error=seen.error if seen is not None else None,
            lock_changed=merged(before, changed_locked_files(spec)),
            host=host_facts(host_before, HostCounters.read(), cpu_s=run.cpu_s),
        )
