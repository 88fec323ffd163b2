"""Whether a configuration runs at all: logistic regression of P(crash, timeout or invalid).

Every trial that ran is a data point: ``ok`` and ``oom`` count as "ran" (an OOM
is the memory model's business, and it did not crash for any other reason);
``crash``, ``timeout`` and ``invalid`` as failure (an invalid run broke an
invariant, e.g. its loss left the tolerance band, which makes it as useless as
a crash). Coefficients have Gaussian priors centred on 0 (the intercept on the
logit of a base failure rate), so with no failures every configuration gets the
same modest risk and the factor does not distort the ranking. The MAP is found
by Newton's method (the log posterior is strictly concave).

Crashes are discrete: a framework refuses a *value* (8 pipeline stages of a
28-layer model), not a direction, and an ordered knob's log2 feature cannot
say "4 is fine, 8 crashes" without also blaming 2. So the crash model gets,
besides the shared design, an indicator per non-default level of every ordered
knob with three or more levels (``pp==8``), each with the same prior as a main
effect: one crash at ``pp==8`` then costs ``pp==8``, not every larger ``pp``.

The search reads the MAP plug-in probability ``sigmoid(x' b)``. The Laplace-
averaged predictive (probit approximation, ``sigmoid(mu / sqrt(1 + pi v / 8))``,
MacKay 1992) is available but was under-confident where it matters: with a
few dozen independent coefficients a priori, every point not seen before keeps
a large variance and is pulled toward 1/2, so on the synthetic benchmark
(:mod:`simlab.synthetic`) candidates it gave P(ok) 0.2-0.4 crashed every
time, and the search kept paying for crashes in a region it had already
mapped. The plug-in halved the crashes there without slowing the search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from infrarsi.search.features import INTERCEPT, EffectRow
from infrarsi.search.gaussian import effect_rows, quad


@dataclass(frozen=True, kw_only=True, slots=True)
class FeasibilityPosterior:
    names: tuple[str, ...]
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    n: int
    n_failed: int
    #: Level indicators appended to every design row: (column of ``x``, value that switches it on).
    levels: tuple[tuple[int, float], ...] = ()

    def prob_fail(self, x: np.ndarray, *, moderated: bool = False) -> np.ndarray:
        """P(failure) at design rows ``x``: the MAP plug-in, or with ``moderated`` the
        Laplace-averaged (probit-approximated) predictive; see the module docstring for why
        the search uses the plug-in."""
        xt = _with_intercept(with_levels(x, self.levels))
        mu = xt @ self.mean
        if not moderated:
            return special.expit(mu)
        var = np.maximum(quad(xt, self.cov), 0.0)
        return special.expit(mu / np.sqrt(1.0 + math.pi * var / 8.0))

    def prob_ok(self, x: np.ndarray) -> np.ndarray:
        """P(the configuration runs without crash, timeout or invalid result)."""
        return 1.0 - self.prob_fail(x)

    def effects(self) -> list[EffectRow]:
        return effect_rows(self.names, self.prior_mean, self.prior_sd, self.mean, self.cov)


def with_levels(x: np.ndarray, levels: tuple[tuple[int, float], ...]) -> np.ndarray:
    """``x`` with one 0/1 column per ``(column, value)``: on where ``x[:, column] == value``."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    if not levels:
        return x
    ind = np.column_stack([np.isclose(x[:, col], value) for col, value in levels]).astype(float)
    return np.hstack([x, ind])


def _with_intercept(x: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(np.asarray(x, dtype=float))
    return np.hstack([np.ones((x.shape[0], 1)), x])


def fit_feasibility(x: np.ndarray, failed: np.ndarray, *, names: tuple[str, ...], prior_mean: np.ndarray,
                    prior_sd: np.ndarray, base_rate: float = 0.1, intercept_sd: float = 1.5,
                    levels: tuple[tuple[str, int, float], ...] = (), level_sd: float = 1.5,
                    max_iter: int = 50) -> FeasibilityPosterior:
    """MAP logistic regression with Gaussian priors; ``failed`` is 1 for crash/timeout/invalid.

    ``levels``: ``(name, column, value)`` indicators appended to the design (see the module
    docstring), each with prior N(0, ``level_sd``)."""
    x = np.asarray(x, dtype=float).reshape(-1, len(prior_mean))
    cols = tuple((col, value) for _, col, value in levels)
    x = with_levels(x, cols) if len(x) else np.zeros((0, len(prior_mean) + len(cols)))
    names = (*names, *(name for name, _, _ in levels))
    prior_mean = np.concatenate([prior_mean, np.zeros(len(cols))])
    prior_sd = np.concatenate([prior_sd, np.full(len(cols), level_sd)])
    yv = np.asarray(failed, dtype=float).reshape(-1)
    m0 = np.concatenate([[special.logit(base_rate)], prior_mean])
    s0 = np.concatenate([[intercept_sd], prior_sd])
    p0 = 1.0 / s0 ** 2
    xt = _with_intercept(x)

    def nlp(beta: np.ndarray) -> float:
        eta = xt @ beta
        return float(np.sum(np.logaddexp(0.0, eta) - yv * eta) + 0.5 * np.sum(p0 * (beta - m0) ** 2))

    beta = m0.copy()
    value = nlp(beta)
    for _ in range(max_iter):
        prob = special.expit(xt @ beta)
        grad = xt.T @ (prob - yv) + p0 * (beta - m0)
        hess = (xt.T * (prob * (1 - prob))) @ xt + np.diag(p0)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while t > 1e-6 and nlp(beta - t * step) > value:
            t *= 0.5
        if t <= 1e-6:
            break  # no descent left: at the optimum up to rounding
        beta = beta - t * step
        new = nlp(beta)
        improvement, value = value - new, new
        if improvement < 1e-10 or float(np.max(np.abs(t * step))) < 1e-9:
            break
    prob = special.expit(xt @ beta)
    hess = (xt.T * (prob * (1 - prob))) @ xt + np.diag(p0)
    return FeasibilityPosterior(names=(INTERCEPT, *names), prior_mean=m0, prior_sd=s0, mean=beta,
                                cov=np.linalg.inv(hess), n=len(yv), n_failed=int(yv.sum()), levels=cols)
