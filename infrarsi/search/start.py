"""The first batch: diverse on purpose, because the models know only their priors.

Four sources, in this order, never a duplicate and never anything already tried:

1. the baseline, if it has not run: it pins both intercepts, and every
   later trial is read relative to it;
2. transfers from the experience bank: configurations that won on similar
   jobs, highest similarity weight first, kept only if they are valid here
   (knobs and patches this space lacks are dropped first);
3. the priors' favourites: the greedy constrained-EI batch of
   :func:`~infrarsi.search.acquisition.propose_batch` under the current models
   (before any trial, the prior alone): the prior mean speed-up, credited for
   its uncertainty, times P(fit) and P(runs), made diverse by the believer;
4. space-filling picks: maximin distance from everything chosen or tried,
   among points not predicted to fail outright, so a wrong prior cannot keep
   the whole batch in one corner.

With ``n = 8`` and a bank: baseline, 2 transfers, 3 favourites, 2 spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from infrarsi.search.acquisition import ENUM_LIMIT, Incumbent, Proposal, build_pool, propose_batch, score
from infrarsi.search.models import Models
from infrarsi.trial_record import Candidate

#: Space-filling picks are drawn from points with at least this P(fit) x P(ok), if enough exist.
SPREAD_MIN_FEASIBLE: float = 0.5

#: ... and among the best this share of them by score (at least ``SPREAD_TOP_MIN`` points).
SPREAD_TOP: float = 0.1
SPREAD_TOP_MIN: int = 32


def maximin(models: Models, pool: Sequence[Candidate], fixed: Sequence[Candidate], k: int) -> list[Candidate]:
    """Greedily pick ``k`` of ``pool``, each the farthest (min distance) from ``fixed`` and earlier picks.

    Ties break toward the earlier pool entry, so the choice is deterministic.
    """
    if k <= 0 or not pool:
        return []
    space = models.space
    emb = np.vstack([space.embed(c) for c in pool])
    if fixed:
        ref = np.vstack([space.embed(c) for c in fixed])
        dmin = np.min(np.linalg.norm(emb[:, None, :] - ref[None, :, :], axis=2), axis=1)
    else:
        dmin = np.full(len(pool), np.inf)
    out: list[Candidate] = []
    for _ in range(min(k, len(pool))):
        j = int(np.argmax(dmin))
        if dmin[j] <= 0:
            break
        out.append(pool[j])
        dmin = np.minimum(dmin, np.linalg.norm(emb - emb[j], axis=1))
    return out


def initial_batch(models: Models, n: int, rng: np.random.Generator, *, tried: Sequence[Candidate] = (),
                  bank: Sequence[tuple[Candidate, float]] = (), include_baseline: bool = True,
                  incumbent: Incumbent | None = None) -> list[Proposal]:
    """Up to ``n`` distinct untried candidates mixing baseline, bank, prior favourites and spread."""
    space = models.space
    inc = incumbent or Incumbent(candidate=space.baseline())
    seen = {c.digest() for c in tried}
    chosen: list[tuple[Candidate, str, str]] = []

    def add(c: Candidate, origin: str, note: str = "") -> bool:
        if len(chosen) >= n or c.digest() in seen or not space.contains(c):
            return False
        seen.add(c.digest())
        chosen.append((c, origin, note))
        return True

    if include_baseline:
        add(space.baseline(), "baseline", "every knob at its default, no patches")
    if bank:
        quota = len(chosen) + max(1, n // 4)
        for cand, weight in sorted(bank, key=lambda e: -e[1]):
            if len(chosen) >= quota:
                break
            point = space.project(cand)
            if point is not None:
                add(point, "bank", f"transferred (similarity {weight:.2f}) from {cand.describe()}")
    left = n - len(chosen)
    if left > 0:
        n_prior = math.ceil(left / 2) if left > 1 else 1
        believed = models  # what is already in the batch counts as explored, as in propose_batch
        for row in models.design([c for c, _, _ in chosen]):
            believed = replace(believed, time=believed.time.believe(row))
        for p in propose_batch(believed, n_prior, rng, tried=seen, incumbent=inc):
            add(p.candidate, "prior", p.note)
    left = n - len(chosen)
    if left > 0:
        every = space.enumerate(ENUM_LIMIT)
        pool = every if every is not None else space.sample(rng, 512)
        pool = [c for c in pool if c.digest() not in seen]
        if pool:
            s = score(models, pool, inc)
            good = [c for c, f, o in zip(pool, s.prob_fits, s.prob_ok) if f * o >= SPREAD_MIN_FEASIBLE]
            pool = good if len(good) >= left else pool
            if len(pool) > SPREAD_TOP_MIN:
                # spread among the promising: the best SPREAD_TOP share by score, so a corner that
                # the priors already call slow (or likely to fail) does not take a trial just for being far
                s = score(models, pool, inc)
                keep = max(SPREAD_TOP_MIN, int(len(pool) * SPREAD_TOP))
                order = np.argsort(-s.log_score, kind="stable")[:keep]
                pool = [pool[i] for i in sorted(order)]
        fixed = [c for c, _, _ in chosen] + list(tried)
        for c in maximin(models, pool, fixed, left):
            add(c, "spread", "far from everything chosen or tried")
    if len(chosen) < n:  # a tiny space or a crowded one: top up by score
        extra = build_pool(models, rng, tried=seen, incumbent=inc)
        for p in propose_batch(models, n - len(chosen), rng, tried=seen, incumbent=inc, pool=extra):
            add(p.candidate, p.origin, p.note)
    return _as_proposals(models, chosen, inc)


def _as_proposals(models: Models, chosen: list[tuple[Candidate, str, str]], inc: Incumbent) -> list[Proposal]:
    if not chosen:
        return []
    s = score(models, [c for c, _, _ in chosen], inc)
    return [Proposal(candidate=c, origin=origin, score=float(np.exp(s.log_score[i])),
                     expected_improvement=float(np.exp(s.log_ei[i])), prob_fits=float(s.prob_fits[i]),
                     prob_ok=float(s.prob_ok[i]), mean_log_time=float(s.mu[i]), sd_log_time=float(s.sd[i]),
                     note=note) for i, (c, origin, note) in enumerate(chosen)]
