"""The torchrun executor: one trial as a multi-process job under ``torch.distributed.run``.

The bot starts torchrun's agent (``python -m torch.distributed.run``) in its own
session with a scrubbed environment; the agent starts one process per rank,
each in a session of its own. So the executor keeps track of every rank's
process group and kills them all (and the agent) on a timeout, a memory limit,
an interrupt, or when the job ends; the agent itself ends the job when one rank
fails, and its failure summary names the rank and its exit status.

The probe channel is a FIFO named in ``INFRARSI_PROBE_FILE``: torchrun does not
pass inherited descriptors to the ranks, every rank opens the FIFO itself, and
each event carries its rank (``RANK`` from the environment). Steps, phases and
facts come from global rank 0; out-of-memory and device-memory events from any
rank. Host memory is sampled per rank (the rank's process and its
descendants); the trial's peak is the maximum over ranks, and the memory limit
applies to each rank. Rank 0's stdout is read live (for ``timing.source =
"stdout"``); every rank's stderr and the other ranks' stdout go to files under
the log directory, and a crash reports the failed rank's stderr.

Single node: the rendezvous is c10d on a free loopback port. Multi-node: the
contract's ``[launch]`` gives ``nnodes``, ``node_rank`` and ``rdzv_endpoint``,
passed through unchanged; each node runs its own trial (see docs/distributed.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bot.executors.environment import scrubbed_environment
from bot.executors.host_load import HOST_SAMPLE_S, HostCounters, busy_share, host_facts
from bot.executors.process_tree import ProcessTree, die_with_parent
from bot.executors.supervise import supervise
from bot.executors.streams import LineReader, StepCollector, ignore, on_step_line, regex_handler
from bot.executors.locked_files import changed_locked_files, merged, refused
from bot.executors.witness import device_memory_env, step_clock_env, witness_final_step
from bot.executors.witness.ranks import SHIM_SETUP, RankChannels, merged_witness
from infrarsi.contract.model import Launch
from infrarsi.seams.executor import Executor, Execution, TrialSpec
from infrarsi.rundir import STDERR_LOG, STDOUT_LOG
from infrarsi.probe import FILE_ENV

# Run in each rank by torchrun: send this rank's stderr (and, but for rank 0, its stdout) to
# files, hand a witnessed trial's rank its own witness channel (bot/executors/witness/ranks.py), then exec the
# trial's own command, so the rank's process is the job itself.
_RANK_SHIM = """\
import os, sys
rank = os.environ.get("RANK", "0")
logs = os.environ.get("INFRARSI_RANK_LOG_DIR")
if logs:
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    os.dup2(os.open(os.path.join(logs, f"rank{rank}.stderr.log"), flags, 0o644), 2)
    if rank != "0":
        os.dup2(os.open(os.path.join(logs, f"rank{rank}.stdout.log"), flags, 0o644), 1)
""" + SHIM_SETUP + """\
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as e:
    print(f"could not start {sys.argv[1]!r}: {e}", file=sys.stderr, flush=True)
    os._exit(127)
"""

_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (for the single-node rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def torchrun_argv(launch: Launch, argv: tuple[str, ...], *, endpoint: str, run_id: str) -> list[str]:
    """The agent's command line: rendezvous and process counts from ``launch``, then the rank shim and the job."""
    local = launch.nnodes == 1
    out = [sys.executable, "-m", "torch.distributed.run",
           "--nnodes", str(launch.nnodes), "--nproc-per-node", str(launch.nproc_per_node),
           "--node-rank", str(launch.node_rank), "--rdzv-backend", launch.rdzv_backend,
           "--rdzv-endpoint", endpoint, "--rdzv-id", launch.rdzv_id or run_id,
           "--max-restarts", "0", "--monitor-interval", "0.1"]
    if local:
        out += ["--local-addr", "127.0.0.1"]
    return out + ["--no-python", sys.executable, "-c", _RANK_SHIM, *argv]


class _RankProbe:
    """Probe lines from every rank: steps, phases and facts only from rank 0."""

    def __init__(self, collector: StepCollector) -> None:
        self.collector = collector

    def __call__(self, line: str, stamp: float) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        rank = record.get("rank")
        if rank not in (None, 0, "0") and record.get("event") in ("step", "loss", "phase", "info"):
            return
        self.collector.add_probe(record, stamp)


