"""What the experience bank remembers: one :class:`Finding` per verified (or failed) candidate.

A finding says "on this hardware, for this workload, this candidate did that".
It is the unit that travels between tuning runs, between repositories and
between clusters, so it is:

* **self-describing**: it carries both fingerprints, so a reader on another
  cluster can judge how far it transfers (:mod:`infrarsi.bank.similarity`);
* **content-addressed**: its ``id`` is the sha256 of its canonical JSON, so
  the same finding recorded twice, imported twice or synced from two clones is
  one finding, and a file named after its id never needs to change;
* **versioned**: it carries ``schema_version`` and is upgraded when read
  (:func:`upgrade`), never rewritten in place: a bank written by an older
  InfraRSI stays readable, and its ids stay what they were.

``created_at`` is deliberately *not* part of the id: recording the same result
of the same run a second time (say, after a crash between two steps) must not
make it count twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn

from infrarsi.trial_record import Candidate

FINDING_SCHEMA_VERSION = 1

Scalar = str | int | float | bool | None

#: The keys a hardware fingerprint is compared on (others are kept, not compared).
HARDWARE_KEYS: tuple[str, ...] = (
    "device", "cpu_model", "cpu_count", "memory_bytes", "gpu_model", "gpu_count", "gpu_memory_bytes",
    "torch", "cuda", "world_size",
)
#: Every workload fingerprint has exactly these keys at least (missing ones are None).
WORKLOAD_KEYS: tuple[str, ...] = (
    "family", "parameters", "sequence_length", "global_batch", "world_size", "experts", "top_k",
)
_HARDWARE_INTS = frozenset({"cpu_count", "memory_bytes", "gpu_count", "gpu_memory_bytes", "world_size"})
_WORKLOAD_INTS = frozenset(WORKLOAD_KEYS) - {"family"}


class FindingOutcome(StrEnum):
    """How the candidate ended: a verdict of verification, or the way its trial failed."""

    PROMOTED = "promoted"  # verified faster, every invariant held
    NOT_SIGNIFICANT = "not_significant"  # ran fine, no effect we could tell from noise
    INVALID = "invalid"  # ran, but computed something else (an invariant broke)
    QUARANTINED = "quarantined"  # too good to believe without a human
    OOM = "oom"
    CRASH = "crash"
    TIMEOUT = "timeout"
    REJECTED = "rejected"  # never launched: the patch did not apply here
    INTERRUPTED = "interrupted"


#: Outcomes that say "do not try this here" (weighed against a candidate when transferring).
FAILURE_OUTCOMES = frozenset({FindingOutcome.INVALID, FindingOutcome.OOM, FindingOutcome.CRASH,
                              FindingOutcome.TIMEOUT})


class FrozenMap(dict[str, Scalar]):
    """A dict that refuses changes, hashes, pickles and serialises like a plain dict.

    A finding's id is computed from its fingerprints once; letting a caller
    mutate them afterwards would silently make the id a lie.
    """

    __slots__ = ()

    def _refuse(self, *_: object, **__: object) -> NoReturn:
        raise TypeError("fingerprints of a finding are immutable; build a new Finding instead")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self),))


def _fail(what: str, key: str, value: object, expected: str) -> NoReturn:
    raise ValueError(f"{what}[{key!r}] = {value!r}: expected {expected}")


def _as_int(what: str, key: str, value: object) -> int | None:
    """Counts are ints; ``1.3e9`` from a JSON file means 1300000000 (and must hash like it)."""
    if value is None:
        return None
    if isinstance(value, bool):
        _fail(what, key, value, "an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    _fail(what, key, value, "an integer")


def _scalar(what: str, key: str, value: object) -> Scalar:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            _fail(what, key, value, "a finite number")
        return value
    _fail(what, key, value, "a string, number, boolean or null")


def _freeze(what: str, data: Mapping[str, object], *, ints: frozenset[str], fill: Iterable[str] = ()) -> FrozenMap:
    out: dict[str, Scalar] = {key: None for key in fill}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"{what} keys must be strings, got {key!r}")
        out[key] = _as_int(what, key, value) if key in ints else _scalar(what, key, value)
    return FrozenMap(sorted(out.items()))


def hardware_fingerprint(raw: Mapping[str, Any], *, world_size: int | None = None) -> FrozenMap:
    """The comparable part of a doctor fingerprint (``bot.stages.doctor.device_probe``): :data:`HARDWARE_KEYS` only.

    Everything else a fingerprint may hold (platform strings, project metadata
    with local paths) is left out, because findings are shared with other
    clusters and only these keys are compared anyway.
    """
    picked = {key: raw.get(key) for key in HARDWARE_KEYS}
    if world_size is not None:
        picked["world_size"] = world_size
    return normalize_hardware(picked)


def workload_fingerprint(*, family: str | None, parameters: int | None = None, sequence_length: int | None = None,
                         global_batch: int | None = None, world_size: int | None = None, experts: int | None = None,
                         top_k: int | None = None) -> FrozenMap:
    """A workload fingerprint with every key of :data:`WORKLOAD_KEYS` (family as in the contract)."""
    return normalize_workload({"family": family, "parameters": parameters, "sequence_length": sequence_length,
                               "global_batch": global_batch, "world_size": world_size, "experts": experts,
                               "top_k": top_k})


def normalize_hardware(data: Mapping[str, object]) -> FrozenMap:
    """Every key of :data:`HARDWARE_KEYS` (None if unknown) plus any scalar extras, counts as ints."""
    return _freeze("hardware", data, ints=_HARDWARE_INTS, fill=HARDWARE_KEYS)


def normalize_workload(data: Mapping[str, object]) -> FrozenMap:
    family = data.get("family")
    if family is not None and not isinstance(family, str):
        _fail("workload", "family", family, "a string such as 'dense' or 'moe'")
    fixed = {**data, "family": family.strip().lower() if isinstance(family, str) else None}
    return _freeze("workload", fixed, ints=_WORKLOAD_INTS, fill=WORKLOAD_KEYS)


def _ratio(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"effect.{name} = {value!r}: expected a positive finite number or None")
    return float(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Effect:
    """The verified effect, as ratios to the baseline (``< 1`` is better for both).

    ``time_ratio`` is candidate step time / baseline step time, the inverse of
    the ``speedup`` a :class:`~infrarsi.stats.Comparison` reports; its
    interval is ``[ci_low, ci_high]``. Ratios rather than seconds, because
    seconds do not transfer between machines and ratios roughly do.
    """

    time_ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    memory_ratio: float | None = None  # candidate peak memory / baseline peak memory

    def __post_init__(self) -> None:
        for name in ("time_ratio", "ci_low", "ci_high", "memory_ratio"):
            object.__setattr__(self, name, _ratio(name, getattr(self, name)))
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"effect interval [{self.ci_low}, {self.ci_high}] is reversed")

    @staticmethod
    def from_speedup(speedup: float | None, ci_low: float | None = None, ci_high: float | None = None,
                     memory_ratio: float | None = None) -> Effect:
        """From a verdict's ``speedup`` (baseline/candidate) and its interval: inverted, bounds swapped."""
        inv = lambda x: None if x is None else 1.0 / x  # noqa: E731
        return Effect(time_ratio=inv(speedup), ci_low=inv(ci_high), ci_high=inv(ci_low), memory_ratio=memory_ratio)

    @property
    def gain(self) -> float:
        """Fraction of step time saved (``1 - time_ratio``), 0 when unknown or slower."""
        return max(0.0, 1.0 - self.time_ratio) if self.time_ratio is not None else 0.0

    def to_dict(self) -> dict[str, float | None]:
        return {"time_ratio": self.time_ratio, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "memory_ratio": self.memory_ratio}


