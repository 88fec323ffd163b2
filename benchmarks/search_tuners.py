"""The tuners compared on the training simulator (``simlab.cluster``), and the session they share.

Every method gets the same thing: a :class:`Session` over one
:class:`~simlab.cluster.SimulatedJob` that runs a configuration and answers with
a noisy step time, an OOM or a crash, and stops the method at its trial budget.
Every method's first trial is the default configuration (what the doctor stage
measures; for Optuna an enqueued trial), and every method knows the same
*static* launcher checks (:func:`known_valid`: a configuration the launcher
rejects before it starts costs nothing and is not a trial). The rest of the
crash rules (divisibility by layers, heads, the expert count, batch; TP overlap
without sequence parallelism) are learnt from trials, as they would be on a cluster.

Methods (``METHODS``): the InfraRSI engine as ``bot/stages/run/search.py`` drives it, random
search, a one-change-at-a-time greedy tuner, Optuna's TPE with a constraints
function for OOM, and a DeepSpeed-Autotuning-style model-based tuner;
``TPE_VARIANTS`` adds TPE with an OOM told as a failed trial and as a penalty
value. Each is sequential and none looks at its budget, so the first ``B``
trials of a run at the largest budget are exactly the run at ``B``.

The methods drive a :class:`Bench`, not the simulator itself: :class:`SimBench`
wraps a ``SimulatedJob``, and ``benchmarks/search_table.py`` replays a measured
table through the same drivers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from infrarsi.search.design_columns import derived_features
from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.contract.model import Constraint, Knob
from infrarsi.patches import Effect, PatchSpec
from infrarsi.search.engine import SearchEngine
from infrarsi.search.space import SearchSpace
from simlab.cluster import SimulatedJob
from simlab.cluster.knobs import DEFAULT, Dimension, Value
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

Config = dict[str, Value]

#: Prior effects of the simulator's code patches, as a proposer's catalog would state them
#: (fused attention and fused cross-entropy as ``bot/patching/catalog.py``'s SDPA and fused-CE entries;
#: fused norm as its fused GELU; the MoE and TP-overlap entries are our guesses). Not fitted to the simulator.
PATCH_PRIORS: dict[str, Effect] = {
    "flash_attention": Effect(time_ratio=0.85, time_sigma=0.2, mem_ratio=0.85, mem_sigma=0.15,
                              source="bot/patching/catalog.py sdpa_causal_attention"),
    "fused_cross_entropy": Effect(time_ratio=0.93, time_sigma=0.08, mem_ratio=0.8, mem_sigma=0.15,
                                  source="bot/patching/catalog.py fused_cross_entropy"),
    "fused_norm": Effect(time_ratio=0.95, time_sigma=0.05, mem_ratio=0.97, mem_sigma=0.05,
                         source="as bot/patching/catalog.py fused_gelu"),
    "grouped_gemm": Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.05, source="guess"),
    "tp_comm_overlap": Effect(time_ratio=0.97, time_sigma=0.05, mem_ratio=1.0, mem_sigma=0.03, source="guess"),
}


class Result(Protocol):
    """One run as the job reports it."""

    @property
    def outcome(self) -> str: ...  # ok / oom / crash
    @property
    def step_time_s(self) -> float | None: ...
    @property
    def peak_mem_bytes(self) -> float: ...
    @property
    def cost_s(self) -> float: ...


class Bench(Protocol):
    """What a tuner may ask of the job it tunes: its axes, its default, the launcher's static checks,
    a run, and the contract a user would write for the engine (its space and memory limit)."""

    @property
    def dimensions(self) -> Sequence[Dimension]: ...
    @property
    def memory_limit(self) -> float | None: ...
    @property
    def world_size(self) -> int: ...  # GPUs (processes) a trial runs on, as the contract's launch says
    def default(self) -> Config: ...
    def valid(self, config: Mapping[str, Value]) -> bool: ...
    def run(self, config: Mapping[str, Value]) -> Result: ...
    def engine_space(self) -> SearchSpace: ...


@dataclass(frozen=True, slots=True)
class SimBench:
    """A simulated job as a :class:`Bench`."""

    job: SimulatedJob

    @property
    def dimensions(self) -> Sequence[Dimension]:
        return self.job.space.dimensions

    @property
    def memory_limit(self) -> float:
        return self.job.cluster.usable_hbm_bytes

    @property
    def world_size(self) -> int:
        return self.job.cluster.world_size

    def default(self) -> Config:
        return self.job.space.default()

    def valid(self, config: Mapping[str, Value]) -> bool:
        return known_valid(config, self.job.cluster.world_size)

    def run(self, config: Mapping[str, Value]) -> Result:
        return self.job.run(config)

    def engine_space(self) -> SearchSpace:
        return engine_space(self.job)


def as_bench(job: SimulatedJob | Bench) -> Bench:
    return SimBench(job) if isinstance(job, SimulatedJob) else job


class BudgetSpent(Exception):
    """Raised by :meth:`Session.run` once the method has used its trials."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Trial:
    """One run of a configuration, as the method saw it."""

    config: Mapping[str, Value]
    outcome: str  # ok / oom / crash
    step_time_s: float | None
    peak_mem_bytes: float
    cost_s: float
    steady_mem_bytes: float | None = None  # resident memory held across steps, where the bench measured it