class _Ranks:
    """The rank processes (the agent's children) and their memory, sampled per rank."""

    RESCAN_EVERY = 8  # finding descendants scans the machine's process table; memory reads are cheap

    def __init__(self, agent: int) -> None:
        self.agent = agent
        self.rank_of: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self._procs: dict[int, list[psutil.Process]] = {}
        self._samples = 0

    def sample(self, tree: ProcessTree) -> int:
        """Largest resident memory of any rank's process tree right now (updates the per-rank peaks)."""
        self._samples += 1
        if self._samples % self.RESCAN_EVERY != 1 and self._procs:
            return self._measure(self._procs)
        try:
            children = psutil.Process(self.agent).children()
        except psutil.Error:
            children = []
        found: dict[int, list[psutil.Process]] = {}
        for child in children:
            rank = self.rank_of.get(child.pid)
            if rank is None:
                try:
                    rank = int(child.environ().get("RANK", "-1"))
                except (psutil.Error, ValueError):
                    continue
                if rank < 0:
                    continue  # still the interpreter before exec; asked again next sample
                self.rank_of[child.pid] = rank
            try:
                procs = [child] + child.children(recursive=True)
            except psutil.Error:
                continue
            for proc in procs:
                tree.seen.setdefault(proc.pid, proc)
            found[rank] = procs
        self._procs = found
        return self._measure(found)

    def _measure(self, procs_by_rank: dict[int, list[psutil.Process]]) -> int:
        current = 0
        for rank, procs in procs_by_rank.items():
            rss = 0
            for proc in procs:
                try:
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        rss += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak[rank] = max(self.peak.get(rank, 0), rss)
            current = max(current, rss)
        return current


def kill_everything(tree: ProcessTree) -> None:
    """SIGKILL the agent's group, every rank's group and every process of the trial ever seen."""
    procs = tree._live()
    groups = set()
    own = os.getpgrp()
    for proc in procs:
        try:
            groups.add(os.getpgid(proc.pid))
        except (ProcessLookupError, PermissionError):
            pass
    for group in groups - {own}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    tree.kill()


