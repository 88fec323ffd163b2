"""Peak memory as two parts, model states plus activations, each log-linear: a censored fit of their sum.

Every published memory formula is a sum: parameters, gradients and optimizer
state (sharded by ZeRO/FSDP, split by tensor, pipeline and expert parallelism)
plus activations (scaled by micro-batch, sequence length, recomputation,
sequence parallelism). A single log-linear model (:mod:`.memory_model`)
multiplies every effect instead, so two changes that each raise one part (less
sharding, no recomputation) are predicted to compound: on the cluster simulator
it put the optimum of mixtral-8x7b on two H100 nodes at 169 GiB where it needs
71, and the search never tried it. Here

    ``peak = exp(xs·a) + exp(xa·c)``

where ``xs`` and ``xa`` are the design columns that act on model states and on
activations. Which feature acts on which part is a prior statement
(:attr:`~infrarsi.search.features.Priors.memory_parts`: ``zero`` on states,
``micro_batch`` on activations); a feature named nowhere (``tp``, ``dtype``)
acts on both, with its prior on each. Squares follow their feature; a pair
whose two features act on different parts has no term (the sum already says
how they combine), a pair with one tagged feature lives in that part.

Priors on a tagged feature are written for the *total* peak (as for the
single model: ``recompute=none`` x2.5); on its part, whose share of the
baseline's peak is ``f`` (0.5 a priori), the same change is a ratio of
``1 + (r - 1) / f``, and its sd is scaled by the derivative of that map
(between 1 and 3). The two intercepts split the anchor in half, each with the
single model's spread, unless the baseline measured its split: the resident
memory it held across steps (``TrialMetrics.steady_mem_bytes``) over its peak
is then the states' share (on a CPU the runtime alone is most of a small job's
peak, and no knob moves it). The per-part priors stay restated at 0.5: the
measured share says how big each part is, not how fast one grows.

The likelihood is the same Tobit likelihood as :mod:`.memory_model` (OOMs are
right-censored at the limit) in ``mu = log peak``; the maximum is found by the
same damped Newton method with the Gauss-Newton Hessian (``J' W J``, always
positive semi-definite), and the Laplace covariance is its inverse. ``predict``
returns the delta-method variance ``J Cov J'``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from infrarsi.search.features import INTERCEPT, MEMORY_PART_NAMES, MIN_PRIOR_SD, EffectRow, part_prior_lookup
from infrarsi.search.gaussian import effect_rows, prob_below
from infrarsi.search.memory_model import (
    MemoryPrice,
    inverse_pd,
    newton,
    tobit_curvature,
    tobit_objective,
    with_intercept,
)

STATES, ACTIVATIONS = MEMORY_PART_NAMES
PARTS: tuple[str, str] = MEMORY_PART_NAMES

#: Prior share of the baseline's peak held by model states.
STATES_SHARE: float = 0.5

#: A tagged feature's prior sd on its part is its total-peak sd times the
#: derivative of the ratio map, kept in this range: near ``r = 1 - f`` the map is
#: steep and the sd would explode.
SD_SCALE_RANGE: tuple[float, float] = (1.0, 3.0)

#: Smallest ratio a prior may give a part: a saver cannot remove a part entirely.
MIN_PART_RATIO: float = 0.05


@dataclass(frozen=True, kw_only=True, slots=True)
class PartsMemoryPosterior:
    """Laplace posterior of the two-part model: coefficients of states then activations, covariance, noise."""

    names: tuple[str, ...]  # INTERCEPT, then the design's feature names
    columns: tuple[np.ndarray, np.ndarray]  # per part, indices into the design with intercept
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    mean: np.ndarray
    cov: np.ndarray  # of the coefficients only
    sigma: float
    n_exact: int
    n_censored: int
    converged: bool = True
    part_names: tuple[str, str] = PARTS  # the time model (:mod:`.time_parts`) names its own two parts

    @property
    def coefficient_names(self) -> tuple[str, ...]:
        return tuple(f"{self.names[k]} [{part}]" for part, cols in zip(self.part_names, self.columns) for k in cols)

    def _parts(self, xt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log peak, share of states, Jacobian of log peak in the coefficients) at rows ``xt``."""
        return _sum_of_parts((xt[:, self.columns[0]], xt[:, self.columns[1]]), self.mean)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean of log peak bytes and its variance due to coefficient uncertainty (delta method; no noise)."""
        mu, _, jac = self._parts(with_intercept(x))
        return mu, np.maximum(np.sum((jac @ self.cov) * jac, axis=1), 0.0)

    def prob_fits(self, x: np.ndarray, limit_bytes: float | None) -> np.ndarray:
        """P(peak < limit) for design rows ``x``; 1 when there is no limit."""
        x = np.atleast_2d(x)
        if limit_bytes is None:
            return np.ones(x.shape[0])
        mu, var = self.predict(x)
        return prob_below(mu, var, self.sigma, limit_bytes)

    @property
    def baseline_bytes(self) -> float:
        return math.exp(float(self.predict(np.zeros((1, len(self.names) - 1)))[0][0]))

    @property
    def states_share(self) -> float:
        """The fitted share of the baseline's peak held by model states."""
        return float(self._parts(with_intercept(np.zeros((1, len(self.names) - 1))))[1][0])

    def effects(self) -> list[EffectRow]:
        return effect_rows(self.coefficient_names, self.prior_mean, self.prior_sd, self.mean, self.cov)

    def prices(self) -> list[MemoryPrice]:
        """Every design feature as a memory price at the baseline (the change of the *sum*), most saving first."""
        p = len(self.names) - 1
        rows = np.vstack([np.zeros((1, p)), np.eye(p)])
        mu, _, jac = self._parts(with_intercept(rows))
        diff = jac[1:] - jac[0]
        sd = np.sqrt(np.maximum(np.sum((diff @ self.cov) * diff, axis=1), 0.0))
        base = math.exp(float(mu[0]))
        out = [MemoryPrice(feature=n, ratio=math.exp(float(m - mu[0])),
                           bytes_at_baseline=base * (math.exp(float(m - mu[0])) - 1), post_sd=float(s))
               for n, m, s in zip(self.names[1:], mu[1:], sd)]
        return sorted(out, key=lambda r: (r.ratio, r.feature))

    def price(self, feature: str) -> MemoryPrice:
        return next(p for p in self.prices() if p.feature == feature)

    memory_price = price


