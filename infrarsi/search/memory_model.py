"""Censored (Tobit) regression of log peak memory, and what each feature costs in memory.

``log m = b0 + x·b + e``, ``e ~ N(0, s^2)``. A trial that finished contributes
the normal density of its measured peak; an OOM was killed at the limit, so all
we know is that its peak would have been at least there: it contributes
``log P(log m >= log c) = log Phi((x·b - log c) / s)`` (right-censored at ``c``).
Dropping OOM trials instead would bias every memory-hungry coefficient toward
zero, exactly where the search needs it most: those are the configurations it
must learn to avoid or to pair with a memory saver.

The log posterior (that likelihood plus the Gaussian coefficient priors and a
scaled inverse-chi-square prior on ``s^2``, which keeps ``s`` off zero when
there are about as many coefficients as trials) is maximised over ``(b0, b, log s)`` by a
damped Newton method (Levenberg-Marquardt) with analytic gradient and Hessian:
memory peaks are nearly deterministic, so ``s`` is small and the problem badly
conditioned (data curvature ``1/s^2`` against prior curvature ``1/sd^2``),
which made L-BFGS take thousands of steps; damped Newton takes a few dozen,
and the damping copes with the likelihood not being concave in this
parametrisation. Uncertainty is a Laplace approximation: the inverse of
the analytic Hessian at the maximum. ``prob_fits`` adds the coefficient
variance ``x' Cov x`` to ``s^2`` (``s`` itself is plugged in), so a
configuration far from anything measured is less certain to fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import linalg, special

from infrarsi.search.features import INTERCEPT, EffectRow, noise_log_prior
from infrarsi.search.gaussian import effect_rows, prob_below, quad

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

#: log sigma outside this range has zero posterior density: a trial step at
#: sigma = 0 would turn every censored term into 0 or -inf.
TAU_RANGE: tuple[float, float] = (math.log(1e-5), math.log(100.0))


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryPrice:
    """A feature's multiplicative memory effect, and what it adds (or saves) at the baseline's peak."""

    feature: str
    ratio: float
    bytes_at_baseline: float  # negative: saves memory
    post_sd: float  # of the log ratio


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryPosterior:
    """Laplace posterior of the Tobit model: MAP coefficients (intercept first), covariance, noise."""

    names: tuple[str, ...]
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    mean: np.ndarray
    cov: np.ndarray  # of the coefficients only
    sigma: float
    n_exact: int
    n_censored: int
    converged: bool = True

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean of log peak bytes and the variance due to coefficient uncertainty (no noise)."""
        xt = with_intercept(x)
        mu = xt @ self.mean
        return mu, np.maximum(quad(xt, self.cov), 0.0)

    def prob_fits(self, x: np.ndarray, limit_bytes: float | None) -> np.ndarray:
        """P(peak < limit) for design rows ``x``; 1 when there is no limit."""
        x = np.atleast_2d(x)
        if limit_bytes is None:
            return np.ones(x.shape[0])
        mu, var = self.predict(x)
        return prob_below(mu, var, self.sigma, limit_bytes)

    @property
    def baseline_bytes(self) -> float:
        return math.exp(float(self.mean[0]))

    def effects(self) -> list[EffectRow]:
        return effect_rows(self.names, self.prior_mean, self.prior_sd, self.mean, self.cov)

    def prices(self) -> list[MemoryPrice]:
        """Every coefficient but the intercept as a memory price, cheapest (most saving) first."""
        base = self.baseline_bytes
        sd = np.sqrt(np.diag(self.cov))
        rows = [MemoryPrice(feature=n, ratio=math.exp(float(b)), bytes_at_baseline=base * (math.exp(float(b)) - 1),
                            post_sd=float(s)) for n, b, s in zip(self.names[1:], self.mean[1:], sd[1:])]
        return sorted(rows, key=lambda r: (r.ratio, r.feature))

    def price(self, feature: str) -> MemoryPrice:
        """The memory price of one feature, by name."""
        return next(p for p in self.prices() if p.feature == feature)

    memory_price = price


