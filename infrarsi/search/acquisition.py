"""Which candidates to run next: constrained expected improvement, batches, pairing, stopping.

Score = EI(log step time) x P(peak fits) x P(runs): the expected reduction of
the best log step time, counting a trial that OOMs or crashes as no
improvement (the standard constrained-EI of Gardner et al. 2014, with the two
constraints treated as independent). Scores are compared in log space so that
the ranking stays meaningful far in the tail, where EI itself underflows.

The pool scored is the whole space when it has at most ``ENUM_LIMIT`` points;
otherwise random valid samples, the one-change neighbours of the incumbent and
of the given anchors, then a few rounds of neighbours of the current top
scorers (a cheap local search of the acquisition). The pairing move adds, for
each promising candidate predicted not to fit, its memory-saving one-change
moves (a patch added or a knob moved, ordered by predicted peak), so "fast but
too big" gets a chance as "fast plus a memory saver" even if random sampling
never happened to draw that pair.

**Risk floor.** Once a configuration has run ok, candidates with P(fit)
>= ``MIN_PROB_FITS`` (0.85) are proposed before any candidate under it. Constrained EI
alone happily trades a 50% chance of an OOM for a large expected gain, and an
OOM is rarely cheap (on the cluster simulator it costs 180 s per GPU, more
than a good trial); on the benchmark the floor halved the OOM share of
device-seconds without lowering the best found (``docs/search.md``). Before
anything has run ok (a baseline that OOMs), fitting at all is the point: the
textbook rule of constrained Bayesian optimisation (Gardner et al. 2014,
Gelbart et al. 2014) is to maximise the probability of feasibility until a
feasible point is found, and EI only ranks candidates within
``FIRST_FIT_SHARE`` of the best P(fit) on offer (or over the usual floor, if
that is lower). Without it the time model, which has seen no step yet, offers
its prior's speed-ups at any risk: on the simulator's 70B model on two nodes
three runs of ten spent all 20 trials on OOMs at P(fit) 0.25. Stop advice still reads the unfloored score.

**What an OOM costs.** Where the records show an OOM costing ``r`` times an ok
trial (``Models.oom_cost_ratio``, median device-seconds; 32 GPUs held until
the kill), the score is divided by the expected cost in ok trials,
``P(fit) + (1 - P(fit)) r``, and the floor becomes ``1 - 0.15 / r``: the
expected device-seconds lost to OOMs stay what they are at ``r = 1``. Only
the OOM's cost is priced, never the ok trial's own time: EI per expected
device-second of the whole trial steered away from the slow configurations
that are the best on the large models (``docs/search.md``). ``r`` is at least 1.

A batch of ``q`` is chosen greedily with the kriging believer: after each pick
the time posterior is updated with a fantasy observation equal to its own
prediction, which leaves means alone and shrinks the variance of everything
that shares features with the pick, so the next pick goes elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from infrarsi.contract.knob_codec import assignment_text
from infrarsi.search.models import Models, TimeModel
from infrarsi.trial_record import Candidate

#: Once something has run ok, a candidate is proposed only if P(fit) >= this, while any candidate is.
#: 0.7 found more of the simulator's optima at its memory limit but lost on the tables of real trials
#: (docs/search.md, Risk floor).
MIN_PROB_FITS: float = 0.85

#: Before anything has run ok, EI ranks only candidates with P(fit) within this share of the best on offer.
FIRST_FIT_SHARE: float = 0.9

#: Subtracted from the log score of a candidate under the floor: a tier, not an exclusion.
_BELOW_FLOOR: float = 1e6

#: Spaces up to this size are scored exhaustively.
ENUM_LIMIT: int = 4096

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True, kw_only=True, slots=True)
class Incumbent:
    """What a proposal must beat: the best observed mean log step time, or, before anything
    ran ok, a reference candidate (the baseline) whose predicted time the EI is relative to."""

    candidate: Candidate
    log_time: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Proposal:
    """A candidate to run, with why: its score and the predictions behind it."""

    candidate: Candidate
    origin: str  # baseline | bank | prior | spread | enumerate | sample | neighbour | pairing
    score: float  # expected_improvement * prob_fits * prob_ok
    expected_improvement: float  # in log step time
    prob_fits: float
    prob_ok: float
    mean_log_time: float
    sd_log_time: float
    note: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StopAdvice:
    """Whether the best remaining candidate is still worth a trial."""

    expected_improvement: float  # max of EI x P(fit) x P(ok), log step time
    relative_improvement: float  # 1 - exp(-that): the expected fraction of step time saved
    min_effect: float
    should_stop: bool
    candidate: Candidate | None


def log_expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """``log E[max(0, best - f)]`` for ``f ~ N(mu, sd^2)``, accurate far into the lower tail."""
    mu = np.asarray(mu, dtype=float)
    sd = np.maximum(np.asarray(sd, dtype=float), 1e-12)
    z = (best - mu) / sd
    out = np.empty_like(z)
    hi = z >= -1.0
    out[hi] = np.log(z[hi] * special.ndtr(z[hi]) + np.exp(-0.5 * z[hi] ** 2 - _LOG_SQRT_2PI))
    mid = (z < -1.0) & (z >= -30.0)
    zm = z[mid]
    # z*Phi(z) + phi(z) = phi(z) * (1 + z*sqrt(pi/2)*erfcx(-z/sqrt 2)); the bracket is about 1/z^2,
    # so down to z = -30 it loses at most 3 of 16 digits
    bracket = zm * math.sqrt(math.pi / 2) * special.erfcx(-zm / math.sqrt(2))
    out[mid] = -0.5 * zm ** 2 - _LOG_SQRT_2PI + np.log1p(bracket)
    lo = z < -30.0
    out[lo] = -0.5 * z[lo] ** 2 - _LOG_SQRT_2PI - 2.0 * np.log(-z[lo])  # phi(z) / z^2
    return out + np.log(sd)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    return np.exp(log_expected_improvement(mu, sd, best))


@dataclass(frozen=True, kw_only=True, slots=True)
class _Scored:
    log_score: np.ndarray
    log_ei: np.ndarray
    prob_fits: np.ndarray
    prob_ok: np.ndarray
    mu: np.ndarray
    sd: np.ndarray


def _time_ei(post: TimeModel, x: np.ndarray, x_inc: np.ndarray, inc: Incumbent) -> np.ndarray:
    if inc.log_time is not None:
        mu, var = post.predict(x)
        return log_expected_improvement(mu, np.sqrt(var), inc.log_time)
    mu_d, var_d = post.predict_difference(x, x_inc)
    return log_expected_improvement(mu_d, np.sqrt(var_d), 0.0)


def score(models: Models, candidates: Sequence[Candidate], incumbent: Incumbent) -> _Scored:
    """Scores of ``candidates`` (log space) and the predictions behind them."""
    x = models.design(candidates)
    pf = models.memory.prob_fits(x, models.memory_limit)
    pok = models.prob_ok(candidates, x)
    log_ei = _time_ei(models.time, x, models.design([incumbent.candidate])[0], incumbent)
    mu, var = models.time.predict(x)
    with np.errstate(divide="ignore"):
        log_score = log_ei + np.log(pf) + np.log(pok)
    return _Scored(log_score=log_score, log_ei=log_ei, prob_fits=pf, prob_ok=pok, mu=mu, sd=np.sqrt(var))


def describe_change(before: Candidate, after: Candidate) -> str:
    """``after`` relative to ``before``: ``+patch``, ``-patch``, ``knob=value``."""
    a, b = before.knob_dict(), after.knob_dict()
    parts = [assignment_text(k, v) for k, v in sorted(b.items()) if k not in a or a[k] != v or type(a[k]) is not type(v)]
    parts += [f"+{p}" for p in after.patches if p not in before.patches]
    parts += [f"-{p}" for p in before.patches if p not in after.patches]
    return " ".join(parts) or "(same)"


def memory_savers(models: Models, candidate: Candidate) -> list[Candidate]:
    """One-change moves that keep every patch of ``candidate`` and lower its predicted peak, most saving first."""
    moves = [n for n in models.space.neighbors(candidate) if set(candidate.patches) <= set(n.patches)]
    if not moves:
        return []
    mu, _ = models.memory.predict(models.design([candidate, *moves]))
    order = sorted((float(m), i) for i, m in enumerate(mu[1:]) if m < mu[0] - 1e-3)
    return [moves[i] for _, i in order]


def pair_with_savers(models: Models, candidate: Candidate, *, per_step: int = 3, depth: int = 2) -> list[Candidate]:
    """The pairing move: ``candidate`` plus memory savers, so a speed-up predicted to OOM may fit.

    Up to ``per_step`` savers are tried on ``candidate``; if none is predicted
    to fit (P >= 0.5), the biggest saver is extended by a second one, up to
    ``depth`` savers stacked. Every pair considered is returned for scoring.
    """
    out: dict[str, Candidate] = {}
    frontier = [candidate]
    for _ in range(depth):
        new = [s for c in frontier for s in memory_savers(models, c)[:per_step]]
        for s in new:
            out.setdefault(s.digest(), s)
        if not new or float(np.max(models.prob_fits(new))) >= 0.5:
            break
        frontier = new[:1]
    return list(out.values())


def build_pool(models: Models, rng: np.random.Generator, *, tried: Collection[str], incumbent: Incumbent,
               anchors: Sequence[Candidate] = (), n_samples: int = 1024, refine_rounds: int = 2,
               refine_top: int = 8, pair_top: int = 8) -> dict[str, tuple[Candidate, str, str]]:
    """Untried candidates to score: digest -> (candidate, origin, note)."""
    space = models.space
    pool: dict[str, tuple[Candidate, str, str]] = {}

    def add(c: Candidate, origin: str, note: str = "") -> None:
        pool.setdefault(c.digest(), (c, origin, note))

    every = space.enumerate(ENUM_LIMIT)
    if every is not None:
        for c in every:
            add(c, "enumerate")
    else:
        for c in [space.baseline(), *space.sample(rng, n_samples)]:
            add(c, "sample")
        expanded: set[str] = set()
        for a in [incumbent.candidate, *anchors]:
            expanded.add(a.digest())
            for c in space.neighbors(a):
                add(c, "neighbour", f"one change from {a.describe()}")
        for _ in range(refine_rounds):
            cands = [v[0] for v in pool.values()]
            s = score(models, cands, incumbent)
            top = [cands[i] for i in np.argsort(-s.log_score, kind="stable") if cands[i].digest() not in expanded]
            for a in top[:refine_top]:
                expanded.add(a.digest())
                for c in space.neighbors(a):
                    add(c, "neighbour", f"one change from {a.describe()}")
    cands = [v[0] for v in pool.values()]
    if cands and models.memory_limit is not None:
        s = score(models, cands, incumbent)
        promise = s.log_ei + np.log(s.prob_ok)  # ignoring memory: fast and runnable
        order = [i for i in np.argsort(-promise, kind="stable") if s.prob_fits[i] < 0.5][:pair_top]
        for i in order:
            for pair in pair_with_savers(models, cands[i]):
                if pair.digest() not in pool or pool[pair.digest()][1] in ("enumerate", "sample"):
                    pool[pair.digest()] = (pair, "pairing",
                                           f"{describe_change(cands[i], pair)} makes room for {cands[i].describe()}")
    return {d: v for d, v in pool.items() if d not in tried}


def propose_batch(models: Models, q: int, rng: np.random.Generator, *, tried: Collection[str],
                  incumbent: Incumbent, anchors: Sequence[Candidate] = (),
                  pool: dict[str, tuple[Candidate, str, str]] | None = None) -> list[Proposal]:
    """Up to ``q`` distinct untried candidates, greedily by score with the kriging believer."""
    if pool is None:
        pool = build_pool(models, rng, tried=tried, incumbent=incumbent, anchors=anchors)
    pool = {d: v for d, v in pool.items() if d not in tried}
    entries = list(pool.values())
    if not entries or q <= 0:
        return []
    cands = [e[0] for e in entries]
    x = models.design(cands)
    pf = models.memory.prob_fits(x, models.memory_limit)
    pok = models.prob_ok(cands, x)
    with np.errstate(divide="ignore"):
        log_feas = np.log(pf) + np.log(pok)
        # expected cost in ok trials: an OOM costs oom_cost_ratio of them (module docstring)
        log_feas = log_feas - np.log(pf + (1.0 - pf) * models.oom_cost_ratio)
    # the risk floor (module docstring): everything under it ranks after everything over it
    floor = 1.0 - (1.0 - MIN_PROB_FITS) / models.oom_cost_ratio
    if incumbent.log_time is None:
        floor = min(floor, FIRST_FIT_SHARE * float(np.max(pf)))
    log_feas = np.where(pf >= floor, log_feas, log_feas - _BELOW_FLOOR)
    post, inc = models.time, incumbent
    x_inc = models.design([inc.candidate])[0]
    taken = np.zeros(len(cands), dtype=bool)
    out: list[Proposal] = []
    for _ in range(min(q, len(cands))):
        log_ei = _time_ei(post, x, x_inc, inc)
        log_score = np.where(taken, -np.inf, log_ei + log_feas)
        j = int(np.argmax(log_score))
        if taken[j]:
            break
        taken[j] = True
        mu, var = post.predict(x[j])
        c, origin, note = entries[j]
        out.append(Proposal(candidate=c, origin=origin, score=float(pf[j] * pok[j] * np.exp(log_ei[j])),
                            expected_improvement=float(np.exp(log_ei[j])), prob_fits=float(pf[j]),
                            prob_ok=float(pok[j]), mean_log_time=float(mu[0]), sd_log_time=float(np.sqrt(var[0])),
                            note=note))
        post = post.believe(x[j])
        if inc.log_time is not None:
            if mu[0] < inc.log_time:
                inc = Incumbent(candidate=c, log_time=float(mu[0]))
        elif post.predict_difference(x[j], x_inc)[0][0] < 0:
            inc, x_inc = Incumbent(candidate=c), x[j]
    return out


def expected_remaining_improvement(models: Models, rng: np.random.Generator, *, tried: Collection[str],
                                   incumbent: Incumbent, min_effect: float = 0.02,
                                   anchors: Sequence[Candidate] = ()) -> StopAdvice:
    """The best constrained EI left in the pool; stop when it promises less than ``min_effect``.

    Only advises stopping once something has run ok: before that, the EI is
    relative to a prediction, not a measurement.
    """
    pool = build_pool(models, rng, tried=tried, incumbent=incumbent, anchors=anchors)
    if not pool:
        return StopAdvice(expected_improvement=0.0, relative_improvement=0.0, min_effect=min_effect,
                          should_stop=True, candidate=None)
    cands = [v[0] for v in pool.values()]
    s = score(models, cands, incumbent)
    j = int(np.argmax(s.log_score))
    ei = float(np.exp(s.log_score[j]))
    rel = 1.0 - math.exp(-ei)
    return StopAdvice(expected_improvement=ei, relative_improvement=rel, min_effect=min_effect,
                      should_stop=incumbent.log_time is not None and rel < min_effect, candidate=cands[j])
