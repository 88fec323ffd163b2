"""Code patches as the engine sees them: what a patch is, where it acts, what it should buy.

The engine plans with these records and never touches source code: applying a
patch (libcst) is the bot's job (:mod:`bot.patching`). A patch is either a
named codemod from the bot's registry or the full source of one replacement
definition; either way it names the qualified symbols it touches so that the
contract's editable scope can be checked before anything runs.

``Effect`` is a prior, not a measurement: the search uses it to decide what to
try first and how much evidence a trial needs, then replaces it with what the
trials show. Ratios are multiplicative (``time_ratio=0.7`` means a step takes
70% of the time it took before) and uncertain in log space, because speed-ups
compose by multiplication and cannot go below zero.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping

PatchKind = Literal["codemod", "replacement"]

SPEC_VERSION = 1
_KINDS: tuple[str, ...] = ("codemod", "replacement")


@dataclass(frozen=True, kw_only=True, slots=True)
class Effect:
    """Expected multiplicative effect on step time and peak memory, as log-normal priors.

    ``log(ratio_observed) ~ Normal(log(time_ratio), time_sigma)``, likewise for
    memory. Every field is required: a prior nobody wrote down is not a prior.
    ``source`` says where the numbers come from (a benchmark, a paper, a guess).
    """

    time_ratio: float
    time_sigma: float
    mem_ratio: float
    mem_sigma: float
    source: str

    def __post_init__(self) -> None:
        for name in ("time_ratio", "mem_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"Effect.{name} must be a finite number > 0, got {value!r}")
        for name in ("time_sigma", "mem_sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Effect.{name} must be a finite number >= 0, got {value!r}")

    @property
    def log_time(self) -> float:
        """Mean of the log time ratio (negative is faster)."""
        return math.log(self.time_ratio)

    @property
    def log_mem(self) -> float:
        """Mean of the log memory ratio (negative saves memory)."""
        return math.log(self.mem_ratio)

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_ratio": float(self.time_ratio),
            "time_sigma": float(self.time_sigma),
            "mem_ratio": float(self.mem_ratio),
            "mem_sigma": float(self.mem_sigma),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Effect:
        _only_keys(data, {"time_ratio", "time_sigma", "mem_ratio", "mem_sigma", "source"}, "effect")
        return cls(
            time_ratio=_number(data, "time_ratio", "effect"),
            time_sigma=_number(data, "time_sigma", "effect"),
            mem_ratio=_number(data, "mem_ratio", "effect"),
            mem_sigma=_number(data, "mem_sigma", "effect"),
            source=_string(data, "source", None, "effect"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchSpec:
    """One code patch: which symbols it touches, how it is applied, what it is expected to do.

    ``targets`` are qualified symbols (``model.py::CausalSelfAttention.forward``)
    or bare paths (the whole file). A ``codemod`` patch names a registered codemod
    and may only edit inside its targets; a ``replacement`` patch carries the full
    source of one function or class and has exactly one symbol target, the
    definition it replaces. ``requires`` / ``conflicts_with`` are other patch ids; ``conflicts_with`` is
    the resolved form :func:`infrarsi.conflicts.resolve` writes (an author may name an exclusion nothing
    else implies; the catalog names none).
    """

    id: str
    title: str
    rationale: str
    targets: tuple[str, ...]
    effect: Effect
    requires: tuple[str, ...] = ()
    conflicts_with: tuple[str, ...] = ()
    decides: tuple[str, ...] = ()  # what it chooses (infrarsi.decisions): the conflict rule keeps deciders apart
    kind: PatchKind
    codemod: str | None = None
    replacement: str | None = None
    evidence: str = ""
    gpu_only: bool = False  # acts only on a GPU (TF32, cuDNN autotuning, pinned memory): left out on a CPU

    def __post_init__(self) -> None:
        if not self.id or not self.id.strip():
            raise ValueError("PatchSpec.id must be a non-empty string")
        if self.kind not in _KINDS:
            raise ValueError(f"PatchSpec.kind must be one of {_KINDS}, got {self.kind!r}")
        if not self.targets:
            raise ValueError(f"patch {self.id}: targets must name at least one path or symbol")
        for name in ("targets", "requires", "conflicts_with", "decides"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"patch {self.id}: {name} must be a tuple of non-empty strings, got {value!r}")
        if self.id in self.requires or self.id in self.conflicts_with:
            raise ValueError(f"patch {self.id}: cannot require or conflict with itself")
        if set(self.requires) & set(self.conflicts_with):
            raise ValueError(f"patch {self.id}: requires and conflicts_with overlap")
        if self.kind == "codemod":
            if not self.codemod or self.replacement is not None:
                raise ValueError(f"patch {self.id}: a codemod patch needs `codemod` and no `replacement`")
        else:
            if not self.replacement or self.codemod is not None:
                raise ValueError(f"patch {self.id}: a replacement patch needs `replacement` and no `codemod`")
            if len(self.targets) != 1 or "::" not in self.targets[0]:
                raise ValueError(f"patch {self.id}: a replacement patch needs exactly one "
                                 f"`path.py::Qual.name` target, got {self.targets!r}")

    @property
    def target_files(self) -> tuple[str, ...]:
        """The repo-relative files this patch may write, sorted and unique."""
        return tuple(sorted({t.partition("::")[0] for t in self.targets}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SPEC_VERSION,
            "id": self.id,
            "title": self.title,
            "rationale": self.rationale,
            "targets": list(self.targets),
            "effect": self.effect.to_dict(),
            "requires": list(self.requires),
            "conflicts_with": list(self.conflicts_with),
            "kind": self.kind,
            "codemod": self.codemod,
            "replacement": self.replacement,
            "evidence": self.evidence,
        } | ({"decides": list(self.decides)} if self.decides else {}) \
          | ({"gpu_only": True} if self.gpu_only else {})  # absent when empty or false: digests stay put

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PatchSpec:
        """Strict inverse of :meth:`to_dict`; a malformed record raises ``ValueError`` naming the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"patch spec must be a mapping, got {type(data).__name__}")
        _only_keys(data, {"version", "id", "title", "rationale", "targets", "effect", "requires",
                          "conflicts_with", "decides", "kind", "codemod", "replacement", "evidence", "gpu_only"},
                   "patch")
        version = data.get("version", SPEC_VERSION)
        if version != SPEC_VERSION:
            raise ValueError(f"patch.version: expected {SPEC_VERSION}, got {version!r}")
        effect = data.get("effect")
        if not isinstance(effect, Mapping):
            raise ValueError("patch.effect: expected a mapping")
        return cls(
            id=_string(data, "id", None, "patch"),
            title=_string(data, "title", "", "patch"),
            rationale=_string(data, "rationale", "", "patch"),
            targets=_strings(data, "targets"),
            effect=Effect.from_dict(effect),
            requires=_strings(data, "requires"),
            conflicts_with=_strings(data, "conflicts_with"),
            decides=_strings(data, "decides"),
            kind=_string(data, "kind", None, "patch"),  # type: ignore[arg-type]  # checked in __post_init__
            codemod=_optional_string(data, "codemod"),
            replacement=_optional_string(data, "replacement"),
            evidence=_string(data, "evidence", "", "patch"),
            gpu_only=_flag(data, "gpu_only"),
        )

    def digest(self) -> str:
        """sha256 of the canonical JSON form: equal specs hash equal on every machine and run."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                               allow_nan=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _only_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}")


def _string(data: Mapping[str, Any], key: str, default: str | None, where: str) -> str:
    if key not in data:
        if default is None:
            raise ValueError(f"{where}.{key}: required")
        return default
    value = data[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key}: expected a string, got {type(value).__name__}")
    return value


def _optional_string(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"patch.{key}: expected a string or null, got {type(value).__name__}")
    return value


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"patch.{key}: expected true or false, got {value!r}")
    return value


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"patch.{key}: expected a list of strings")
    return tuple(value)


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    if key not in data:
        raise ValueError(f"{where}.{key}: required")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}.{key}: expected a number, got {type(value).__name__}")
    return float(value)