def column_parts(main_parts: Sequence[str | None], squares: Sequence[int],
                 pairs: Sequence[tuple[int, int]], part_names: tuple[str, str] = PARTS) -> list[frozenset[str]]:
    """The parts each design column (main, squares, pairs; no intercept) acts on."""
    both = frozenset(part_names)
    main = [frozenset({p}) if p else both for p in main_parts]
    return main + [main[i] for i in squares] + [main[i] & main[j] for i, j in pairs]


def part_prior(mean: float, sd: float, share: float) -> tuple[float, float]:
    """A total-peak prior ``(log r, sd)`` restated for a part holding ``share`` of the baseline's peak."""
    r = math.exp(mean)
    part = max(1.0 + (r - 1.0) / share, MIN_PART_RATIO)
    slope = r / (share * part)  # d log(part ratio) / d log(r)
    return math.log(part), sd * min(max(slope, SD_SCALE_RANGE[0]), SD_SCALE_RANGE[1])


def fit_memory_parts(x: np.ndarray, y: np.ndarray, censored: np.ndarray, *, names: tuple[str, ...],
                     parts: Sequence[frozenset[str]], n_main: int, prior_mean: np.ndarray, prior_sd: np.ndarray,
                     intercept: tuple[float, float], noise: tuple[float, float] = (0.03, 4.0),
                     states_share: float = STATES_SHARE, prior_share: float | None = None,
                     part_names: tuple[str, str] = PARTS,
                     by_part: Mapping[str, tuple[float, float]] | None = None) -> PartsMemoryPosterior:
    """MAP and Laplace covariance of the two-part model (see the module docstring).

    ``parts[k]`` is the set of parts design column ``k`` acts on; ``prior_mean``
    and ``prior_sd`` are total-peak priors per column; the first ``n_main``
    columns are main effects (restated per part when they act on one part only).
    ``states_share`` splits the intercepts; ``prior_share`` (default: the same)
    is the share the total-peak priors are restated at: a share measured on
    this job says how big each part is, not how fast a part grows with a knob.
    ``part_names`` name the two parts (states first); the Tobit likelihood with
    nothing censored is the Gaussian one, which the two-part time model uses.
    ``by_part`` (:attr:`~infrarsi.search.features.Priors.memory_by_part`) gives
    a column's prior on one part directly, in that part's units, in place of
    the total-peak prior (restated or not).
    """
    by_part = by_part or {}
    p = len(prior_mean)
    x = np.asarray(x, dtype=float).reshape(-1, p)
    y = np.asarray(y, dtype=float).reshape(-1)
    cens = np.asarray(censored, dtype=bool).reshape(-1)
    columns, m0, s0 = [], [], []
    restate_at = states_share if prior_share is None else prior_share
    for part, share, restate in ((part_names[0], states_share, restate_at),
                                 (part_names[1], 1.0 - states_share, 1.0 - restate_at)):
        cols = [0] + [k + 1 for k in range(p) if part in parts[k]]
        means = [intercept[0] + math.log(share)]
        sds = [intercept[1]]
        for k in cols[1:]:
            m, s = float(prior_mean[k - 1]), float(prior_sd[k - 1])
            if (given := part_prior_lookup(by_part, names[k - 1], part)) is not None:
                m, s = float(given[0]), max(float(given[1]), MIN_PRIOR_SD)
            elif k - 1 < n_main and len(parts[k - 1]) == 1:
                m, s = part_prior(m, s, restate)
            means.append(m)
            sds.append(s)
        columns.append(np.asarray(cols, dtype=int))
        m0 += means
        s0 += sds
    m0a, s0a = np.asarray(m0), np.asarray(s0)
    xt = with_intercept(x)
    blocks = (xt[:, columns[0]], xt[:, columns[1]])
    n_s = len(columns[0])
    tau0 = math.log(noise[0])
    theta0 = np.concatenate([m0a, [tau0]])
    if (~cens).any():  # start from the prior's shape at the measured level
        mu0 = np.logaddexp(blocks[0] @ m0a[:n_s], blocks[1] @ m0a[n_s:])
        shift = float(np.mean(y[~cens] - mu0[~cens]))
        theta0[0] += shift
        theta0[n_s] += shift

    def fun(theta: np.ndarray) -> tuple[float, np.ndarray]:
        return _neg_log_posterior(theta, blocks, y, cens, m0a, s0a, noise)

    def hess(theta: np.ndarray) -> np.ndarray:
        return _gauss_newton(theta, blocks, y, cens, s0a, noise)

    converged = True
    if len(y):
        theta, converged = newton(theta0, fun, hess)
    else:
        theta = theta0
    cov = inverse_pd(hess(theta))
    k = len(m0a)
    return PartsMemoryPosterior(names=(INTERCEPT, *names), columns=(columns[0], columns[1]), prior_mean=m0a,
                                prior_sd=s0a, mean=theta[:k], cov=cov[:k, :k], sigma=math.exp(float(theta[k])),
                                n_exact=int((~cens).sum()), n_censored=int(cens.sum()), converged=converged,
                                part_names=part_names)


