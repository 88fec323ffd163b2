"""A measured table of a fixture's configurations, read and written (schema: ``benchmarks/measure_space.py``).

The table is the ground truth of ``benchmarks/search_table.py``: every
configuration of a stated space, measured a few times through ``infrarsi
trial``. :class:`TableBench` answers the tuners from it the way the simulator
does (a trial draws one of the measured repeats), :func:`truth` says what
scoring knows (a configuration's mean step time over its repeats; the optimum).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.search_tuners import Config, key
from infrarsi.contract.model import Constraint, Knob
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.patches import PatchSpec
from infrarsi.search.space import SearchSpace
from simlab.cluster.knobs import Dimension, Value
from infrarsi.trial_record import Candidate

SCHEMA_VERSION = 1


class TableError(InfraRSIError):
    """A table file that cannot be read: names the file and the key."""

    exit_code = BAD_INPUT


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One measured repeat of a configuration."""

    outcome: str  # ok / oom / crash (timeout and invalid are read as crash: they yield no time)
    step_time_s: float | None
    peak_mem_bytes: float
    cost_s: float
    censored: bool = False  # the peak is a lower bound (an OOM)
    round: int = 0
    steady_mem_bytes: float | None = None  # resident memory held across steps (TrialMetrics.steady_mem_bytes)


@dataclass(kw_only=True)
class Table:
    """A fixture's measured space; ``runs`` maps :func:`config_key` to the repeats measured so far."""

    fixture: str
    machine: Mapping[str, Any]
    memory_limit_bytes: float
    knobs: tuple[Knob, ...]
    constraints: tuple[Constraint, ...]
    patches: tuple[PatchSpec, ...]
    repeats: int
    runs: dict[tuple[Any, ...], list[Run]] = field(default_factory=dict)
    configs: dict[tuple[Any, ...], Config] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # workload args, command, wall time, dates
    #: What the replay and the live check call the table: its file's stem (``tinygpt-avx512``), since one fixture
    #: can have a table per machine kind; the fixture's name when the table was not read from a file.
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.fixture

    @property
    def dimensions(self) -> tuple[Dimension, ...]:
        knobs = tuple(Dimension(name=k.name, kind=k.kind if k.kind in ("int", "bool") else "categorical",  # type: ignore[arg-type]
                                values=(False, True) if k.kind == "bool" else tuple(k.values or ()),
                                role="knob", time="", memory="") for k in self.knobs)
        return knobs + tuple(Dimension(name=p.id, kind="bool", values=(False, True), role="patch", time="",
                                       memory="") for p in self.patches)

    def default(self) -> Config:
        return {**{k.name: k.default for k in self.knobs}, **{p.id: False for p in self.patches}}

    def space(self) -> SearchSpace:
        """The engine's space: the contract's knobs restricted to the measured values, the measured patches."""
        return SearchSpace.from_contract(list(self.knobs), list(self.constraints), list(self.patches))

    def design(self) -> list[Config]:
        """Every valid configuration of the space (what a complete table holds)."""
        points = self.space().enumerate(limit=1 << 16)
        if points is None:
            raise TableError(f"table {self.fixture}: the space has more than 65536 points; measure a smaller one")
        return [candidate_config(c, self) for c in points]

    def add(self, config: Mapping[str, Value], run: Run) -> None:
        k = key(config)
        self.configs.setdefault(k, dict(config))
        self.runs.setdefault(k, []).append(run)


def candidate_config(candidate: Candidate, table: Table) -> Config:
    knobs = candidate.knob_dict()
    return {**{k.name: knobs.get(k.name, k.default) for k in table.knobs},
            **{p.id: p.id in candidate.patches for p in table.patches}}


def config_candidate(config: Mapping[str, Value], table: Table) -> Candidate:
    return Candidate.of({k.name: config[k.name] for k in table.knobs},
                        sorted(p.id for p in table.patches if config[p.id]))


# -- JSON -----------------------------------------------------------------------------------------

def _knob_dict(k: Knob) -> dict[str, Any]:
    out: dict[str, Any] = {"name": k.name, "kind": k.kind, "default": k.default}
    if k.values is not None:
        out["values"] = list(k.values)
    if k.decides:
        out["decides"] = list(k.decides)
    return out


def _constraint_dict(c: Constraint) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": c.kind, "reason": c.reason}
    if c.knob is not None:
        out["knob"] = c.knob
    if c.value is not None:
        out["value"] = c.value
    if c.when:
        out["when"] = [[k, v] for k, v in c.when]
    if c.knobs:
        out["knobs"] = list(c.knobs)
    return out


