"""From trial records to the three fitted models the acquisition reads.

Which record feeds which model:

* time (log step time): ``ok`` trials with a step time;
* memory (log peak, Tobit): ``ok`` trials with a measured peak are exact; an
  ``oom``, or any trial whose peak is flagged censored, is right-censored at the
  largest lower bound known (the peak seen before the kill, the limit it ran under);
  the GPU's peaks against its capacity when the run has GPU readings (:mod:`.memory_source`);
* feasibility: ``ok``/``oom`` ran, ``crash``/``timeout``/``invalid`` failed;
* ``rejected`` (never launched) and ``interrupted`` (the bot died) feed nothing:
  they only mark the candidate as tried.

A record whose candidate is not a point of this space's domains (an unknown
patch, a knob value outside its domain) is ignored: it cannot be encoded
faithfully. Records are sorted by trial identity first, so refitting from the
same journal gives the same numbers whatever order they arrived in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from infrarsi.search.crash_suspects import CrashSuspects
from infrarsi.search.feasibility import FeasibilityPosterior, fit_feasibility
from infrarsi.search.features import FeatureMap, Priors
from infrarsi.search.memory_model import MemoryPosterior, fit_memory
from infrarsi.search.memory_parts import (STATES_SHARE, PartsMemoryPosterior, column_parts, fit_memory_parts,
                                          parts_by_feature)
from infrarsi.search.memory_source import MemorySource, memory_source
from infrarsi.search.space import SearchSpace
from infrarsi.search.time_model import TimePosterior, fit_time
from infrarsi.search.time_parts import TIME_PARTS, PartsTimePosterior, fit_time_parts, intercept_for
from infrarsi.trial_record import Candidate, Outcome, TrialRecord

FAILED: frozenset[Outcome] = frozenset({Outcome.CRASH, Outcome.TIMEOUT, Outcome.INVALID})
RAN: frozenset[Outcome] = frozenset({Outcome.OK, Outcome.OOM})

#: Either memory model: one log-linear Tobit fit, or states plus activations.
MemoryModel = MemoryPosterior | PartsMemoryPosterior

#: Either time model: one log-linear fit, or compute plus exposed communication.
TimeModel = TimePosterior | PartsTimePosterior

#: Memory intercept prior when the caller gives none: the baseline is a job its
#: owner runs, so it probably fits: centred on half the limit, sd 1.5 in log
#: bytes (a factor 4.5), which gives the baseline P(fit) of about 0.68.
MEMORY_INTERCEPT_SD: float = 1.5

#: The measured states' share is kept inside this range: a part given no room a
#: priori cannot grow in the fit (a job whose step allocates nothing sampled).
STEADY_SHARE_RANGE: tuple[float, float] = (0.1, 0.95)


@dataclass(frozen=True, kw_only=True, slots=True)
class Models:
    """The fitted models, with the space and design they share."""

    space: SearchSpace
    features: FeatureMap
    time: TimeModel
    memory: MemoryModel
    feasibility: FeasibilityPosterior
    memory_limit: float | None
    oom_cost_ratio: float = 1.0  # device-seconds of an OOM over those of an ok trial, as recorded (at least 1)
    crash_suspects: CrashSuspects = field(default_factory=lambda: CrashSuspects.fit((), ()))

    def design(self, candidates: Sequence[Candidate]) -> np.ndarray:
        return self.features.expand(self.space.encode_many(candidates)) if candidates else \
            np.zeros((0, len(self.features.names)))

    def predict_time(self, candidates: Sequence[Candidate]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of latent log step time."""
        mu, var = self.time.predict(self.design(candidates))
        return mu, np.sqrt(var)

    def prob_fits(self, candidates: Sequence[Candidate], limit: float | None = None) -> np.ndarray:
        """P(peak < limit), the engine's memory limit unless another is given."""
        return self.memory.prob_fits(self.design(candidates), limit if limit is not None else self.memory_limit)

    def prob_ok(self, candidates: Sequence[Candidate], x: np.ndarray | None = None) -> np.ndarray:
        """P(runs): the logistic crash model's, times the chance of holding no failed trial's
        suspect setting or pair (:mod:`.crash_suspects`). ``x``: the candidates' design rows, if at hand."""
        x = self.design(candidates) if x is None else x
        return self.feasibility.prob_ok(x) * (1.0 - self.crash_suspects.prob_fail(candidates))


def in_domain(space: SearchSpace, candidate: Candidate) -> bool:
    """Every knob known and inside its domain, every patch known (constraints aside)."""
    values = candidate.knob_dict()
    axes = {a.name: a for a in space.axes}
    return (all(k in axes and axes[k].knob.contains(v) for k, v in values.items())
            and all(p in space.patches for p in candidate.patches))


def level_indicators(space: SearchSpace) -> tuple[tuple[str, int, float], ...]:
    """The crash model's per-level indicators: ``(name, feature column, encoded value)`` for every
    non-default level of each ordered knob with three or more levels (see :mod:`.feasibility`)."""
    out = []
    for a in space.axes:
        if a.encoding == "onehot" or len(a.levels) < 3:
            continue
        col = space.feature_names.index(a.name)
        for v in a.levels:
            code = a.features(v)[0]
            if code != 0.0:
                out.append((f"{a.name}=={v}", col, code))
    return tuple(out)


