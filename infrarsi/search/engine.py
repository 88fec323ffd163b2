"""The search engine facade: observe trial records, propose batches, report.

State is only the records it has seen; the models are refitted from all of
them on every change, and the random stream of each proposal is derived from
``(seed, number of records, purpose)``. So an engine rebuilt from the journal
after a crash proposes exactly what the lost one would have, and calling a
method twice gives the same answer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from infrarsi.search.acquisition import Incumbent, Proposal, StopAdvice, expected_remaining_improvement, propose_batch
from infrarsi.search.crash_suspects import SuspectRow
from infrarsi.search.features import EffectRow, FeatureMap, Priors, build_features
from infrarsi.search.memory_model import MemoryPrice
from infrarsi.search.models import Models, fit_models, in_domain
from infrarsi.search.space import SearchSpace
from infrarsi.search.start import SPREAD_MIN_FEASIBLE, initial_batch
from infrarsi.trial_record import Candidate, Outcome, TrialRecord

_PURPOSE = {"initial": 1, "next": 2, "stop": 3}


@dataclass(frozen=True, kw_only=True, slots=True)
class Best:
    """The fastest configuration that has run ok, by its own measurements."""

    candidate: Candidate
    step_time_s: float  # geometric mean over its ok trials
    n_ok: int
    predicted_step_time_s: float  # the time model's posterior mean at this point


@dataclass(frozen=True, kw_only=True, slots=True)
class PosteriorReport:
    """Prior vs posterior of every coefficient, memory prices, noise and trial counts."""

    time_effects: tuple[EffectRow, ...]
    memory_effects: tuple[EffectRow, ...]
    memory_prices: tuple[MemoryPrice, ...]
    crash_effects: tuple[EffectRow, ...]
    time_sigma: float
    memory_sigma: float
    baseline_step_time_s: float
    baseline_peak_bytes: float
    counts: Mapping[str, int]
    #: what the failed trials are blamed on (:mod:`.crash_suspects`), most blamed first
    crash_suspects: tuple[SuspectRow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]
        for key in ("time_effects", "memory_effects", "memory_prices", "crash_effects", "crash_suspects"):
            data[key] = [asdict(row) for row in data[key]]
        data["counts"] = dict(self.counts)
        return data


class SearchEngine:
    """Observe records, propose candidates; rebuildable from the records alone."""

    def __init__(self, space: SearchSpace, priors: Priors | None = None, memory_limit: float | None = None,
                 seed: int = 0, device_memory_limit: float | None = None) -> None:
        """``memory_limit``: the host's (the contract's); ``device_memory_limit``: one GPU's memory, the limit
        once trials report GPU memory and none reported its capacity (:mod:`.memory_source`)."""
        self.space = space
        self.priors = priors or Priors()
        self.memory_limit = memory_limit
        self.device_memory_limit = device_memory_limit
        self.seed = int(seed)
        self.features: FeatureMap = build_features(space, self.priors)
        self._records: dict[tuple[str, int], TrialRecord] = {}
        self._models = fit_models(space, self.features, self.priors, [], memory_limit, device_memory_limit)

    # -- state --------------------------------------------------------------------

    def observe(self, records: Sequence[TrialRecord]) -> None:
        """Add records (a record already seen, by run and trial number, replaces itself) and refit."""
        changed = False
        for r in records:
            key = (r.run_id, r.trial_no)
            if self._records.get(key) != r:
                self._records[key] = r
                changed = True
        if changed:
            self._models = fit_models(self.space, self.features, self.priors, list(self._records.values()),
                                      self.memory_limit, self.device_memory_limit)

    @property
    def records(self) -> list[TrialRecord]:
        return [self._records[k] for k in sorted(self._records)]

    @property
    def models(self) -> Models:
        return self._models

    def tried(self) -> list[Candidate]:
        """Every candidate with a record, whatever its outcome, once each."""
        out: dict[str, Candidate] = {}
        for r in self.records:
            c = self.space.complete(r.candidate)
            out.setdefault(c.digest(), c)
        return list(out.values())

    def _ok_times(self) -> dict[str, tuple[Candidate, list[float]]]:
        out: dict[str, tuple[Candidate, list[float]]] = {}
        for r in self.records:
            c = self.space.complete(r.candidate)
            t = r.metrics.step_time_s
            if r.outcome == Outcome.OK and t is not None and t > 0 and in_domain(self.space, c):
                out.setdefault(c.digest(), (c, []))[1].append(math.log(t))
        return out

    def _ranked_ok(self) -> list[tuple[float, Candidate, int]]:
        rows = [(float(np.mean(ts)), c, len(ts)) for c, ts in self._ok_times().values()]
        return sorted(rows, key=lambda r: (r[0], r[1].digest()))

    def incumbent(self) -> Incumbent:
        ranked = self._ranked_ok()
        if not ranked:
            return Incumbent(candidate=self.space.baseline())
        return Incumbent(candidate=ranked[0][1], log_time=ranked[0][0])

    def _rng(self, purpose: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, len(self._records), _PURPOSE[purpose]])

    # -- proposals ----------------------------------------------------------------

    def initial_batch(self, n: int = 8, bank_candidates: Sequence[tuple[Candidate, float]] = (), *,
                      include_baseline: bool = True) -> list[Proposal]:
        """The diverse first batch (see :mod:`infrarsi.search.start`); ``bank_candidates`` are
        ``(candidate, similarity weight)`` pairs from the experience bank."""
        return initial_batch(self._models, n, self._rng("initial"), tried=self.tried(), bank=bank_candidates,
                             include_baseline=include_baseline, incumbent=self.incumbent())

    def refresh_initial(self, rest: Sequence[Proposal], bank_candidates: Sequence[tuple[Candidate, float]] = (),
                        *, min_feasible: float = SPREAD_MIN_FEASIBLE) -> list[Proposal]:
        """The rest of a first batch run one trial at a time, revised by what has run since.

        A first batch is chosen before any of it has run, so when it runs
        sequentially, a crash or OOM early in it says nothing to the picks after it
        (five picks with 8 experts per rank can all crash on the same rule). Picks
        the refitted models now give ``P(fit) x P(runs) < min_feasible`` are dropped
        and the batch topped up from :meth:`initial_batch` under the current models;
        the order and the rest are kept.
        """
        tried = {c.digest() for c in self.tried()}
        keep = [p for p in rest if p.candidate.digest() not in tried]
        if keep:
            x = self._models.design([p.candidate for p in keep])
            feasible = (self._models.memory.prob_fits(x, self._models.memory_limit)
                        * self._models.prob_ok([p.candidate for p in keep], x))
            keep = [p for p, f in zip(keep, feasible) if f >= min_feasible]
        missing = len(rest) - len(keep)
        if missing <= 0:
            return keep
        fresh = initial_batch(self._models, missing + len(keep), self._rng("initial"), tried=self.tried(),
                              bank=bank_candidates, include_baseline=False, incumbent=self.incumbent())
        have = {p.candidate.digest() for p in keep}
        return keep + [p for p in fresh if p.candidate.digest() not in have][:missing]

    def next_batch(self, q: int = 4, *, pending: Sequence[Candidate] = ()) -> list[Proposal]:
        """``q`` untried candidates by constrained EI. ``pending`` (proposed, not yet recorded)
        are excluded and believed at their predicted time, so the batch does not repeat them."""
        models = self._with_pending(pending)
        tried = {c.digest() for c in self.tried()} | {self.space.complete(c).digest() for c in pending}
        anchors = [c for _, c, _ in self._ranked_ok()[:3]]
        return propose_batch(models, q, self._rng("next"), tried=tried, incumbent=self.incumbent(),
                             anchors=anchors)

    def stop_advice(self, min_effect: float = 0.02, *, pending: Sequence[Candidate] = ()) -> StopAdvice:
        """Whether any untried candidate still promises at least ``min_effect`` (fraction of step time)."""
        models = self._with_pending(pending)
        tried = {c.digest() for c in self.tried()} | {self.space.complete(c).digest() for c in pending}
        anchors = [c for _, c, _ in self._ranked_ok()[:3]]
        return expected_remaining_improvement(models, self._rng("stop"), tried=tried, incumbent=self.incumbent(),
                                              min_effect=min_effect, anchors=anchors)

    def _with_pending(self, pending: Sequence[Candidate]) -> Models:
        if not pending:
            return self._models
        post = self._models.time
        for row in self._models.design([self.space.complete(c) for c in pending]):
            post = post.believe(row)
        return replace(self._models, time=post)

    # -- results ------------------------------------------------------------------

    def best(self) -> Best | None:
        ranked = self._ranked_ok()
        if not ranked:
            return None
        log_t, cand, n_ok = ranked[0]
        mu, _ = self._models.predict_time([cand])
        return Best(candidate=cand, step_time_s=math.exp(log_t), n_ok=n_ok,
                    predicted_step_time_s=math.exp(float(mu[0])))

    def posterior_report(self) -> PosteriorReport:
        m = self._models
        baseline_log_time = float(m.time.predict(np.zeros((1, len(self.features.names))))[0][0])
        counts = Counter(r.outcome.value for r in self._records.values())
        return PosteriorReport(
            time_effects=tuple(m.time.effects()), memory_effects=tuple(m.memory.effects()),
            memory_prices=tuple(m.memory.prices()), crash_effects=tuple(m.feasibility.effects()),
            crash_suspects=m.crash_suspects.summary(),
            time_sigma=m.time.sigma, memory_sigma=m.memory.sigma,
            baseline_step_time_s=math.exp(baseline_log_time), baseline_peak_bytes=m.memory.baseline_bytes,
            counts={o.value: counts.get(o.value, 0) for o in Outcome})