@dataclass(kw_only=True)
class Session:
    """One method's access to one simulated job: at most ``budget`` trials, every one kept."""

    job: Bench
    budget: int
    trials: list[Trial] = field(default_factory=list)

    @property
    def left(self) -> int:
        return self.budget - len(self.trials)

    def run(self, config: Mapping[str, Value]) -> Trial:
        if self.left <= 0:
            raise BudgetSpent
        r = self.job.run(config)
        t = Trial(config=dict(config), outcome=r.outcome, step_time_s=r.step_time_s,
                  peak_mem_bytes=r.peak_mem_bytes, cost_s=r.cost_s, steady_mem_bytes=getattr(r, "steady_mem_bytes", None))
        self.trials.append(t)
        return t

    def tried(self) -> set[tuple[Any, ...]]:
        return {key(t.config) for t in self.trials}


def key(config: Mapping[str, Value]) -> tuple[Any, ...]:
    return tuple(sorted(config.items()))


# -- the static launcher checks every method knows ------------------------------------------------

def known_valid(config: Mapping[str, Value], world: int) -> bool:
    """The checks a launcher makes from the parallel arguments alone, without the model's shape
    (``simlab.cluster.rules`` 1, 4, 9, 10, 11 and the data-parallel half of 6)."""
    tp, pp, vpp, zero = int(config["tp"]), int(config["pp"]), int(config["vpp"]), int(config["zero"])
    if world % (tp * pp):
        return False
    if (world // (tp * pp)) % int(config.get("ep", 1)):
        return False  # expert parallelism splits the data-parallel group (Megatron parallel_state)
    if vpp > 1 and pp == 1:
        return False
    if zero >= 2 and pp > 1:
        return False
    opg = bool(config["overlap_param_gather"])
    return not (opg and (zero == 0 or not config["overlap_grad_reduce"]))


def known_constraints(job: SimulatedJob) -> list[Constraint]:
    """:func:`known_valid` as contract constraints (``forbid`` assignments) for the engine."""
    dims = {d.name: d for d in job.space.dimensions}
    world = job.cluster.world_size
    out = [Constraint(kind="forbid", when=(("tp", tp), ("pp", pp)), reason="tp·pp must divide the world size")
           for tp in dims["tp"].values for pp in dims["pp"].values if world % (int(tp) * int(pp))]
    if "ep" in dims:
        out += [Constraint(kind="forbid", when=(("tp", tp), ("pp", pp), ("ep", ep)),
                           reason="ep must divide the data-parallel size world/(tp·pp)")
                for tp in dims["tp"].values for pp in dims["pp"].values for ep in dims["ep"].values
                if not world % (int(tp) * int(pp)) and (world // (int(tp) * int(pp))) % int(ep)]
    out += [Constraint(kind="forbid", when=(("pp", 1), ("vpp", v)), reason="virtual stages need pp > 1")
            for v in dims["vpp"].values if v != 1]
    out += [Constraint(kind="forbid", when=(("zero", z), ("pp", pp)), reason="ZeRO-2/3 with pipeline")
            for z in (2, 3) for pp in dims["pp"].values if pp != 1]
    out.append(Constraint(kind="forbid", when=(("overlap_param_gather", True), ("zero", 0)),
                          reason="param gather overlap needs the distributed optimizer"))
    out.append(Constraint(kind="forbid", when=(("overlap_param_gather", True), ("overlap_grad_reduce", False)),
                          reason="param gather overlap needs grad reduce overlap"))
    return out


def random_configs(job: SimulatedJob | Bench, rng: np.random.Generator) -> Iterator[Config]:
    """Uniform draws over the configurations that pass the static checks (:func:`known_valid`)."""
    bench = as_bench(job)
    dims = bench.dimensions
    while True:
        config = {d.name: d.values[int(rng.integers(len(d.values)))] for d in dims}
        if bench.valid(config):
            yield config


# -- the InfraRSI engine --------------------------------------------------------------------------

def engine_space(job: SimulatedJob) -> SearchSpace:
    """The contract a user of the simulated job would write: knobs, patches with priors, static checks."""
    knobs: list[Knob] = []
    patches: list[PatchSpec] = []
    for d in job.space.dimensions:
        if d.role == "patch":
            patches.append(PatchSpec(id=d.name, title=d.name, rationale=d.time, targets=("model.py",),
                                     effect=PATCH_PRIORS[d.name], kind="codemod", codemod=d.name))
        elif d.kind == "bool":
            knobs.append(Knob(name=d.name, kind="bool", default=DEFAULT[d.name]))
        else:
            knobs.append(Knob(name=d.name, kind=d.kind, default=DEFAULT[d.name], values=tuple(d.values),
                              log=d.name == "bucket_mb"))
    # What `infrarsi init` writes for a fixed --global-batch-size: the micro-batch divides it.
    constraints = [*known_constraints(job), Constraint(kind="divides", knob="micro_batch",
                                                       value=job.workload.global_batch, reason="global batch")]
    return SearchSpace.from_contract(knobs, constraints, patches,
                                     derived=derived_features(knobs, constraints, job.cluster.world_size,
                                                              job.cluster.gpus_per_node))


def to_candidate(config: Mapping[str, Value], dims: Sequence[Dimension]) -> Candidate:
    knobs = {d.name: config[d.name] for d in dims if d.role == "knob"}
    return Candidate.of(knobs, sorted(d.name for d in dims if d.role == "patch" and config[d.name]))


def to_config(candidate: Candidate, dims: Sequence[Dimension], default: Mapping[str, Value] = DEFAULT) -> Config:
    values = candidate.knob_dict()
    chosen = set(candidate.patches)
    return {d.name: (d.name in chosen) if d.role == "patch" else values.get(d.name, default[d.name]) for d in dims}


def to_record(trial: Trial, trial_no: int, dims: Sequence[Dimension], run_id: str = "bench") -> TrialRecord:
    outcome = Outcome(trial.outcome)
    metrics = TrialMetrics(step_time_s=trial.step_time_s,
                           peak_mem_bytes=int(trial.peak_mem_bytes) if trial.outcome != "crash" else None,
                           peak_mem_censored=trial.outcome == "oom",
                           steady_mem_bytes=int(trial.steady_mem_bytes) if trial.steady_mem_bytes else None)
    return TrialRecord(run_id=run_id, trial_no=trial_no, candidate=to_candidate(trial.config, dims),
                       outcome=outcome, metrics=metrics, cost_s=trial.cost_s)


def simulated_records(job: SimulatedJob, configs: Sequence[Mapping[str, Value]]) -> list[TrialRecord]:
    """``configs`` run on ``job`` in this order, as the records the engine observes (tests' fixed histories)."""
    records = []
    for i, config in enumerate(configs):
        r = job.run(config)
        records.append(to_record(Trial(config=dict(config), outcome=r.outcome, step_time_s=r.step_time_s,
                                       peak_mem_bytes=r.peak_mem_bytes, cost_s=r.cost_s), i, job.space.dimensions))
    return records


def without_derived(space: SearchSpace, prefix: str) -> SearchSpace:
    """``space`` less its derived columns whose name starts with ``prefix`` (to measure what one does)."""
    return SearchSpace.from_contract([a.knob for a in space.axes], space.constraints, list(space.patches.values()),
                                     derived=[d for d in space.derived if not d.name.startswith(prefix)])


def prediction_error(space: SearchSpace, job: SimulatedJob, records: Sequence[TrialRecord],
                     config: Mapping[str, Value], *, memory: bool = False) -> float:
    """Relative error of the engine's step time (or peak memory) for ``config`` after ``records``, with the
    built-in priors for ``job``'s cluster, against the simulator's noiseless value."""
    engine = SearchEngine(space, builtin_priors(space, job.cluster.world_size, job.cluster.gpus_per_node),
                          memory_limit=job.cluster.usable_hbm_bytes, seed=0)
    engine.observe(records)
    models = engine.models
    mu, _ = (models.memory if memory else models.time).predict(
        models.design([to_candidate(config, job.space.dimensions)]))
    expected = job.expected(config)
    truth = expected.peak_mem_bytes if memory else expected.step_time_s
    assert truth, f"{config} does not run on {job.workload.name}"
    return float(np.exp(mu[0])) / float(truth) - 1.0


def run_engine(session: Session, seed: int, *, bank: Sequence[tuple[Candidate, float]] = (),
               initial: int = 8, min_effect: float = 0.01, stop_early: bool = True) -> None:
    """``bot/stages/run/search.py``'s loop: the baseline (the doctor's run), a diverse first batch, then one by one
    by constrained EI, until the budget or the stop advice."""
    job = session.job
    dims = job.dimensions
    default = job.default()
    space = job.engine_space()
    engine = SearchEngine(space, builtin_priors(space, job.world_size), memory_limit=job.memory_limit, seed=seed)

    def run(config: Mapping[str, Value]) -> None:
        trial = session.run(config)
        engine.observe([to_record(trial, len(session.trials), dims)])

    run(default)
    searched = 0
    first = engine.initial_batch(min(initial, session.left), bank, include_baseline=False)
    while session.left > 0:
        if first:  # the first batch, one trial at a time, revised after each (as bot/stages/run/search.py without --parallel)
            proposal, first = first[0], first[1:]
            run(to_config(proposal.candidate, dims, default))
            searched += 1
            first = engine.refresh_initial(first, bank)
            continue
        if stop_early and searched >= initial and engine.stop_advice(min_effect=min_effect).should_stop:
            return
        proposals = engine.next_batch(q=1)
        if not proposals:
            return
        run(to_config(proposals[0].candidate, dims, default))
        searched += 1


# -- random search ----------------------------------------------------------------------------------

def run_random(session: Session, seed: int) -> None:
    """The default, then distinct uniform draws among the configurations the launcher accepts."""
    session.run(session.job.default())
    seen = session.tried()
    misses = 0
    for config in random_configs(session.job, np.random.default_rng([seed, 11])):
        if key(config) in seen:
            misses += 1
            if misses > 100_000:  # a small space (a measured table) run out of untried points
                return
            continue
        misses = 0
        seen.add(key(config))
        session.run(config)


# -- one change at a time ---------------------------------------------------------------------------

def run_greedy(session: Session, seed: int) -> None:
    """Coordinate descent from the default: per knob (in the documented order) try every other value
    with the rest fixed, move to the fastest if it beats the incumbent; repeat passes until a pass
    changes nothing, then stop. Deterministic (``seed`` unused)."""
    job = session.job
    inc = dict(job.default())
    first = session.run(inc)
    inc_time = first.step_time_s if first.outcome == "ok" else math.inf
    seen = session.tried()
    improved = True
    while improved:
        improved = False
        for d in job.dimensions:
            best: tuple[float, Config] | None = None
            for v in d.values:
                config = {**inc, d.name: v}
                if v == inc[d.name] or key(config) in seen or not job.valid(config):
                    continue
                seen.add(key(config))
                t = session.run(config)
                if t.outcome == "ok" and t.step_time_s is not None and (best is None or t.step_time_s < best[0]):
                    best = (t.step_time_s, config)
            if best is not None and best[0] < inc_time:
                inc_time, inc = best
                improved = True


# -- Optuna TPE -------------------------------------------------------------------------------------

#: Objective value told for an OOM (its constraint marks it infeasible, so TPE ranks it by the violation).
OOM_VALUE = 1e9


def run_tpe(session: Session, seed: int, *, oom: str = "constraint") -> None:
    """Optuna's TPESampler (defaults); how an OOM is told is ``oom``:

    * ``constraint`` (``METHODS["optuna-tpe"]``): a constraint "oom" = 1 (-1
      otherwise) and the value :data:`OOM_VALUE`. Optuna 5 deprecated
      ``TPESampler(constraints_func=...)`` for ``Trial.set_constraint``, which
      TPE reads the same way (feasible when <= 0); the constraint is set from the
      trial's outcome before it is told;
    * ``penalty``: the value :data:`OOM_VALUE`, no constraint (the usual objective
      that returns a large number on failure);
    * ``fail``: a failed trial, which TPE ignores (its default for an exception).

    The default is enqueued first. A crash is a failed trial (TPE ignores it);
    a configuration the launcher rejects is told as failed without a run (no
    device time, no budget), as an objective that checks its arguments would.
    """
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if oom not in ("constraint", "penalty", "fail"):
        raise ValueError(f"oom: expected constraint, penalty or fail, got {oom!r}")
    job = session.job
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.enqueue_trial(job.default())
    rejected = 0
    while session.left > 0 and rejected < 100 * session.budget:
        t = study.ask()
        config = {d.name: t.suggest_categorical(d.name, list(d.values)) for d in job.dimensions}
        if not job.valid(config):
            rejected += 1
            study.tell(t, state=TrialState.FAIL)
            continue
        r = session.run(config)
        if r.outcome == "ok":
            if oom == "constraint":
                t.set_constraint("oom", -1.0)
            study.tell(t, r.step_time_s)
        elif r.outcome == "oom" and oom != "fail":
            if oom == "constraint":
                t.set_constraint("oom", 1.0)
            study.tell(t, OOM_VALUE)
        else:
            study.tell(t, state=TrialState.FAIL)


# -- DeepSpeed-Autotuning-style model-based tuner ---------------------------------------------------

def _onehot(configs: Sequence[Mapping[str, Value]], dims: Sequence[Dimension]) -> np.ndarray:
    cols = []
    for d in dims:
        for v in d.values[1:]:
            cols.append([1.0 if c[d.name] == v and type(c[d.name]) is type(v) else 0.0 for c in configs])
    x = np.asarray(cols, dtype=float).T
    n, k = x.shape
    iu = np.triu_indices(k, 1)
    pairs = (x[:, :, None] * x[:, None, :])[:, iu[0], iu[1]]
    return np.hstack([np.ones((n, 1)), x, pairs])


def run_dsmodel(session: Session, seed: int, *, init: int = 2, explore: float = 0.2, pool: int = 4096,
                ridge: float = 1.0) -> None:
    """DeepSpeed Autotuning's ``model_based`` tuner, reduced to its logic: after ``init`` random
    trials, fit a cost model of throughput (a failed or OOM experiment scores 0 throughput), run the
    untried configuration it predicts fastest, with probability ``explore`` a random one instead.

    DeepSpeed's cost model is an XGBoost ranker over the flattened config; here a ridge regression
    on one-hot features and their pairwise products (no xgboost dependency). Candidates are a fixed
    random pool of launcher-valid configurations (DeepSpeed enumerates its far smaller space).
    """
    job = session.job
    dims = job.dimensions
    rng = np.random.default_rng([seed, 13])
    first = session.run(job.default())
    seen = session.tried()
    draws = random_configs(job, rng)
    cands: dict[tuple[Any, ...], Config] = {}
    for _ in range(50 * pool):
        if len(cands) >= pool:
            break
        c = next(draws)
        cands.setdefault(key(c), c)
    pool_configs = list(cands.values())
    x_pool = _onehot(pool_configs, dims)
    ref = first.step_time_s if first.outcome == "ok" else None
    while session.left > 0:
        untried = [i for i, c in enumerate(pool_configs) if key(c) not in seen]
        if not untried:
            return
        if len(session.trials) < 1 + init or rng.random() < explore:
            i = untried[int(rng.integers(len(untried)))]
        else:
            oks = [t.step_time_s for t in session.trials if t.outcome == "ok" and t.step_time_s]
            scale = ref or (min(oks) if oks else 1.0)
            y = np.array([scale / t.step_time_s if t.outcome == "ok" and t.step_time_s else 0.0
                          for t in session.trials])
            x = _onehot([t.config for t in session.trials], dims)
            # ridge in the dual (n << features): w = X' (X X' + lambda I)^-1 y
            alpha = np.linalg.solve(x @ x.T + ridge * np.eye(len(y)), y)
            pred = x_pool[untried] @ (x.T @ alpha)
            i = untried[int(np.argmax(pred))]
        seen.add(key(pool_configs[i]))
        session.run(pool_configs[i])


Method = Callable[[Session, int], None]

METHODS: dict[str, Method] = {
    "infrarsi": run_engine,
    "random": run_random,
    "greedy": run_greedy,
    "optuna-tpe": run_tpe,
    "ds-model": run_dsmodel,
}


def _tpe_penalty(session: Session, seed: int) -> None:
    run_tpe(session, seed, oom="penalty")


def _tpe_fail(session: Session, seed: int) -> None:
    run_tpe(session, seed, oom="fail")


#: TPE told an OOM the two other usual ways (``optuna-tpe`` is the constraint).
TPE_VARIANTS: dict[str, Method] = {
    "optuna-tpe-penalty": _tpe_penalty,
    "optuna-tpe-fail": _tpe_fail,
}


def play(method: Method, job: SimulatedJob | Bench, budget: int, seed: int, **kw: Any) -> list[Trial]:
    """Run ``method`` on ``job`` (a simulated job or any :class:`Bench`) for at most ``budget`` trials;
    the trials it ran."""
    session = Session(job=as_bench(job), budget=budget)
    try:
        method(session, seed, **kw)
    except BudgetSpent:
        pass
    return session.trials


__all__ = ["Bench", "BudgetSpent", "METHODS", "Result", "Session", "SimBench", "TPE_VARIANTS", "as_bench", "Trial", "engine_space", "known_constraints", "known_valid",
           "play", "run_dsmodel", "run_engine", "run_greedy", "run_random", "run_tpe", "to_candidate",
           "to_config", "to_record"]
