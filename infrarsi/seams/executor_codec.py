"""The one wire form of a trial's launch and of what came back: every remote executor speaks it.

A :class:`TrialSpec` travels whole to wherever the candidate runs (an Actions
runner's workflow input, a Slurm job's shared directory, any future launcher)
and the :class:`Execution` travels back the same way, so a runner launches,
witnesses and measures exactly what the local executor would. Each field of
both dataclasses has an entry in :data:`SPEC_FIELDS` / :data:`EXECUTION_FIELDS`
(``tests/test_executor_codec.py`` fails when a field is added without one).

Versioned: a record of an older version is read with the fields it lacks at
their defaults; a newer one is refused with a line that says to upgrade.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.trial_record import StepEvent

#: 1-3: Execution fields as the Actions and Slurm records held them (2: steady_rss_bytes; 3: the GPU's held
#: memory and capacity); 4: one codec for both, TrialSpec.root/commit/lock, Execution.witness_ranks,
#: witness_skipped, lock_changed and host; 5: TrialSpec.step_tokens (the bot's own step clock).
CODEC_VERSION = 5


class CodecError(InfraRSIError, ValueError):
    """A launch or execution record that cannot be read (names the field): another InfraRSI wrote it."""

    exit_code = BAD_INPUT


@dataclass(frozen=True, slots=True)
class FieldCodec:
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else convert(v)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v:
        raise TypeError(f"expected an integer, got {v!r}")
    return int(v)


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"expected a number, got {v!r}")
    return float(v)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {v!r}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {v!r}")
    return v


def _dict(v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise TypeError(f"expected an object, got {v!r}")
    return dict(v)


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(_str(x) for x in v)


def _string_pairs(v: Any) -> tuple[tuple[str, str], ...]:
    return tuple((_str(a), _str(b)) for a, b in v)


def _facts(v: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((_str(k), x) for k, x in v)


def _lists(v: tuple[tuple[Any, ...], ...]) -> list[list[Any]]:
    return [list(x) for x in v]


def _event(d: Any) -> StepEvent:
    d = _dict(d)
    return StepEvent(step=_optional(_int)(d.get("step")), stamp=_float(d["stamp"]),
                     loss=_optional(_float)(d.get("loss")), tokens=_optional(_int)(d.get("tokens")),
                     child_t=_optional(_float)(d.get("child_t")))


SCALAR = FieldCodec(_same, _same)
INT = FieldCodec(_same, _int)
FLOAT = FieldCodec(_same, _float)
STR = FieldCodec(_same, _str)
BOOL = FieldCodec(_same, _bool)
OPT_INT = FieldCodec(_same, _optional(_int))
OPT_STR = FieldCodec(_same, _optional(_str))
OPT_DICT = FieldCodec(_same, _optional(_dict))
STRINGS = FieldCodec(list, _strings)
STRING_PAIRS = FieldCodec(_lists, _string_pairs)

SPEC_FIELDS: dict[str, FieldCodec] = {
    "argv": STRINGS,
    "cwd": STR,
    "env": STRING_PAIRS,
    "timeout_s": FLOAT,
    "memory_limit_bytes": OPT_INT,
    "source": STR,
    "stdout_regex": OPT_STR,
    "expected_steps": OPT_INT,
    "step_stream": STR,
    "log_dir": OPT_STR,
    "witness": OPT_INT,
    "steps_per_line": INT,
    "root": OPT_STR,
    "commit": OPT_STR,
    "lock": STRING_PAIRS,
    "step_tokens": OPT_INT,
}

EXECUTION_FIELDS: dict[str, FieldCodec] = {
    "events": FieldCodec(lambda v: [asdict(e) for e in v], lambda v: tuple(_event(e) for e in v)),
    "returncode": OPT_INT,
    "wall_s": FLOAT,
    "peak_rss_bytes": INT,
    "killed_for": OPT_STR,
    "stderr_tail": STR,
    "probe_oom": OPT_STR,
    "device_peak_mem_bytes": OPT_INT,
    "steady_rss_bytes": OPT_INT,
    "device_steady_bytes": OPT_INT,
    "device_capacity_bytes": OPT_INT,
    "devices": INT,
    "pids": FieldCodec(list, lambda v: tuple(_int(p) for p in v)),
    "phases": FieldCodec(_lists, lambda v: tuple((_int(s), _str(n), _float(t)) for s, n, t in v)),
    "info": FieldCodec(_lists, _facts),
    "failed_rank": OPT_INT,
    "placement": FieldCodec(_lists, _facts),
    "stopped_after_steps": BOOL,
    "witness": OPT_DICT,
    "witness_error": OPT_STR,
    "witness_ranks": FieldCodec(list, lambda v: tuple(_dict(d) for d in v)),
    "witness_skipped": OPT_STR,
    "lock_changed": FieldCodec(_optional(list), _optional(_strings)),
    "host": FieldCodec(_lists, lambda v: tuple((_str(k), _float(x)) for k, x in v)),
}


def _encode(obj: Any, table: Mapping[str, FieldCodec]) -> dict[str, Any]:
    return {f.name: table[f.name].encode(getattr(obj, f.name)) for f in fields(obj)}


def _decode(cls: type, data: Mapping[str, Any], table: Mapping[str, FieldCodec], what: str) -> Any:
    unknown = sorted(set(data) - set(table))
    if unknown:
        raise CodecError(f"{what}: unknown field {unknown[0]!r} (written by another InfraRSI version?)")
    values = {}
    for name, value in data.items():
        try:
            values[name] = table[name].decode(value)
        except (TypeError, ValueError, KeyError) as e:
            raise CodecError(f"{what}.{name}: {e}") from None
    try:
        return cls(**values)
    except TypeError as e:  # a required field missing
        raise CodecError(f"{what}: {e}") from None


def _version(data: Mapping[str, Any], what: str) -> int:
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise CodecError(f"{what}: schema_version {version!r} is not an integer")
    if version > CODEC_VERSION:
        raise CodecError(f"{what} has schema {version}, newer than this InfraRSI ({CODEC_VERSION}); upgrade the bot")
    return version


def spec_to_dict(spec: TrialSpec) -> dict[str, Any]:
    """``{"schema_version": N, "spec": {...every field...}}``: JSON-able."""
    return {"schema_version": CODEC_VERSION, "spec": _encode(spec, SPEC_FIELDS)}


def spec_from_dict(data: Mapping[str, Any]) -> TrialSpec:
    _version(data, "trial launch")
    return _decode(TrialSpec, _dict(data.get("spec")), SPEC_FIELDS, "trial launch")


def execution_to_dict(execution: Execution, **facts: Any) -> dict[str, Any]:
    """``{"schema_version": N, "execution": {...}, **facts}`` (facts: what the launcher adds, e.g. its rank)."""
    return {"schema_version": CODEC_VERSION, "execution": _encode(execution, EXECUTION_FIELDS), **facts}


def execution_from_dict(data: Mapping[str, Any]) -> Execution:
    _version(data, "execution record")
    return _decode(Execution, _dict(data.get("execution")), EXECUTION_FIELDS, "execution record")


def execution_facts(data: Mapping[str, Any]) -> dict[str, Any]:
    """What the launcher wrote beside the execution (``execution_to_dict``'s ``facts``)."""
    return {k: v for k, v in data.items() if k not in ("execution", "schema_version")}
