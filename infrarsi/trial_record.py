"""What a trial is on the record: the candidate, its outcome, its metrics and its cost.

Records are frozen and carry a schema version; older records are upgraded when
read (:func:`TrialRecord.from_dict`), never rewritten in place. A failed trial is
as much a record as a good one: failure is data.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from infrarsi.contract.knob_codec import assignment_text
from infrarsi.contract.model import KnobValue

#: 2 added ``TrialMetrics.steady_mem_bytes`` (absent, it reads as None); 3 the GPU's held memory, capacity and
#: whether its peak is censored; 4 every rank's witness report, why a trial was not witnessed, and whether the
#: launcher checked the lock where the job ran. An added field bumps the version: older code then says its
#: record is newer, rather than failing on an unknown keyword.
TRIAL_SCHEMA_VERSION = 5


class Outcome(StrEnum):
    OK = "ok"
    OOM = "oom"  # censored: the peak is at least the limit
    CRASH = "crash"
    TIMEOUT = "timeout"
    INVALID = "invalid"  # it ran, but an invariant broke
    REJECTED = "rejected"  # never launched: the patch did not apply or left the scope
    INTERRUPTED = "interrupted"  # the bot died while it ran


#: How a ``rejected`` record's reason starts when the patch was quarantined: it added something a speed patch never
#: needs (bot/patching/suspicious.py), and a person should look at it; it never ran.
QUARANTINED = "quarantined for review: "


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """A point in the joint space: knob values plus a set of code patches.

    Equal candidates hash equal whatever order they were built in.
    """

    knobs: tuple[tuple[str, KnobValue], ...] = ()
    patches: tuple[str, ...] = ()

    @staticmethod
    def of(knobs: dict[str, KnobValue] | None = None, patches: tuple[str, ...] | list[str] = ()) -> Candidate:
        return Candidate(knobs=tuple(sorted((knobs or {}).items())), patches=tuple(sorted(set(patches))))

    def knob_dict(self) -> dict[str, KnobValue]:
        return dict(self.knobs)

    def digest(self) -> str:
        payload = json.dumps({"knobs": [[k, v] for k, v in self.knobs], "patches": list(self.patches)},
                             sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """The text form ``k=v … +patch`` (``(baseline)`` when empty); :func:`parse_description` reads it back."""
        parts = [assignment_text(k, v) for k, v in self.knobs] + [f"+{p}" for p in self.patches]
        return " ".join(parts) or "(baseline)"


def parse_description(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """:meth:`Candidate.describe`'s text read back: ``(name, value text)`` per knob and the patch ids. Values stay
    text; the caller types them against its contract (a bare ``name`` without ``=`` keeps an empty value)."""
    knobs: list[tuple[str, str]] = []
    patches: list[str] = []
    for part in text.split():
        if part == "(baseline)":
            continue
        if part.startswith("+"):
            patches.append(part[1:])
        else:
            name, _, value = part.partition("=")
            knobs.append((name, value))
    return knobs, patches


@dataclass(frozen=True, kw_only=True, slots=True)
class StepEvent:
    """One step as the bot saw it arrive, stamped with the bot's own monotonic clock."""

    step: int | None
    stamp: float
    loss: float | None = None
    tokens: int | None = None
    child_t: float | None = None  # the candidate's own clock: a cross-check only


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialMetrics:
    """Figures of one trial, all measured by the bot outside the candidate's process."""

    # Seconds per optimizer step over the measured steps, by a statistic that holding, batching or pacing step
    # events can only make longer (infrarsi.measure: the span to the bot's stamp of the last measured event,
    # from the witness's end of the window's first step where the trial was witnessed).
    step_time_s: float | None = None
    step_time_cv: float | None = None
    step_times_s: tuple[float, ...] = ()
    tokens_per_step: int | None = None
    tokens_per_s: float | None = None
    peak_mem_bytes: int | None = None
    peak_mem_censored: bool = False  # True for an OOM: the real peak is at least peak_mem_bytes
    # GPU memory, when the job ran on one (the device memory reporter in every trial's interpreter, or the job's own
    # probe.memory): the caching allocator's peak reservation on the fullest device of any rank, what it held after
    # optimizer steps (weights, gradients, optimizer state), and what it could have grown to there. The search's
    # memory model fits these instead of the host's resident set when a run has them (infrarsi.search.models).
    device_peak_mem_bytes: int | None = None
    device_steady_mem_bytes: int | None = None
    device_capacity_bytes: int | None = None
    device_peak_censored: bool = False  # the job ran out of GPU memory: its real device peak is at least the capacity
    # The least resident memory sampled between the first and the last step: what the job holds across
    # steps (runtime, weights, optimizer state) without a step's transient memory. On a CPU the runtime
    # alone is most of a small job's peak, and no knob moves it; the memory model reads the baseline's
    # share (infrarsi.search.models). None: fewer than two step lines, so no window between them.
    steady_mem_bytes: int | None = None
    loss: tuple[float, ...] = ()  # per measured step
    warmup_loss: tuple[float, ...] = ()
    child_step_time_s: float | None = None  # what the candidate's own clock claimed
    steps_seen: int = 0
    steps_at_witness: int | None = None  # step lines that arrived before the witness reported (not at exit)
    steps_per_line: int = 1  # optimizer steps each step line stands for (timing.steps_per_line)
    wall_s: float = 0.0
    phases_s: tuple[tuple[str, float], ...] = ()  # mean seconds per measured step, by the job's clock
    parameters: int | None = None  # as the job reported it (probe.info)
    embedding_parameters: int | None = None  # probe.info: left out of N in the 6·N·tokens fallback
    witness: dict[str, Any] | None = None  # the witness's report (infrarsi.witness.WitnessReport) when witnessed
    witness_ranks: tuple[dict[str, Any], ...] = ()  # every rank's report, when more than one process reported
    witness_skipped: str | None = None  # witnessed, but the executor could not run the witness: why
    lock_checked: bool = False  # the launcher compared the locked files with the lock where the job ran
    host: tuple[tuple[str, float], ...] = ()  # the host while it ran (Execution.host): CPU, pressure, steal
    # How step_time_s was measured (infrarsi.measure.StepClock): "anchored" (from the witness's end of the
    # window's first optimizer step to the bot's stamp of the last event), "span" (the bot's own stamps), or
    # "" (no time). span_s: the bot's own first-to-last stamp span over the window; witness_span_s: the same
    # optimizer steps by the witness's clock; clock_steps: optimizer steps the figure divides by.
    clock: str = ""
    span_s: float | None = None
    witness_span_s: float | None = None
    clock_steps: int | None = None
    clock_first_step: int | None = None  # anchored: the optimizer steps the witness's span runs between
    clock_last_step: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialRecord:
    """One trial as written to the journal, before anything else happens."""

    schema_version: int = TRIAL_SCHEMA_VERSION
    run_id: str
    trial_no: int
    candidate: Candidate
    outcome: Outcome
    reason: str = ""
    metrics: TrialMetrics = field(default_factory=TrialMetrics)
    cost_s: float = 0.0  # device-seconds
    started_at: float = 0.0  # wall-clock epoch seconds, for humans
    ended_at: float = 0.0
    commit: str | None = None
    returncode: int | None = None
    stderr_tail: str = ""
    executor: str = "local"
    memory_limit_bytes: int | None = None
    audit: tuple[dict[str, Any], ...] = ()
    placement: tuple[tuple[str, Any], ...] = ()  # the scheduler's view: job id, nodes, state, pending seconds

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> TrialRecord:
        data = upgrade(dict(data))
        cand = data["candidate"]
        metrics = dict(data.get("metrics") or {})
        for key in ("step_times_s", "loss", "warmup_loss"):
            metrics[key] = tuple(metrics.get(key) or ())
        metrics["phases_s"] = tuple((str(k), float(v)) for k, v in metrics.get("phases_s") or ())
        metrics["witness_ranks"] = tuple(metrics.get("witness_ranks") or ())
        metrics["host"] = tuple((str(k), float(v)) for k, v in metrics.get("host") or ())
        return TrialRecord(
            **{**data,
               "candidate": Candidate(knobs=tuple((k, v) for k, v in cand["knobs"]), patches=tuple(cand["patches"])),
               "outcome": Outcome(data["outcome"]),
               "metrics": TrialMetrics(**metrics),
               "audit": tuple(data.get("audit") or ()),
               "placement": tuple((str(k), v) for k, v in data.get("placement") or ())})


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a stored record up to the current schema (1 -> 2 -> 3 -> 4 -> 5 add optional metrics: nothing to do;
    a record before 5 measured its step time as the median interval, which it keeps)."""
    version = int(data.get("schema_version", 1))
    if version > TRIAL_SCHEMA_VERSION:
        raise ValueError(f"trial record has schema {version}, newer than this InfraRSI ({TRIAL_SCHEMA_VERSION})")
    data["schema_version"] = TRIAL_SCHEMA_VERSION
    return data


def median_bytes(records: Sequence[TrialRecord], name: str) -> int | None:
    """The median of a ``TrialMetrics`` byte figure (``peak_mem_bytes``, a ``device_*`` one) over the ``ok``
    records that have it; None when none has."""
    values = [v for r in records if r.outcome is Outcome.OK and (v := getattr(r.metrics, name))]
    return int(statistics.median(values)) if values else None
