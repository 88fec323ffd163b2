"""A simulated multi-node training job whose optimum is known.

``SimulatedJob(workload, cluster, seed).run(config)`` plays one trial: the
noiseless step time of :mod:`simlab.cluster.cost` times log-normal run-to-run
noise with the cluster's coefficient of variation, its peak memory, outcome
and what the trial cost in device-seconds. ``expected(config)`` is the same
without noise, ``ground_truth()`` the optimum by exhaustive enumeration.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from simlab.cluster import cost
from simlab.cluster.hardware import CLUSTERS, Cluster, GiB, cluster as cluster_named
from simlab.cluster.knobs import Value
from simlab.cluster.memory import GRAD_BYTES, OPTIM_BYTES, PARAM_BYTES
from simlab.cluster.rules import crash_message
from simlab.cluster.space import Space, space_for
from simlab.cluster.workloads import WORKLOADS, Workload, workload as workload_named

Outcome = Literal["ok", "oom", "crash"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SimResult:
    """One trial. ``step_time_s`` and ``mfu`` are None unless ``outcome == "ok"``.

    ``peak_mem_bytes``: per-GPU peak; for an OOM from :meth:`SimulatedJob.run`
    it is censored at the GPU's HBM size (what a real run would see), while
    :meth:`SimulatedJob.expected` gives the model's full need; 0 for a crash.
    ``cost_s``: device-seconds the trial took (all GPUs of the cluster).
    """

    outcome: Outcome
    step_time_s: float | None
    peak_mem_bytes: float
    mfu: float | None
    reason: str
    cost_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class GroundTruth:
    """The optimum of one (workload, cluster) pair, found by enumerating the whole space."""

    workload: str
    cluster: str
    config: dict[str, Value]
    step_time_s: float
    mfu: float
    n_optimal: int            # configurations within 1e-9 (relative) of the optimum (ties)
    default_config: dict[str, Value]
    default_outcome: Outcome
    default_step_time_s: float | None
    default_mfu: float | None
    space_size: int
    n_ok: int
    n_oom: int
    n_crash: int


@dataclass(frozen=True, kw_only=True, slots=True)
class _Noiseless:
    outcome: Outcome
    step_time_s: float
    peak_mem_bytes: float
    reason: str


_CACHE_SIZE = 200_000


class SimulatedJob:
    """One training job (a workload on a cluster) that a tuner can run configurations of.

    Noise is drawn from ``numpy.random.default_rng(seed)``, one draw per
    :meth:`run` whatever its outcome, so a given seed and sequence of calls
    always gives the same results.
    """

    def __init__(self, workload: Workload | str, cluster: Cluster | str, seed: int = 0, *,
                 warmup_steps: int = 3, measured_steps: int = 10,
                 crash_charge_s: float = 60.0, oom_charge_s: float = 180.0) -> None:
        self.workload = workload_named(workload) if isinstance(workload, str) else workload
        self.cluster = cluster_named(cluster) if isinstance(cluster, str) else cluster
        self.space: Space = space_for(self.workload, self.cluster)
        self.seed = seed
        self.warmup_steps = warmup_steps
        self.measured_steps = measured_steps
        self.crash_charge_s = crash_charge_s
        self.oom_charge_s = oom_charge_s
        self._rng = np.random.default_rng(seed)
        self.sigma_log = math.sqrt(math.log1p(self.cluster.noise_cv ** 2))
        self.trials = 0
        self.spent_s = 0.0
        self._cache: dict[int, _Noiseless] = {}

    # ----- trials -------------------------------------------------------------
    def expected(self, config: Mapping[str, Value]) -> SimResult:
        """The noiseless result of ``config`` (the median of its runs)."""
        return self._result(config, noise=1.0, censor=False)

    def run(self, config: Mapping[str, Value]) -> SimResult:
        """One noisy trial: step time x exp(sigma·Z), sigma = sqrt(ln(1 + CV²))."""
        noise = math.exp(self.sigma_log * float(self._rng.standard_normal()))
        result = self._result(config, noise=noise, censor=True)
        self.trials += 1
        self.spent_s += result.cost_s
        return result

    def _noiseless(self, config: Mapping[str, Value]) -> _Noiseless:
        index = self.space.index_of(config)  # also rejects malformed configs
        hit = self._cache.get(index)
        if hit is not None:
            return hit
        w, c = self.workload, self.cluster
        ev = cost.evaluate(self.space.columns(index, index + 1), w, c)
        outcome = cost.OUTCOMES[int(ev.outcome[0])]
        reason = ""
        if outcome == "crash":
            values = dict(self.space.config_at(index), dp=int(ev.dp[0]), m=int(ev.microbatches[0]))
            reason = crash_message(int(ev.crash_code[0]), values, w, c)
        result = _Noiseless(outcome=outcome, step_time_s=float(ev.step_time_s[0]),
                            peak_mem_bytes=float(ev.memory.total[0]), reason=reason)
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[index] = result
        return result

    def _result(self, config: Mapping[str, Value], *, noise: float, censor: bool) -> SimResult:
        w, c = self.workload, self.cluster
        base = self._noiseless(config)
        outcome, peak, world = base.outcome, base.peak_mem_bytes, c.world_size
        if outcome == "crash":
            return SimResult(outcome="crash", step_time_s=None, peak_mem_bytes=0.0, mfu=None,
                             reason=base.reason, cost_s=self.crash_charge_s * world)
        if outcome == "oom":
            reason = (f"CUDA out of memory: peak {peak / GiB:.1f} GiB exceeds the usable "
                      f"{c.usable_hbm_bytes / GiB:.1f} GiB of {c.hbm_bytes / GiB:.0f} GiB")
            if censor:
                reason = (f"CUDA out of memory: the job needed more than the usable "
                          f"{c.usable_hbm_bytes / GiB:.1f} GiB of {c.hbm_bytes / GiB:.0f} GiB")
                peak = c.hbm_bytes
            return SimResult(outcome="oom", step_time_s=None, peak_mem_bytes=peak, mfu=None, reason=reason,
                             cost_s=self.oom_charge_s * world)
        step = base.step_time_s * noise
        mfu = w.model_flops_per_step / (step * world * c.peak_flops)
        return SimResult(outcome="ok", step_time_s=step, peak_mem_bytes=peak, mfu=mfu, reason="",
                         cost_s=(self.warmup_steps + self.measured_steps) * step * world)

    def breakdown(self, config: Mapping[str, Value]) -> dict[str, float]:
        """Noiseless seconds per step by cause and per-GPU bytes by kind (for inspection and docs)."""
        cols = self.space.columns_of(config)
        st = cost.step_time(cols, self.workload, self.cluster)
        mem = cost.evaluate(cols, self.workload, self.cluster).memory
        out = {f"time_{k}_s": float(np.ravel(getattr(st, k))[0]) for k in st.__slots__}
        out.update({f"mem_{k}_bytes": float(np.ravel(getattr(mem, k))[0]) for k in mem.__slots__})
        return out

    # ----- the optimum ---------------------------------------------------------
    def ground_truth(self) -> GroundTruth:
        """The optimum by exhaustive enumeration (computed once per pair, then cached)."""
        gt = _ground_truth(self.workload, self.cluster)
        return dataclasses.replace(gt, config=dict(gt.config), default_config=dict(gt.default_config))

    def landscape(self) -> tuple[np.ndarray, np.ndarray]:
        """(outcome codes 0 ok / 1 oom / 2 crash, noiseless step times) of every configuration, in index order.

        Step times are NaN where the outcome is not ok. Useful to rank what a
        tuner found against the whole space.
        """
        return _landscape(self.workload, self.cluster)


def _landscape(w: Workload, c: Cluster) -> tuple[np.ndarray, np.ndarray]:
    space = space_for(w, c)
    ev = cost.evaluate(space.grid(), w, c)
    outcome = np.broadcast_to(ev.outcome, space.shape).ravel().astype(np.int8)
    step = np.broadcast_to(ev.step_time_s, space.shape).ravel()
    return outcome, np.where(outcome == cost.OK, step, np.nan)


@functools.lru_cache(maxsize=None)
def _ground_truth(w: Workload, c: Cluster) -> GroundTruth:
    space = space_for(w, c)
    outcome, step = _landscape(w, c)
    ok = outcome == cost.OK
    if not ok.any():
        raise ValueError(f"no configuration of {w.name} fits on {c.name}: it is not in the catalog")
    masked = np.where(ok, step, np.inf)
    best = int(np.argmin(masked))
    t_best = float(step[best])
    default = space.default()
    d = space.index_of(default)
    d_outcome = cost.OUTCOMES[int(outcome[d])]
    d_step = float(step[d]) if d_outcome == "ok" else None
    counts = np.bincount(outcome, minlength=3)
    return GroundTruth(
        workload=w.name, cluster=c.name, config=space.config_at(best), step_time_s=t_best,
        mfu=_mfu(w, c, t_best), n_optimal=int(np.count_nonzero(masked <= t_best * (1 + 1e-9))),
        default_config=default, default_outcome=d_outcome, default_step_time_s=d_step,
        default_mfu=None if d_step is None else _mfu(w, c, d_step), space_size=space.size,
        n_ok=int(counts[cost.OK]), n_oom=int(counts[cost.OOM]), n_crash=int(counts[cost.CRASH]))


def _mfu(w: Workload, c: Cluster, step: float) -> float:
    return w.model_flops_per_step / (step * c.world_size * c.peak_flops)


def min_state_bytes_per_gpu(w: Workload, c: Cluster) -> float:
    """Model states fully sharded over every GPU (ZeRO-3 with dp = world): a lower bound on memory."""
    return (PARAM_BYTES + GRAD_BYTES + OPTIM_BYTES) * w.total_params / c.world_size


def catalog(*, include_infeasible: bool = False) -> tuple[tuple[Workload, Cluster], ...]:
    """All (workload, cluster) pairs; by default only those whose model states can fit at all.

    A pair is left out when 16 bytes per parameter spread over every GPU
    already exceed the usable HBM (ZeRO paper's lower bound): no
    configuration of it can run.
    """
    return tuple((w, c) for w in WORKLOADS for c in CLUSTERS
                 if include_infeasible or min_state_bytes_per_gpu(w, c) <= c.usable_hbm_bytes)


__all__ = ["GroundTruth", "SimResult", "SimulatedJob", "catalog", "min_state_bytes_per_gpu"]