def baseline_states_share(space: SearchSpace, records: Sequence[TrialRecord],
                          source: MemorySource | None = None) -> float | None:
    """The share of the baseline's peak it held across steps (median over its ok trials that measured
    both, in ``source``'s memory: the host's by default), within ``STEADY_SHARE_RANGE``; None when no such
    trial of the default configuration exists."""
    source = source or MemorySource(kind="host", limit=None)
    shares = []
    for r in records:
        share = source.steady_share(r)
        if share is None:
            continue
        cand = space.complete(r.candidate)
        if in_domain(space, cand) and not space.encode(cand).any():
            shares.append(share)
    if not shares:
        return None
    low, high = STEADY_SHARE_RANGE
    return min(max(float(np.median(shares)), low), high)


def fit_models(space: SearchSpace, features: FeatureMap, priors: Priors, records: Sequence[TrialRecord],
               memory_limit: float | None, device_memory_limit: float | None = None) -> Models:
    """Fit all three models on ``records`` (any order; sorted by trial identity here).

    Memory is the GPU's when any record has a GPU reading (limit: the capacity the trials reported, else
    ``device_memory_limit``), the host's otherwise (limit: ``memory_limit``); see :mod:`.memory_source`."""
    names = features.names
    source = memory_source(records, host_limit=memory_limit, device_limit=device_memory_limit)
    memory_limit = source.limit
    t_x, t_y, m_x, m_y, m_c, f_x, f_y = [], [], [], [], [], [], []
    ok_cost: list[float] = []
    oom_cost: list[float] = []
    ran: list[Candidate] = []
    failed: list[Candidate] = []
    for r in sorted(records, key=lambda r: (r.run_id, r.trial_no)):
        cand = space.complete(r.candidate)
        if r.outcome in (Outcome.REJECTED, Outcome.INTERRUPTED) or not in_domain(space, cand):
            continue
        z = space.encode(cand)
        step = r.metrics.step_time_s
        if r.outcome == Outcome.OK and step is not None and step > 0:
            t_x.append(z)
            t_y.append(math.log(step))
        reading = source.reading(r)
        if reading is not None:
            m_x.append(z)
            m_y.append(math.log(reading[0]))
            m_c.append(reading[1])
        if r.cost_s > 0 and r.outcome in RAN:
            (ok_cost if r.outcome == Outcome.OK else oom_cost).append(r.cost_s)
        if r.outcome in RAN or r.outcome in FAILED:
            f_x.append(z)
            f_y.append(1.0 if r.outcome in FAILED else 0.0)
            (failed if r.outcome in FAILED else ran).append(cand)

    def design(rows: list[np.ndarray]) -> np.ndarray:
        return features.expand(np.vstack(rows)) if rows else np.zeros((0, len(names)))

    tm, ts = features.prior(space, priors, "time")
    time_parts = parts_by_feature(features.main_names, priors.time_parts, TIME_PARTS, "time")
    time: TimeModel
    if set(filter(None, time_parts)) == set(TIME_PARTS) and t_y:
        time = fit_time_parts(design(t_x), np.asarray(t_y), names=names,
                              parts=column_parts(time_parts, features.squares, features.pairs, TIME_PARTS),
                              n_main=features.n_main, prior_mean=tm, prior_sd=ts,
                              intercept=intercept_for(np.asarray(t_y), priors.time_intercept), noise=priors.time_noise)
    else:  # a part nothing moves (CPU knobs: no communication) or nothing measured yet: the single model
        time = fit_time(design(t_x), np.asarray(t_y), names=names, prior_mean=tm, prior_sd=ts,
                        intercept=priors.time_intercept, noise=priors.time_noise)
    mm, ms = features.prior(space, priors, "memory")
    intercept = priors.memory_intercept
    if intercept is None:
        anchor = memory_limit or max((math.exp(v) for v in m_y), default=2.0 ** 31)
        intercept = (math.log(anchor / 2), MEMORY_INTERCEPT_SD)
    main_parts = parts_by_feature(features.main_names, priors.memory_parts)
    memory: MemoryModel
    if any(main_parts):
        share = baseline_states_share(space, records, source)
        memory = fit_memory_parts(design(m_x), np.asarray(m_y), np.asarray(m_c, dtype=bool), names=names,
                                  parts=column_parts(main_parts, features.squares, features.pairs),
                                  n_main=features.n_main, prior_mean=mm, prior_sd=ms, intercept=intercept,
                                  noise=priors.memory_noise,
                                  states_share=STATES_SHARE if share is None else share, prior_share=STATES_SHARE,
                                  by_part=priors.memory_by_part)
    else:
        memory = fit_memory(design(m_x), np.asarray(m_y), np.asarray(m_c, dtype=bool), names=names,
                            prior_mean=mm, prior_sd=ms, intercept=intercept, noise=priors.memory_noise)
    fm, fs = features.prior(space, priors, "crash")
    feas = fit_feasibility(design(f_x), np.asarray(f_y), names=names, prior_mean=fm, prior_sd=fs,
                           base_rate=priors.crash_base_rate, levels=level_indicators(space),
                           level_sd=priors.crash_sd)
    ratio = float(np.median(oom_cost) / np.median(ok_cost)) if ok_cost and oom_cost else 1.0
    return Models(space=space, features=features, time=time, memory=memory, feasibility=feas,
                  memory_limit=memory_limit, oom_cost_ratio=max(ratio, 1.0),
                  crash_suspects=CrashSuspects.fit(ran, failed))