def with_intercept(x: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(np.asarray(x, dtype=float))
    return np.hstack([np.ones((x.shape[0], 1)), x])


def tobit_eta_terms(eta: np.ndarray, tau: float, y: np.ndarray, cens: np.ndarray):
    """Per-observation log-likelihood and its first and second derivatives in (eta, tau).

    ``eta`` is the predicted log peak of each row, ``tau`` the log noise sd.
    """
    tau = float(np.clip(tau, *TAU_RANGE))
    s = math.exp(tau)
    ok = ~cens
    ll = np.empty(len(y))
    d_eta = np.empty(len(y))
    d_tau = np.empty(len(y))
    h_ee = np.empty(len(y))
    h_et = np.empty(len(y))
    h_tt = np.empty(len(y))
    z = (y[ok] - eta[ok]) / s
    ll[ok] = -0.5 * z ** 2 - tau - LOG_SQRT_2PI
    d_eta[ok] = z / s
    d_tau[ok] = z ** 2 - 1.0
    h_ee[ok] = -1.0 / s ** 2
    h_et[ok] = -2.0 * z / s
    h_tt[ok] = -2.0 * z ** 2
    w = np.clip((eta[cens] - y[cens]) / s, -1e4, 1e4)  # beyond this the terms are exact limits anyway
    log_cdf = special.log_ndtr(w)
    lam = np.exp(-0.5 * w ** 2 - LOG_SQRT_2PI - log_cdf)  # phi(w) / Phi(w), stable in the tails
    ll[cens] = log_cdf
    d_eta[cens] = lam / s
    d_tau[cens] = -lam * w
    h_ee[cens] = -lam * (w + lam) / s ** 2
    h_et[cens] = (lam * w * (w + lam) - lam) / s
    h_tt[cens] = lam * w - lam * w ** 2 * (w + lam)
    return ll, d_eta, d_tau, h_ee, h_et, h_tt


def neg_log_posterior(theta: np.ndarray, xt: np.ndarray, y: np.ndarray, cens: np.ndarray, m0: np.ndarray,
                      s0: np.ndarray, noise: tuple[float, float]) -> tuple[float, np.ndarray]:
    """Negative log posterior of ``theta = (b0, b, log s)`` and its gradient."""
    return tobit_objective(theta, xt @ theta[:-1], xt, y, cens, m0, s0, noise)


def hessian(theta: np.ndarray, xt: np.ndarray, y: np.ndarray, cens: np.ndarray, s0: np.ndarray,
            noise: tuple[float, float]) -> np.ndarray:
    """Hessian of :func:`neg_log_posterior` (analytic: ``eta`` is linear, so Gauss-Newton is exact)."""
    return tobit_curvature(theta, xt @ theta[:-1], xt, y, cens, s0, noise)


def tobit_objective(theta: np.ndarray, eta: np.ndarray, jac: np.ndarray, y: np.ndarray, cens: np.ndarray,
                    m0: np.ndarray, s0: np.ndarray, noise: tuple[float, float]) -> tuple[float, np.ndarray]:
    """Negative log posterior and gradient of ``theta = (coefficients, log s)`` for any model of the log
    peak: ``eta`` its prediction per row, ``jac`` the Jacobian of ``eta`` in the coefficients."""
    tau = float(theta[-1])
    if not TAU_RANGE[0] <= tau <= TAU_RANGE[1]:
        return math.inf, np.zeros_like(theta)  # a step far outside any plausible sigma: reject it
    ll, d_eta, d_tau, *_ = tobit_eta_terms(eta, tau, y, cens)
    rb = (theta[:-1] - m0) / s0
    lp, d1, _ = noise_log_prior(tau, *noise)
    value = -float(ll.sum()) + 0.5 * float(rb @ rb) - lp
    return value, np.concatenate([-(jac.T @ d_eta) + rb / s0, [-float(d_tau.sum()) - d1]])


def tobit_curvature(theta: np.ndarray, eta: np.ndarray, jac: np.ndarray, y: np.ndarray, cens: np.ndarray,
                    s0: np.ndarray, noise: tuple[float, float]) -> np.ndarray:
    """Gauss-Newton Hessian of :func:`tobit_objective`: without the curvature of ``eta`` itself
    (exact when ``eta`` is linear in the coefficients)."""
    _, _, _, h_ee, h_et, h_tt = tobit_eta_terms(eta, float(theta[-1]), y, cens)
    p = jac.shape[1]
    h = np.empty((p + 1, p + 1))
    h[:p, :p] = -(jac.T * h_ee) @ jac + np.diag(1.0 / s0 ** 2)
    h[:p, p] = h[p, :p] = -(jac.T @ h_et)
    h[p, p] = -float(h_tt.sum()) - noise_log_prior(float(theta[-1]), *noise)[2]
    return h


def fit_memory(x: np.ndarray, y: np.ndarray, censored: np.ndarray, *, names: tuple[str, ...],
               prior_mean: np.ndarray, prior_sd: np.ndarray, intercept: tuple[float, float],
               noise: tuple[float, float] = (0.03, 4.0)) -> MemoryPosterior:
    """MAP and Laplace covariance of the Tobit model.

    ``y`` is log bytes: the measured peak, or for a censored row the censoring
    point (the limit it was killed at, or the least peak it is known to reach).
    """
    x = np.asarray(x, dtype=float).reshape(-1, len(prior_mean))
    y = np.asarray(y, dtype=float).reshape(-1)
    cens = np.asarray(censored, dtype=bool).reshape(-1)
    m0 = np.concatenate([[intercept[0]], prior_mean])
    s0 = np.concatenate([[intercept[1]], prior_sd])
    tau0 = math.log(noise[0])
    xt = with_intercept(x)
    theta0 = np.concatenate([m0, [tau0]])
    if (~cens).any():
        theta0[0] = float(np.mean(y[~cens] - xt[~cens, 1:] @ m0[1:]))
    converged = True
    if len(y):
        theta, converged = newton(theta0, lambda t: neg_log_posterior(t, xt, y, cens, m0, s0, noise),
                                  lambda t: hessian(t, xt, y, cens, s0, noise))
        h = hessian(theta, xt, y, cens, s0, noise)
    else:
        theta = theta0
        h = np.diag(np.concatenate([1.0 / s0 ** 2, [-noise_log_prior(tau0, *noise)[2]]]))
    cov = inverse_pd(h)
    p = xt.shape[1]
    return MemoryPosterior(names=(INTERCEPT, *names), prior_mean=m0, prior_sd=s0, mean=theta[:p],
                           cov=cov[:p, :p], sigma=math.exp(float(theta[p])), n_exact=int((~cens).sum()),
                           n_censored=int(cens.sum()), converged=converged)


def newton(theta: np.ndarray, fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
           hess: Callable[[np.ndarray], np.ndarray], *, max_iter: int = 200,
           gtol: float = 1e-7) -> tuple[np.ndarray, bool]:
    """Levenberg-Marquardt-damped Newton: ``(H + mu diag|H|) d = -g``, mu shrinking on success.

    The damping keeps steps downhill where the Hessian is not positive definite
    (the Tobit likelihood is not concave in ``(b, log s)``) and far from the
    optimum; near it mu vanishes and convergence is quadratic.
    """
    f, g = fun(theta)
    mu = 1e-3
    for _ in range(max_iter):
        if float(np.max(np.abs(g))) < gtol:
            return theta, True
        h = hess(theta)
        scale = np.maximum(np.abs(np.diag(h)), 1e-12)
        while mu < 1e12:
            try:
                chol = linalg.cho_factor(h + mu * np.diag(scale), lower=True)
            except linalg.LinAlgError:
                mu *= 10.0
                continue
            step = -linalg.cho_solve(chol, g)
            f_new, g_new = fun(theta + step)
            if np.isfinite(f_new) and f_new <= f:
                break
            mu *= 10.0
        else:
            return theta, False
        theta, small = theta + step, f - f_new <= 1e-13 * max(1.0, abs(f))
        f, g = f_new, g_new
        mu = max(mu / 10.0, 1e-12)
        if small and float(np.max(np.abs(step))) < 1e-10:
            return theta, True
    return theta, float(np.max(np.abs(g))) < 1e-4


def inverse_pd(h: np.ndarray) -> np.ndarray:
    """Inverse of a Hessian that should be positive definite; eigenvalues clipped if rounding broke it."""
    h = 0.5 * (h + h.T)
    try:
        return linalg.cho_solve(linalg.cho_factor(h, lower=True), np.eye(len(h)))
    except linalg.LinAlgError:
        pass
    vals, vecs = np.linalg.eigh(h)
    floor = max(float(vals.max()), 1.0) * 1e-10
    vals = np.maximum(vals, floor)
    return (vecs / vals) @ vecs.T