def _sum_of_parts(blocks: tuple[np.ndarray, np.ndarray],
                  coef: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log peak per row, share of states, Jacobian of log peak in ``coef``) for the design ``blocks``
    of each part and their coefficients ``coef`` (states first)."""
    n_s = blocks[0].shape[1]
    eta_s, eta_a = blocks[0] @ coef[:n_s], blocks[1] @ coef[n_s:]
    w = special.expit(eta_s - eta_a)
    return np.logaddexp(eta_s, eta_a), w, np.hstack([blocks[0] * w[:, None], blocks[1] * (1.0 - w)[:, None]])


def _neg_log_posterior(theta: np.ndarray, blocks: tuple[np.ndarray, np.ndarray], y: np.ndarray, cens: np.ndarray,
                       m0: np.ndarray, s0: np.ndarray, noise: tuple[float, float]) -> tuple[float, np.ndarray]:
    mu, _, jac = _sum_of_parts(blocks, theta[:-1])
    return tobit_objective(theta, mu, jac, y, cens, m0, s0, noise)


def _gauss_newton(theta: np.ndarray, blocks: tuple[np.ndarray, np.ndarray], y: np.ndarray, cens: np.ndarray,
                  s0: np.ndarray, noise: tuple[float, float]) -> np.ndarray:
    """The Hessian of the negative log posterior without the curvature of ``mu`` itself (PSD by construction)."""
    mu, _, jac = _sum_of_parts(blocks, theta[:-1])
    return tobit_curvature(theta, mu, jac, y, cens, s0, noise)


def parts_by_feature(names: Sequence[str], tags: Mapping[str, str], part_names: tuple[str, str] = PARTS,
                     what: str = "memory") -> list[str | None]:
    """The part each main feature is tagged with, None for both; unknown part names are refused."""
    bad = sorted({v for v in tags.values() if v not in part_names})
    if bad:
        raise ValueError(f"{what} part must be one of {', '.join(part_names)}; got {', '.join(bad)}")
    return [tags.get(n) for n in names]
