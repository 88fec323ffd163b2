"""The discrete search space of one (workload, cluster) pair, in a form a generic tuner can use.

``dimensions`` lists (name, kind, values); ``default()`` is the usual starting
point; ``enumerate()`` walks the full cartesian product (invalid combinations
included: they crash when run, as they would on a real cluster). Points are
numbered in mixed radix with the last dimension varying fastest, as
:func:`itertools.product` does, so ``config_at(i)`` and ``index_of(config)``
are inverse. ``columns(start, stop)`` gives the same points as numpy arrays for
the vectorised cost model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from simlab.cluster.hardware import Cluster
from simlab.cluster.knobs import DEFAULT, Dimension, Value, dimensions
from simlab.cluster.workloads import Workload

Columns = dict[str, np.ndarray]

#: Columns the cost model reads for every workload; MoE-only ones are constant for dense models.
_CONSTANT_FOR_DENSE: dict[str, Value] = {"ep": 1, "grouped_gemm": False}


@dataclass(frozen=True, kw_only=True, slots=True)
class Space:
    """All configurations of one (workload, cluster) pair."""

    workload: Workload
    cluster: Cluster
    dimensions: tuple[Dimension, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @property
    def size(self) -> int:
        return math.prod(len(d.values) for d in self.dimensions)

    def default(self) -> dict[str, Value]:
        return {d.name: DEFAULT[d.name] for d in self.dimensions}

    def check(self, config: Mapping[str, Value]) -> dict[str, Value]:
        """The config as a plain dict; ValueError for a missing, unknown or out-of-domain knob.

        This is a malformed request, not a simulated crash: a crash is a
        well-formed configuration that the training framework refuses.
        """
        unknown = set(config) - set(self.names)
        missing = set(self.names) - set(config)
        if unknown or missing:
            raise ValueError(f"config for {self.workload.name}: unknown knobs {sorted(unknown)}, "
                             f"missing knobs {sorted(missing)}")
        for d in self.dimensions:
            d.code(config[d.name])
        return {name: config[name] for name in self.names}

    def config_at(self, index: int) -> dict[str, Value]:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} outside the space of {self.size} configurations")
        out: dict[str, Value] = {}
        for d in reversed(self.dimensions):
            index, digit = divmod(index, len(d.values))
            out[d.name] = d.values[digit]
        return {name: out[name] for name in self.names}

    def index_of(self, config: Mapping[str, Value]) -> int:
        config = self.check(config)
        index = 0
        for d in self.dimensions:
            index = index * len(d.values) + d.code(config[d.name])
        return index

    def enumerate(self) -> Iterator[dict[str, Value]]:
        """Every configuration, in index order (lazy: the space can hold millions).

        For the whole space at once, :meth:`grid` with the vectorised cost model
        is orders of magnitude faster than evaluating these one by one.
        """
        names = self.names
        for values in itertools.product(*(d.values for d in self.dimensions)):
            yield dict(zip(names, values))

    def describe(self) -> list[dict[str, object]]:
        """The dimensions as plain data: name, kind, values, role (knob or patch), time and memory effect."""
        return [{"name": d.name, "kind": d.kind, "values": list(d.values), "role": d.role,
                 "time": d.time, "memory": d.memory} for d in self.dimensions]

    def columns(self, start: int = 0, stop: int | None = None) -> Columns:
        """Configurations ``start..stop-1`` as one numpy array per knob.

        ``recompute`` is coded as its index in :data:`simlab.cluster.knobs.RECOMPUTE_LEVELS` (0/1/2).
        """
        stop = self.size if stop is None else min(stop, self.size)
        rest = np.arange(start, stop, dtype=np.int64)
        cols: Columns = {}
        for d in reversed(self.dimensions):
            rest, digit = np.divmod(rest, len(d.values))
            cols[d.name] = _decode(d, digit)
        n = stop - start
        for name, value in _CONSTANT_FOR_DENSE.items():
            if name not in cols:
                cols[name] = np.full(n, value)
        return cols

    def grid(self) -> Columns:
        """The whole space as broadcastable columns: knob i has shape 1 x .. x len(values_i) x .. x 1.

        Numpy broadcasting then evaluates every intermediate of the cost model
        only over the knobs it depends on; ``np.broadcast_to(result,
        self.shape).ravel()`` is in index order (C order = last knob fastest).
        """
        ndim = len(self.dimensions)
        cols: Columns = {}
        for axis, d in enumerate(self.dimensions):
            shape = [1] * ndim
            shape[axis] = len(d.values)
            cols[d.name] = _decode(d, np.arange(len(d.values))).reshape(shape)
        for name, value in _CONSTANT_FOR_DENSE.items():
            if name not in cols:
                cols[name] = np.full([1] * ndim, value)
        return cols

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(d.values) for d in self.dimensions)

    def columns_of(self, config: Mapping[str, Value]) -> Columns:
        """One configuration as length-1 columns."""
        i = self.index_of(config)
        return self.columns(i, i + 1)


def _decode(d: Dimension, digit: np.ndarray) -> np.ndarray:
    if d.name == "recompute":
        return digit.astype(np.int64)  # index into RECOMPUTE_LEVELS
    table = np.asarray(d.values, dtype=bool if d.kind == "bool" else np.int64)
    return table[digit]


def space_for(workload: Workload, cluster: Cluster) -> Space:
    return Space(workload=workload, cluster=cluster, dimensions=dimensions(moe=workload.is_moe))


__all__ = ["Columns", "Space", "space_for"]
