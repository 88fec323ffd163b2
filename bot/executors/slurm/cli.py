"""The driver: Slurm's own command-line tools, called the way a person would call them.

``sbatch --parsable`` submits, ``scontrol show job -o`` is polled for the state
(it works without accounting; finished jobs stay visible for ``MinJobAge``),
``sacct -P --noconvert`` adds per-step MaxRSS when slurmdbd runs, ``scancel``
cancels. Every call gets the bot's ``SLURM_CONF`` (without it the clients try a
DNS SRV lookup); nothing of the bot's environment reaches a job through these
calls, because ``sbatch`` is always given ``--export=NIL`` (only ``SLURM_*``) by the caller.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from infrarsi.errors import NOT_RIGHT, InfraRSIError

PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                            "SUSPENDED", "STOPPED"})
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                             "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})


class SlurmError(InfraRSIError, RuntimeError):
    """A Slurm client failed (not a job: the command itself)."""

    exit_code = NOT_RIGHT


@dataclass(frozen=True, kw_only=True, slots=True)
class JobInfo:
    """One ``scontrol show job -o`` line, the fields the executor reads."""

    job_id: str
    state: str  # the base state, e.g. RUNNING, OUT_OF_MEMORY (flags such as "+" dropped)
    reason: str
    exit_code: str  # "code:signal"
    nodes: tuple[str, ...]
    node_list: str
    batch_host: str
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    run_time_s: int | None
    mem_bytes: int | None  # memory allocated (per the job's TRES), for censoring an OUT_OF_MEMORY
    restarts: int
    raw: Mapping[str, str]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def pending_s(self) -> float | None:
        if self.submit_time and self.start_time and self.start_time >= self.submit_time:
            return (self.start_time - self.submit_time).total_seconds()
        return None

    @property
    def elapsed_s(self) -> float | None:
        if self.start_time and self.end_time and self.end_time >= self.start_time:
            return (self.end_time - self.start_time).total_seconds()
        return float(self.run_time_s) if self.run_time_s is not None else None


_FIELD = re.compile(r"(\w+(?:/\w+)?)=(\S*)")
_MEM_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _time(value: str | None) -> datetime | None:
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _run_time(value: str | None) -> int | None:
    """``[D-]HH:MM:SS`` as seconds."""
    if not value or value in ("INVALID", "UNLIMITED"):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def _tres_mem(tres: str | None) -> int | None:
    m = re.search(r"(?:^|,)mem=([0-9.]+)([KMGT]?)", tres or "")
    return int(float(m.group(1)) * _MEM_UNITS.get(m.group(2), 2**20)) if m else None


def parse_job(line: str) -> JobInfo:
    """Parse one line of ``scontrol show job -o`` (one ``Key=Value`` per field)."""
    raw = dict(_FIELD.findall(line))
    state = raw.get("JobState", "UNKNOWN").rstrip("+")
    return JobInfo(job_id=raw.get("JobId", ""), state=state, reason=raw.get("Reason", ""),
                   exit_code=raw.get("ExitCode", ""), nodes=(), node_list=raw.get("NodeList", ""),
                   batch_host=raw.get("BatchHost", ""), submit_time=_time(raw.get("SubmitTime")),
                   start_time=_time(raw.get("StartTime")), end_time=_time(raw.get("EndTime")),
                   run_time_s=_run_time(raw.get("RunTime")),
                   mem_bytes=_tres_mem(raw.get("AllocTRES") or raw.get("TRES") or raw.get("ReqTRES")),
                   restarts=int(raw.get("Restarts", "0") or 0), raw=raw)


class SlurmCLI:
    """Slurm's clients, run with ``env`` (the bot's ``SLURM_CONF``, ``PATH``)."""

    def __init__(self, env: Mapping[str, str], *, timeout_s: float = 60.0) -> None:
        self.env = dict(env)
        self.timeout_s = timeout_s
        self._accounting: bool | None = None

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=self.timeout_s,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmError(f"{argv[0]}: {e}") from None
        if check and done.returncode != 0:
            raise SlurmError(f"{' '.join(argv[:2])}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
        return done

    def submit(self, argv: list[str]) -> str:
        """``sbatch --parsable …``: the job id."""
        out = self._run(["sbatch", "--parsable", *argv]).stdout.strip()
        job_id = out.split(";", 1)[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed {out!r}, expected a job id")
        return job_id

    def show(self, job_id: str) -> JobInfo | None:
        """The job as slurmctld knows it; None when slurmctld no longer knows it (purged after MinJobAge)."""
        done = self._run(["scontrol", "show", "job", "-o", job_id], check=False)
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise SlurmError(f"scontrol show job {job_id}: {done.stderr.strip()[-500:]}")
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("JobId=")]
        if not lines:
            return None
        info = parse_job(lines[0])
        return JobInfo(**{**{f: getattr(info, f) for f in info.__slots__}, "nodes": self.hostnames(info.node_list)})

    def hostnames(self, node_list: str) -> tuple[str, ...]:
        if not node_list or node_list in ("(null)", "None"):
            return ()
        done = self._run(["scontrol", "show", "hostnames", node_list], check=False)
        return tuple(done.stdout.split()) if done.returncode == 0 else (node_list,)

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id], check=False)  # a job that already ended is not an error

    def cancel_named(self, name: str) -> None:
        self._run(["scancel", "--name", name], check=False)

    def queued(self, name: str) -> list[str]:
        """Ids of this cluster's unfinished jobs called ``name``."""
        done = self._run(["squeue", "-h", "-o", "%A", "--name", name], check=False)
        return done.stdout.split() if done.returncode == 0 else []

    def accounting(self) -> bool:
        """Whether slurmdbd stores accounting (then ``sacct`` has per-step MaxRSS)."""
        if self._accounting is None:
            done = self._run(["scontrol", "show", "config"], check=False)
            m = re.search(r"^AccountingStorageType\s*=\s*(\S+)", done.stdout, re.M)
            self._accounting = bool(m) and m.group(1) != "accounting_storage/none"
        return self._accounting

    def sacct(self, job_id: str) -> dict[str, dict[str, str]]:
        """Per-step rows of ``sacct -P --noconvert`` (JobID → fields); empty without accounting."""
        if not self.accounting():
            return {}
        fields = ["JobID", "State", "ExitCode", "ElapsedRaw", "MaxRSS", "NodeList"]
        done = self._run(["sacct", "-j", job_id, "-P", "-n", "--noconvert", "-o", ",".join(fields)], check=False)
        if done.returncode != 0:
            return {}
        rows = {}
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == len(fields):
                rows[parts[0]] = dict(zip(fields, parts))
        return rows