class TorchrunExecutor(Executor):
    """Runs a trial as ``nproc_per_node`` ranks under torchrun; the same contract as the local executor."""

    name = "torchrun"

    def __init__(self, launch: Launch | None = None, *, sample_interval_s: float = 0.05,
                 passthrough_env: tuple[str, ...] = (), base_env: dict[str, str] | None = None,
                 on_step: Callable[[int], None] | None = None, stop: threading.Event | None = None) -> None:
        self.launch = launch or Launch(executor="torchrun", nproc_per_node=2)
        self.sample_interval_s = sample_interval_s
        self.passthrough_env = passthrough_env
        self.base_env = base_env
        self.on_step = on_step
        self._stop = stop or threading.Event()

    def host_busy(self) -> float | None:
        """This machine's busy share (its trials run here)."""
        return busy_share(HOST_SAMPLE_S)

    def interrupt(self) -> None:
        self._stop.set()

    def execute(self, spec: TrialSpec) -> Execution:
        self._stop.clear()
        work = Path(tempfile.mkdtemp(prefix="infrarsi-torchrun-"))
        try:
            return self._execute(spec, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _execute(self, spec: TrialSpec, work: Path) -> Execution:
        launch = self.launch
        before = changed_locked_files(spec)
        if before:
            return Execution(events=(), returncode=None, wall_s=0.0, peak_rss_bytes=0,
                             stderr_tail=refused(spec, before), lock_changed=before, devices=launch.nproc_per_node)
        collector = StepCollector(source=spec.source)
        fifo = work / "probe.fifo"
        os.mkfifo(fifo, stat.S_IRUSR | stat.S_IWUSR)
        read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(read_fd, True)
        hold_fd = os.open(fifo, os.O_WRONLY)  # no EOF before the ranks open it; closed when the job ends
        probe_file = os.fdopen(read_fd, "rb")
        log_dir = Path(spec.log_dir) if spec.log_dir else work / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        for old in log_dir.glob("rank*.log"):
            old.unlink()
        extra: dict[str, Any] = {**dict(spec.env), FILE_ENV: str(fifo)}
        if launch.nnodes == 1:
            extra.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env = scrubbed_environment(extra, base=self.base_env, passthrough=self.passthrough_env)
        env["INFRARSI_RANK_LOG_DIR"] = str(log_dir)  # the bot's own variable, for the rank shim
        env.update(device_memory_env(env.get("PYTHONPATH")))  # every rank reports its GPU memory on the FIFO
        env.update(step_clock_env(spec))  # every rank steps; steps are read from rank 0
        channels = RankChannels.open(work / "witness", ranks=launch.nproc_per_node, count_step=spec.witness,
                                     final_step=witness_final_step(spec)) if spec.witness else None
        if channels is not None:
            env.update(channels.env)  # the bot's own variable: the rank shim turns it into each rank's channel
        endpoint = launch.rdzv_endpoint or f"127.0.0.1:{free_port()}"
        argv = torchrun_argv(launch, spec.argv, endpoint=endpoint, run_id=f"infrarsi-{os.getpid()}-{time.time_ns()}")
        host_before = HostCounters.read()
        start = time.perf_counter()
        if not spec.argv or shutil.which(spec.argv[0], path=env.get("PATH")) is None \
                and not Path(spec.cwd, spec.argv[0]).is_file():
            os.close(hold_fd)
            probe_file.close()
            what = spec.argv[0] if spec.argv else ""
            return Execution(events=(), returncode=127, wall_s=time.perf_counter() - start, peak_rss_bytes=0,
                             stderr_tail=f"could not start {what!r}: no such file or command",
                             devices=launch.nproc_per_node)
        try:
            proc = subprocess.Popen(argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent)
        except OSError as e:
            os.close(hold_fd)
            probe_file.close()
            return Execution(events=(), returncode=127, wall_s=time.perf_counter() - start, peak_rss_bytes=0,
                             stderr_tail=f"could not start torchrun: {e}", devices=launch.nproc_per_node)
        assert proc.stdout is not None and proc.stderr is not None
        on_stdout = regex_handler(collector, spec.stdout_regex) if spec.source == "stdout" and spec.stdout_regex \
            else ignore
        readers = [
            LineReader(probe_file, _RankProbe(collector)),
            LineReader(proc.stdout, on_step_line(spec, "stdout", on_stdout), log_path=log_dir / STDOUT_LOG),
            LineReader(proc.stderr, on_step_line(spec, "stderr", on_stdout), log_path=log_dir / STDERR_LOG,
                       tail_lines=200),
        ]
        for reader in readers:
            reader.start()
        tree = ProcessTree(proc.pid)
        ranks = _Ranks(proc.pid)
        try:
            # ranks live in sessions of their own: the agent's group is not enough, hence kill_everything
            run = supervise(proc, spec, start=start, sample=lambda: ranks.sample(tree),
                            kill=lambda: kill_everything(tree), stop=self._stop, interval_s=self.sample_interval_s,
                            steps=lambda: len(collector.steps), on_step=self.on_step)
        finally:
            os.close(hold_fd)
            for reader in readers:
                reader.join(timeout=5.0)
            for stream in (probe_file, proc.stdout, proc.stderr):
                stream.close()

        killed, peak, status, wall = run.killed_for, run.peak_bytes, run.status, run.wall_s
        agent_tail = readers[2].tail_text(20000)
        failed_rank, returncode = None, status
        cause = _ROOT_CAUSE.search(agent_tail)
        if cause and killed is None and status != 0:
            failed_rank, returncode = int(cause.group(1)), int(cause.group(2))
        tail = _file_tail(log_dir / f"rank{failed_rank if failed_rank is not None else 0}.stderr.log")
        if not tail.strip() or (killed is None and status != 0 and failed_rank is None):
            tail = "\n".join(x for x in (tail, agent_tail[-4000:]) if x.strip())
        return Execution(
            events=tuple(collector.steps),
            returncode=returncode,
            wall_s=wall,
            peak_rss_bytes=peak,
            killed_for=killed,
            stderr_tail=tail[-4000:],
            probe_oom=collector.oom,
            device_peak_mem_bytes=collector.device_peak,
            device_steady_bytes=collector.device_steady,
            device_capacity_bytes=collector.device_capacity,
            steady_rss_bytes=run.steady_bytes,
            devices=launch.nproc_per_node,
            pids=tuple(sorted(tree.seen)),
            phases=tuple(collector.phases),
            info=tuple(sorted(collector.info.items())),
            stopped_after_steps=run.stopped,
            failed_rank=failed_rank,
            **(merged_witness(channels.results()) if channels is not None else {}),
            lock_changed=merged(before, changed_locked_files(spec)),
            host=host_facts(host_before, HostCounters.read(), cpu_s=run.cpu_s),
        )


def _file_tail(path: Path, max_chars: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_chars))
            return f.read().decode("utf-8", "replace").rstrip("\n")
    except OSError:
        return ""
