"""Bayesian linear regression of log step time on the design features.

``log t = b0 + x·b + e``, ``e ~ N(0, sigma^2)``, with an independent Gaussian
prior on every coefficient (from patch Effects and the caller's knob priors).

Why not the conjugate normal-inverse-gamma prior: it scales the coefficient
prior by the noise, ``b | sigma^2 ~ N(m0, sigma^2 V0)``, but our priors are
written in absolute log-ratio units ("compile: 0.8x, give or take 30%") and
have nothing to do with run-to-run noise (about 1-3%). Instead ``sigma`` is set
by type-II maximum likelihood (empirical Bayes: the marginal likelihood of the
observed log times with the coefficients integrated out) times a weak scaled
inverse-chi-square prior on sigma^2 (:func:`~infrarsi.search.features.noise_log_prior`),
so a handful of trials cannot drive it to zero. Given sigma the
posterior is Gaussian and exact. ``sigma`` absorbs measurement noise *and* what
the linear-plus-pairs model cannot express, which is why it is estimated rather
than taken from the noise profile.

The noise is Student-t rather than Gaussian (:data:`T_DOF`), fitted by EM on its
scale-mixture form (each trial's noise variance ``sigma^2 / w_i``): a trial on a
shared machine is now and then far slower than its configuration (a neighbour's
job, a cold page cache; on the measured tinygpt table the first of three repeats
ran 0.1-0.3 log slower than the other two), and under Gaussian noise one such
trial pulls every coefficient it touches; under t noise its weight falls with its
residual. On that table's replay the engine's median best found at 20 trials rose
from 0.83 to 0.94 of the optimum with this change. The two-part model of
distributed steps (:mod:`.time_parts`) keeps Gaussian noise: its fit is the
Tobit memory fit's, which has no weights yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import linalg, optimize

from infrarsi.search.features import INTERCEPT, EffectRow, noise_log_prior
from infrarsi.search.gaussian import effect_rows, quad

#: Bounds on the noise sd of log step time searched by empirical Bayes.
SIGMA_BOUNDS: tuple[float, float] = (1e-3, 2.0)

#: Intercept prior when the caller gives none: log seconds, broad enough for 1 ms to hours.
BROAD_INTERCEPT: tuple[float, float] = (0.0, 10.0)

#: Degrees of freedom of the t noise: 4, the usual robust choice (Lange, Little & Taylor 1989), heavy-tailed
#: enough that a trial 5 sigma off keeps about a sixth of its weight (5 / 29), light enough that a handful of trials
#: still pins sigma down.
T_DOF: float = 4.0

#: EM passes of the t reweighting, each a full refit: a fixed count, so a fit costs the same every time (at
#: 1,000 trials x 87 columns, 0.15 s against 0.04 s for the Gaussian fit alone, on one loaded core).
T_ITERATIONS: int = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class TimePosterior:
    """Gaussian posterior of the coefficients (intercept first) and the noise sd."""

    names: tuple[str, ...]  # INTERCEPT, then the design's feature names
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    sigma: float
    n: int

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the *latent* log step time (no run noise) at design rows ``x``."""
        xt = _with_intercept(x)
        mu = xt @ self.mean
        var = quad(xt, self.cov)
        return mu, np.maximum(var, 0.0)

    def predict_difference(self, x: np.ndarray, x_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f(x) - f(x_ref)``: the intercept and every shared feature cancel.

        Used before any trial has run: the absolute level is unknown (broad
        intercept) but the priors already say which changes should be faster.
        """
        d = np.atleast_2d(np.asarray(x, dtype=float)) - np.asarray(x_ref, dtype=float).reshape(1, -1)
        cov = self.cov[1:, 1:]
        return d @ self.mean[1:], np.maximum(quad(d, cov), 0.0)

    def believe(self, x: np.ndarray) -> TimePosterior:
        """The posterior after a fantasy observation at ``x`` equal to its own predicted mean.

        The "kriging believer" of batch proposals: the mean does not move, the
        covariance shrinks along ``x``, so points sharing features with ``x`` lose
        exploration value and the next pick goes elsewhere.
        """
        xt = _with_intercept(x)[0]
        cx = self.cov @ xt
        denom = self.sigma ** 2 + float(xt @ cx)
        return replace(self, cov=self.cov - np.outer(cx, cx) / denom)

    def effects(self) -> list[EffectRow]:
        return effect_rows(self.names, self.prior_mean, self.prior_sd, self.mean, self.cov)


def _with_intercept(x: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(np.asarray(x, dtype=float))
    return np.hstack([np.ones((x.shape[0], 1)), x])


def _sufficient(xt: np.ndarray, y: np.ndarray, m0: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, int]:
    """What the posterior needs of the data, none of it depending on sigma: ``X'X``, ``X'r``, ``r'r`` and n,
    with ``r = y - X m0`` (computed once per fit, not once per sigma the search tries)."""
    r = y - xt @ m0
    return xt.T @ xt, xt.T @ r, float(r @ r), len(y)


def _posterior(stats: tuple[np.ndarray, np.ndarray, float, int], m0: np.ndarray, s0: np.ndarray, sigma: float,
               with_cov: bool = True) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Posterior mean, covariance (if asked) and log marginal likelihood for a fixed sigma."""
    gram, xr0, rr, n = stats
    p0 = 1.0 / s0 ** 2
    s2 = sigma ** 2
    a = np.diag(p0) + gram / s2
    chol = linalg.cho_factor(a, lower=True)
    xr = xr0 / s2
    shift = linalg.cho_solve(chol, xr)
    mean = m0 + shift
    cov = linalg.cho_solve(chol, np.eye(len(m0))) if with_cov else None
    logdet_a = 2.0 * float(np.sum(np.log(np.diag(chol[0]))))
    logdet_c = n * math.log(s2) + float(np.sum(np.log(s0 ** 2))) + logdet_a
    quad = rr / s2 - float(xr @ shift)
    logml = -0.5 * (n * math.log(2 * math.pi) + logdet_c + quad)
    return mean, cov, logml


def fit_time(x: np.ndarray, y: np.ndarray, *, names: tuple[str, ...], prior_mean: np.ndarray,
             prior_sd: np.ndarray, intercept: tuple[float, float] | None = None,
             noise: tuple[float, float] = (0.05, 2.0)) -> TimePosterior:
    """Posterior of log step time given design rows ``x`` (no intercept column) and log times ``y``.

    With no data it is the prior (sigma at the noise prior's scale).
    """
    x = np.asarray(x, dtype=float).reshape(-1, len(prior_mean))
    y = np.asarray(y, dtype=float).reshape(-1)
    b0 = intercept or BROAD_INTERCEPT
    m0 = np.concatenate([[b0[0]], prior_mean])
    s0 = np.concatenate([[b0[1]], prior_sd])
    xt = _with_intercept(x)
    if len(y) == 0:
        return TimePosterior(names=(INTERCEPT, *names), prior_mean=m0, prior_sd=s0, mean=m0.copy(),
                             cov=np.diag(s0 ** 2), sigma=noise[0], n=0)

    sigma, mean, cov = _fit_given_weights(xt, y, np.ones(len(y)), m0, s0, noise)
    for _ in range(T_ITERATIONS):
        # E-step: the expected precision scale of each trial's noise given the fit (its residual's square
        # plus the posterior variance of its mean), then the Gaussian fit again with those weights
        r2 = (y - xt @ mean) ** 2 + quad(xt, cov)
        weights = (T_DOF + 1.0) / (T_DOF + r2 / sigma ** 2)
        sigma, mean, cov = _fit_given_weights(xt, y, weights, m0, s0, noise)
    return TimePosterior(names=(INTERCEPT, *names), prior_mean=m0, prior_sd=s0, mean=mean, cov=cov,
                         sigma=sigma, n=len(y))


def _fit_given_weights(xt: np.ndarray, y: np.ndarray, weights: np.ndarray, m0: np.ndarray, s0: np.ndarray,
                       noise: tuple[float, float]) -> tuple[float, np.ndarray, np.ndarray]:
    """sigma by empirical Bayes, then the posterior mean and covariance, when trial ``i``'s noise variance is
    ``sigma^2 / weights[i]`` (the marginal likelihood drops ``sum(log w)``, a constant in sigma)."""
    root = np.sqrt(weights)
    stats = _sufficient(xt * root[:, None], y * root, m0)

    def objective(log_sigma: float) -> float:
        _, _, logml = _posterior(stats, m0, s0, math.exp(log_sigma), with_cov=False)
        return -logml - noise_log_prior(log_sigma, *noise)[0]

    # A coarse grid first: the marginal likelihood in sigma can have two modes
    # (a wrong prior explained as noise, or as a large effect), and a bounded
    # scalar search alone would settle in whichever it meets first.
    grid = np.linspace(*(math.log(b) for b in SIGMA_BOUNDS), 25)
    values = [objective(float(g)) for g in grid]
    k = int(np.argmin(values))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    sigma = math.exp(float(res.x))
    mean, cov, _ = _posterior(stats, m0, s0, sigma)
    assert cov is not None
    return sigma, mean, cov
