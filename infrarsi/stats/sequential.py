"""Verification that stops early: a group-sequential version of :func:`infrarsi.stats.compare`.

A fixed design runs every pair the doctor asked for, even when the first four
already show a 2x speedup or a candidate that is no faster at all. Here the
same two-gate rule (exact one-sided Mann-Whitney test and a bootstrap lower
bound on the ratio of medians above ``1 + min_effect``) is applied at a few
*looks* (4, 6, 8 … runs per arm), and verification stops at the first look
where it is decided:

- **efficacy** when both gates pass at that look's nominal level ``alpha_k``;
- **futility** when a speedup above ``1 + min_effect`` has become unlikely:
  with the doctor's run-to-run noise ``sigma_log`` the log ratio of medians is
  approximately normal with standard error ``sigma_log * sqrt(pi / n)`` (the
  sample median's efficiency is ``2 / pi``), and the look stops when
  ``P(true log ratio > log(1 + min_effect))`` under that approximation falls
  below ``futility`` (Jennison & Turnbull, *Group Sequential Methods with
  Applications to Clinical Trials*, 2000, ch. 10, stochastic curtailment);
- otherwise it goes on, up to ``looks[-1]`` runs per arm.

Error control. The nominal levels come from an alpha-spending plan (Lan &
DeMets, Biometrika 1983) and are combined with the union bound: the
probability of a false promotion at *any* look is at most
``sum(alpha_k) <= alpha``, whatever the correlation between looks and
whatever the noise distribution, because each look's rank test is exact at
its own level. That is conservative (the looks are positively correlated, so
the true rate is lower), and the price is paid in power, which the plan buys
back by allowing more runs at the last look than the fixed design
(``inflation``). Futility stops can only lower the false-promotion rate
(they are "non-binding" in the literature's terms), so the bound holds
whether or not they are taken. ``simulate_sequential`` measures all of this
on the rule itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as _st

from infrarsi.stats._checks import non_negative, positive_int, probability
from infrarsi.stats.compare import Comparison, check_rule, decide, compare, min_exact_p, p_below

Stop = Literal["efficacy", "futility", "max_pairs", "continue"]

#: Share of alpha spent at the first look: enough that a clear speedup can stop
#: there (4 vs 4 runs reach p = 1/70 = 0.0143 < 0.05 / 3), small enough that
#: the last look keeps most of it.
FIRST_LOOK_SHARE: float = 1.0 / 3.0


@dataclass(frozen=True, kw_only=True, slots=True)
class SequentialPlan:
    """When to look and at what level; the same plan is used for every candidate of a run."""

    looks: tuple[int, ...]
    """Runs per arm at each look, increasing."""
    alphas: tuple[float, ...]
    """One-sided nominal level of each look; their sum is at most ``alpha``."""
    alpha: float
    min_effect: float
    sigma_log: float | None
    """Run-to-run noise of log run medians (the doctor's); ``None``: estimated from the runs."""
    futility: float
    """Stop for futility when P(speedup > 1 + min_effect) falls below this."""

    def to_dict(self) -> dict[str, object]:
        return {"looks": list(self.looks), "alphas": list(self.alphas), "alpha": self.alpha,
                "min_effect": self.min_effect, "sigma_log": self.sigma_log, "futility": self.futility}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> SequentialPlan:
        sigma = d.get("sigma_log")
        return cls(looks=tuple(int(v) for v in d["looks"]), alphas=tuple(float(v) for v in d["alphas"]),  # type: ignore[union-attr]
                   alpha=float(d["alpha"]), min_effect=float(d["min_effect"]),  # type: ignore[arg-type]
                   sigma_log=None if sigma is None else float(sigma), futility=float(d["futility"]))  # type: ignore[arg-type]


def plan_sequential(n_fixed: int, *, alpha: float = 0.05, min_effect: float = 0.01,
                    sigma_log: float | None = None, futility: float = 0.45, inflation: float = 1.5,
                    step: int = 2, max_pairs: int | None = None) -> SequentialPlan:
    """A plan that replaces a fixed design of ``n_fixed`` runs per arm.

    Looks every ``step`` runs from the smallest n at which the first look's
    level can be reached, up to ``ceil(inflation * n_fixed)`` and never past
    ``max_pairs`` (the contract's ``verify.max_pairs``: a hard cap). Alpha: a
    third at the first look, the rest spent in proportion to the information
    (runs) added at each later look.
    """
    positive_int(n_fixed, "n_fixed", minimum=2)
    probability(alpha, "alpha", upper=0.5)
    non_negative(min_effect, "min_effect")
    probability(futility, "futility", upper=0.5)
    positive_int(step, "step")
    first_alpha = alpha * FIRST_LOOK_SHARE
    first = 2
    while not p_below(min_exact_p(first, first), first_alpha):
        first += 1
    last = max(first, math.ceil(inflation * n_fixed))
    if max_pairs is not None:
        last = max(first, min(last, max_pairs))
    looks = list(range(first, last + 1, step))
    if looks[-1] != last:
        looks.append(last)
    if len(looks) == 1:
        return SequentialPlan(looks=(first,), alphas=(alpha,), alpha=alpha, min_effect=min_effect,
                              sigma_log=sigma_log, futility=futility)
    rest = alpha - first_alpha
    span = looks[-1] - looks[0]
    alphas = [first_alpha] + [rest * (b - a) / span for a, b in zip(looks, looks[1:])]
    return SequentialPlan(looks=tuple(looks), alphas=tuple(alphas), alpha=alpha, min_effect=min_effect,
                          sigma_log=sigma_log, futility=futility)


@dataclass(frozen=True, kw_only=True, slots=True)
class LookResult:
    """What one look decided, and why, for the log and the report."""

    look: int
    """0-based index into ``plan.looks``."""
    pairs: int
    stop: Stop
    reason: str
    comparison: Comparison
    p_more_than_min_effect: float


def _sigma(plan: SequentialPlan, base: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Per-row noise of log run medians: a pooled robust estimate from the runs themselves, never less than the
    plan's. The doctor measures its noise in a few minutes; a machine that drifts or is disturbed during
    verification is noisier than that, and futility judged at the doctor's noise would stop on a burst
    (two slow runs of one arm read as "no speedup"). Futility stops are non-binding, so a larger sigma
    only costs pairs, never error control."""
    lb, lc = np.log(base), np.log(cand)
    dev = np.concatenate([lb - np.median(lb, axis=1, keepdims=True), lc - np.median(lc, axis=1, keepdims=True)],
                         axis=1)
    robust = np.maximum(1.4826 * np.median(np.abs(dev), axis=1), 1e-6)
    if plan.sigma_log is not None:
        return np.maximum(robust, max(plan.sigma_log, 1e-6))
    return robust


def _p_above_min_effect(plan: SequentialPlan, base: np.ndarray, cand: np.ndarray) -> np.ndarray:
    n = base.shape[1]
    est = np.log(np.median(base, axis=1) / np.median(cand, axis=1))
    se = _sigma(plan, base, cand) * math.sqrt(math.pi / n)
    return _st.norm.sf((math.log1p(plan.min_effect) - est) / se)


def look(plan: SequentialPlan, baseline: Sequence[float], candidate: Sequence[float], *,
         n_boot: int = 2000, seed: int = 0) -> LookResult:
    """Judge the runs so far; ``len(baseline)`` must be one of the plan's looks (the arms may differ by one
    when an invariant ended the candidate arm early, in which case the smaller arm's count is used)."""
    pairs = min(len(baseline), len(candidate))
    if pairs not in plan.looks:
        raise ValueError(f"{pairs} runs per arm is not a look of the plan {plan.looks}")
    k = plan.looks.index(pairs)
    level = plan.alphas[k]
    comparison = compare(baseline, candidate, min_effect=plan.min_effect, alpha=plan.alpha, n_boot=n_boot,
                         seed=seed)
    significant = comparison.significant and bool(p_below(comparison.p_value, level))
    b = np.asarray(baseline, dtype=float)[None, :]
    c = np.asarray(candidate, dtype=float)[None, :]
    p_more = float(_p_above_min_effect(plan, b, c)[0])
    last = k == len(plan.looks) - 1
    if significant:
        stop: Stop = "efficacy"
        reason = f"efficacy at {pairs} pairs (rank test at {level:.4f}): {comparison.reason}"
    elif p_more < plan.futility:
        stop = "futility"
        reason = (f"futility at {pairs} pairs: P(speedup > {1 + plan.min_effect:.2f}) = {p_more:.2f} "
                  f"< {plan.futility:.2f} (speedup {comparison.speedup:.3f}x)")
    elif last:
        stop = "max_pairs"
        reason = f"no decision after {pairs} pairs, the plan's last look: {comparison.reason}"
    else:
        stop = "continue"
        reason = f"continue after {pairs} pairs: {comparison.reason}"
    return LookResult(look=k, pairs=pairs, stop=stop, reason=reason, comparison=comparison,
                      p_more_than_min_effect=p_more)


@dataclass(frozen=True, kw_only=True, slots=True)
class SequentialSimulation:
    """The rule's behaviour over simulated verifications of one true speedup."""

    promoted: float
    """Share promoted: the false-promotion rate when the true speedup is 1, the power otherwise."""
    median_pairs: float
    mean_pairs: float
    stops: dict[str, float]
    """Share of verifications that ended for each reason."""


def simulate_sequential(plan: SequentialPlan, *, true_speedup: float, trials: int, seed: int = 0,
                        n_boot: int = 1000, sigma_log: float | None = None) -> SequentialSimulation:
    """Monte Carlo of the plan under the log-normal model of :func:`simlab.ab_ab`.

    ``sigma_log`` is the true noise (default: the plan's); the plan's own
    ``sigma_log`` is what the rule believes. Deterministic for a seed.
    """
    check_rule(min_effect=plan.min_effect, alpha=plan.alpha, n_boot=n_boot, seed=seed)
    trials = positive_int(trials, "trials")
    sigma = plan.sigma_log if sigma_log is None else sigma_log
    if sigma is None:
        raise ValueError("simulate_sequential needs sigma_log (the plan has none)")
    data_seq, rule_seq = np.random.SeedSequence(seed).spawn(2)
    rng = np.random.default_rng(data_seq)
    n_max = plan.looks[-1]
    mu = 0.1
    base = mu * np.exp(sigma * rng.standard_normal((trials, n_max)))
    cand = (mu / true_speedup) * np.exp(sigma * rng.standard_normal((trials, n_max)))
    active = np.ones(trials, dtype=bool)
    pairs = np.full(trials, n_max)
    promoted = np.zeros(trials, dtype=bool)
    stops = {"efficacy": 0, "futility": 0, "max_pairs": 0}
    for k, (n, level, look_seq) in enumerate(zip(plan.looks, plan.alphas, rule_seq.spawn(len(plan.looks)))):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        b, c = base[rows, :n], cand[rows, :n]
        batch = decide(b, c, min_effect=plan.min_effect, alpha=plan.alpha, n_boot=n_boot,
                        seed=int(look_seq.generate_state(1)[0]))
        win = batch.significant & p_below(batch.p_value, level)
        lose = ~win & (_p_above_min_effect(plan, b, c) < plan.futility)
        done = win | lose
        if k == len(plan.looks) - 1:
            done = np.ones_like(done)
        promoted[rows[win]] = True
        pairs[rows[done]] = n
        active[rows[done]] = False
        stops["efficacy"] += int(win.sum())
        stops["futility"] += int(lose.sum())
        stops["max_pairs"] += int((done & ~win & ~lose).sum())
    return SequentialSimulation(promoted=float(promoted.mean()), median_pairs=float(np.median(pairs)),
                                mean_pairs=float(pairs.mean()),
                                stops={k: v / trials for k, v in stops.items()})