def canonical_json(data: Any) -> str:
    """The one JSON spelling ids are computed from: sorted keys, no spaces, no NaN."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _candidate_dict(candidate: Candidate) -> dict[str, Any]:
    return {"knobs": [[k, v] for k, v in candidate.knobs], "patches": list(candidate.patches)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One candidate's result on one (hardware, workload). Leave ``id`` empty: it is computed.

    Fingerprints are normalised on construction (counts become ints, the
    workload gets every key of :data:`WORKLOAD_KEYS`, the candidate is put in
    canonical order), so two findings that mean the same thing get one id.
    """

    schema_version: int = FINDING_SCHEMA_VERSION
    hardware: Mapping[str, Scalar]
    workload: Mapping[str, Scalar]
    candidate: Candidate
    effect: Effect = field(default_factory=Effect)
    outcome: FindingOutcome
    run_id: str
    repo: str
    created_at: float = field(default_factory=time.time)
    id: str = ""

    def __post_init__(self) -> None:
        if self.schema_version != FINDING_SCHEMA_VERSION:
            raise ValueError(f"build findings at schema {FINDING_SCHEMA_VERSION}; older ones go through from_dict")
        object.__setattr__(self, "hardware", normalize_hardware(self.hardware))
        object.__setattr__(self, "workload", normalize_workload(self.workload))
        object.__setattr__(self, "candidate", Candidate.of(dict(self.candidate.knobs), self.candidate.patches))
        object.__setattr__(self, "outcome", FindingOutcome(self.outcome))
        if not isinstance(self.run_id, str) or not isinstance(self.repo, str):
            raise ValueError("run_id and repo must be strings")
        object.__setattr__(self, "created_at", float(self.created_at))
        if not self.id:
            object.__setattr__(self, "id", self.content_id())

    def __hash__(self) -> int:
        return hash(self.id)

    def content_id(self) -> str:
        """sha256 of the canonical JSON of everything but ``id`` and ``created_at``."""
        payload = self.to_dict()
        del payload["id"], payload["created_at"]
        return hashlib.sha256(canonical_json(payload).encode()).hexdigest()

    @property
    def family(self) -> str | None:
        value = self.workload.get("family")
        return value if isinstance(value, str) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "id": self.id,
            "hardware": dict(self.hardware),
            "workload": dict(self.workload),
            "candidate": _candidate_dict(self.candidate),
            "effect": self.effect.to_dict(),
            "outcome": self.outcome.value,
            "run_id": self.run_id,
            "repo": self.repo,
            "created_at": self.created_at,
        }

    def to_json(self, *, pretty: bool = False) -> str:
        """Canonical JSON (compact), or an indented form for files people read; both deterministic."""
        if pretty:
            return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        return canonical_json(self.to_dict())

    @staticmethod
    def from_json(text: str | bytes) -> Finding:
        return Finding.from_dict(json.loads(text))

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Finding:
        """Read a stored finding, upgrading older schemas; a current-schema id must match its content."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a finding is a JSON object, got {type(data).__name__}")
        stored_version = int(data.get("schema_version", 1))
        data = upgrade(dict(data))
        try:
            cand = data["candidate"]
            finding = Finding(
                hardware=data["hardware"], workload=data["workload"],
                candidate=Candidate.of({str(k): v for k, v in cand.get("knobs", [])}, tuple(cand.get("patches", ()))),
                effect=Effect(**dict(data.get("effect") or {})),
                outcome=FindingOutcome(data["outcome"]),
                run_id=data["run_id"], repo=data["repo"], created_at=data.get("created_at", 0.0),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed finding: {exc!r}") from exc
        stored_id = data.get("id")
        if stored_id:
            if stored_version == FINDING_SCHEMA_VERSION and stored_id != finding.id:
                raise ValueError(f"finding id {stored_id} does not match its content ({finding.id}); "
                                 "the record was edited or damaged")
            # An upgraded record keeps the id it was born with: files named after it stay valid.
            object.__setattr__(finding, "id", stored_id)
        return finding


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a stored finding up to the current schema (version 1 is the first; later ones add steps here)."""
    version = int(data.get("schema_version", 1))
    if version > FINDING_SCHEMA_VERSION:
        raise ValueError(f"finding has schema {version}, newer than this InfraRSI ({FINDING_SCHEMA_VERSION}); "
                         "upgrade InfraRSI to read it")
    data["schema_version"] = FINDING_SCHEMA_VERSION
    return data