def _run_dict(r: Run) -> dict[str, Any]:
    out = {"round": r.round, "outcome": r.outcome, "step_time_s": r.step_time_s,
           "peak_mem_bytes": r.peak_mem_bytes, "censored": r.censored, "cost_s": r.cost_s}
    return out if r.steady_mem_bytes is None else {**out, "steady_mem_bytes": r.steady_mem_bytes}


def to_json(table: Table) -> dict[str, Any]:
    return {
        "version": SCHEMA_VERSION, "fixture": table.fixture, "machine": dict(table.machine),
        "memory_limit_bytes": table.memory_limit_bytes, "repeats": table.repeats,
        "knobs": [_knob_dict(k) for k in table.knobs],
        "constraints": [_constraint_dict(c) for c in table.constraints],
        "patches": [p.to_dict() for p in table.patches], **table.meta,
        "configs": [{"knobs": {k.name: cfg[k.name] for k in table.knobs},
                     "patches": sorted(p.id for p in table.patches if cfg[p.id]),
                     "runs": [_run_dict(r) for r in table.runs[k_]]}
                    for k_, cfg in table.configs.items()],
    }


def save(table: Table, path: Path) -> None:
    """Write atomically (a killed measurement never leaves half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(to_json(table), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _need(data: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in data:
        raise TableError(f"{where}: missing key {name!r}")
    return data[name]


def from_json(data: Mapping[str, Any], where: str = "table") -> Table:
    """Read a table; a malformed one raises :class:`TableError` naming ``where`` and the key."""
    if not isinstance(data, Mapping):
        raise TableError(f"{where}: expected a JSON object")
    if data.get("version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise TableError(f"{where}: version {data.get('version')!r}, this code reads {SCHEMA_VERSION}")
    try:
        knobs = tuple(Knob(name=k["name"], kind=k["kind"], default=k["default"],
                           values=tuple(k["values"]) if "values" in k else None,
                           decides=tuple(k.get("decides", ()))) for k in _need(data, "knobs", where))
        constraints = tuple(Constraint(kind=c["kind"], knob=c.get("knob"), value=c.get("value"),
                                       when=tuple((w[0], w[1]) for w in c.get("when", ())),
                                       reason=c.get("reason", ""), knobs=tuple(c.get("knobs", ())))
                            for c in data.get("constraints", ()))
        patches = tuple(PatchSpec.from_dict(p) for p in data.get("patches", ()))
    except (KeyError, TypeError, ValueError) as e:
        raise TableError(f"{where}: knobs/constraints/patches: {e}") from None
    meta = {k: v for k, v in data.items() if k not in {"version", "fixture", "machine", "memory_limit_bytes",
                                                        "repeats", "knobs", "constraints", "patches", "configs"}}
    table = Table(fixture=str(_need(data, "fixture", where)), machine=data.get("machine", {}),
                  memory_limit_bytes=float(_need(data, "memory_limit_bytes", where)), knobs=knobs,
                  constraints=constraints, patches=patches, repeats=int(data.get("repeats", 1)), meta=meta)
    names = {k.name for k in knobs}
    ids = {p.id for p in patches}
    for i, row in enumerate(_need(data, "configs", where)):
        at = f"{where}: configs[{i}]"
        values = _need(row, "knobs", at)
        chosen = set(row.get("patches", ()))
        if set(values) != names or not chosen <= ids:
            raise TableError(f"{at}: knobs must be exactly {sorted(names)} and patches among {sorted(ids)}")
        config = {**values, **{p: p in chosen for p in ids}}
        table.configs.setdefault(key(config), config)
        for j, r in enumerate(_need(row, "runs", at)):
            try:
                outcome = r["outcome"] if r["outcome"] in ("ok", "oom") else "crash"
                table.add(config, Run(outcome=outcome, step_time_s=r.get("step_time_s") if outcome == "ok" else None,
                                      peak_mem_bytes=float(r.get("peak_mem_bytes") or 0.0),
                                      cost_s=float(r["cost_s"]), censored=bool(r.get("censored", outcome == "oom")),
                                      round=int(r.get("round", 0)),
                                      steady_mem_bytes=float(r["steady_mem_bytes"]) if r.get("steady_mem_bytes")
                                      else None))
            except (KeyError, TypeError, ValueError) as e:
                raise TableError(f"{at}.runs[{j}]: {e}") from None
            if outcome == "ok" and not (table.runs[key(config)][-1].step_time_s or 0) > 0:
                raise TableError(f"{at}.runs[{j}]: an ok run needs a positive step_time_s")
    return table


def load(path: Path) -> Table:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TableError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise TableError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    table = from_json(data, str(path))
    table.name = path.stem
    return table


# -- the truth and the bench ----------------------------------------------------------------------

def true_time(table: Table, config: Mapping[str, Value]) -> float:
    """Mean step time over the repeats when every repeat ran ok; ``inf`` otherwise (a configuration
    that OOMs or crashes in any repeat is not one to promote)."""
    runs = table.runs.get(key(config), [])
    if not runs or any(r.outcome != "ok" for r in runs):
        return math.inf
    return statistics.fmean(r.step_time_s or 0.0 for r in runs)


def optimum(table: Table) -> tuple[Config, float]:
    best = min(table.configs, key=lambda k: (true_time(table, table.configs[k]), k))
    return table.configs[best], true_time(table, table.configs[best])


def sigma_log(table: Table) -> float:
    """Pooled within-configuration sd of log step time (what the doctor would measure as noise)."""
    ss, dof = 0.0, 0
    for runs in table.runs.values():
        logs = [math.log(r.step_time_s) for r in runs if r.outcome == "ok" and r.step_time_s]
        if len(logs) >= 2:
            m = statistics.fmean(logs)
            ss += sum((v - m) ** 2 for v in logs)
            dof += len(logs) - 1
    return math.sqrt(ss / dof) if dof else 0.02


def coverage(table: Table) -> tuple[int, int]:
    """(configurations with at least one run, configurations in the space)."""
    design = table.design()
    return sum(1 for c in design if table.runs.get(key(c))), len(design)


class TableSpace:
    """What a :class:`benchmarks.search_tuners.Bench` over ``self.table`` answers from the table alone
    (the axes, the default, the memory limit, the engine's space); subclasses say how a trial runs."""

    __slots__ = ()
    table: Table

    @property
    def dimensions(self) -> tuple[Dimension, ...]:
        return self.table.dimensions

    @property
    def memory_limit(self) -> float:
        return self.table.memory_limit_bytes

    def default(self) -> Config:
        return self.table.default()

    def engine_space(self) -> SearchSpace:
        return self.table.space()

    @property
    def world_size(self) -> int:
        return 1  # the fixtures' tables are single-process CPU runs


@dataclass(frozen=True, slots=True)
class TableBench(TableSpace):
    """A measured table as a :class:`benchmarks.search_tuners.Bench`: a trial of a configuration draws
    one of its measured repeats uniformly, from a stream seeded by ``seed`` (so trial ``i`` of every
    method draws the same repeat index, as the simulator draws the same noise). A configuration
    outside the table is one the launcher rejects (the space is the table)."""

    table: Table
    seed: int
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rng", np.random.default_rng([self.seed, 29]))

    def valid(self, config: Mapping[str, Value]) -> bool:
        return key(config) in self.table.runs

    def run(self, config: Mapping[str, Value]) -> Run:
        runs = self.table.runs.get(key(config))
        if not runs:
            raise TableError(f"table {self.table.fixture}: configuration {key(config)} was not measured "
                             "(the table does not cover its space: measure it completely first)")
        run = runs[int(self.rng.integers(len(runs)))]
        share = supplement_share(self.table)
        if run.steady_mem_bytes is None and run.outcome == "ok" and share and key(config) == key(self.table.default()):
            return replace(run, steady_mem_bytes=share * run.peak_mem_bytes)
        return run


def compared_keys(recorded: Mapping[str, Any], base: tuple[str, ...] = ("cpu", "flags", "cores")) -> tuple[str, ...]:
    """What a table's machine and this one are compared on: ``base``, and the CPU generation where the table
    recorded it (tables measured before 2026-12-05 did not)."""
    return base + (("cpu_family_model",) if recorded.get("cpu_family_model") else ())


def machine_text(machine: Mapping[str, Any]) -> str:
    """A fingerprint in words: CPU, cores and the flags that decide bf16 speed."""
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in (machine.get("flags") or {}).items())
    generation = f" family/model {machine['cpu_family_model']}" if machine.get("cpu_family_model") else ""
    return f"{machine.get('cpu', '?')}{generation}, {machine.get('cores', '?')} cores ({flags})"


#: The table key of a steady-memory supplement (``measure_space --steady-supplement``).
SUPPLEMENT = "steady_supplement"


def supplement_share(table: Table) -> float | None:
    """The default configuration's steady share of its peak from the table's supplement, if it has one: tables
    measured before trials sampled steady memory get it from a later, memory-only measurement of the default."""
    sup = table.meta.get(SUPPLEMENT)
    return float(sup["share"]) if isinstance(sup, Mapping) and sup.get("share") else None


__all__ = ["Run", "SCHEMA_VERSION", "SUPPLEMENT", "machine_text", "supplement_share", "Table", "TableBench",
           "TableError", "TableSpace", "candidate_config", "config_candidate", "coverage", "from_json", "load", "optimum",
           "save", "sigma_log", "to_json", "true_time"]

