"""Step time as two parts, compute plus exposed communication, each log-linear: a Gaussian fit of their sum.

A step is a sum: the micro-batches' compute (with the pipeline bubble, which
stretches it), plus the communication compute does not hide (ZeRO gathers and
reduce-scatters, the once-per-step gradient reduction, all-to-alls). A single
log-linear model (:mod:`.time_model`) multiplies every effect, so two changes
that each shrink one part (ZeRO-1 instead of ZeRO-3 removes most of the
communication; no recomputation removes a quarter of the compute) are
predicted to compound, and a change that removes a part cannot take the step
below the other part's floor. Here

    ``t = exp(xc·a) + exp(xm·b)``

with ``xc``/``xm`` the design columns acting on compute and on communication
(:attr:`~infrarsi.search.features.Priors.time_parts`; a feature named nowhere,
``tp``, ``pp``, ``micro_batch``, acts on both). Priors are written for the
whole step and restated per part exactly as the memory model's
(:func:`~infrarsi.search.memory_parts.part_prior`), with compute holding
``COMPUTE_SHARE`` of the baseline's step a priori.

The fit is :func:`~infrarsi.search.memory_parts.fit_memory_parts` with nothing
censored (the Tobit likelihood is then the Gaussian one) and the time noise
prior; this module adds what the acquisition reads from a time posterior:
the latent mean and variance (delta method), the difference to a reference
(before anything ran ok) and the kriging believer (a linearised rank-one
update of the coefficient covariance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from infrarsi.search.features import EffectRow
from infrarsi.search.memory_model import with_intercept
from infrarsi.search.memory_parts import PartsMemoryPosterior, fit_memory_parts

COMPUTE, COMMUNICATION = "compute", "communication"
TIME_PARTS: tuple[str, str] = (COMPUTE, COMMUNICATION)

#: Prior share of the baseline's step spent in compute (the rest: exposed communication).
COMPUTE_SHARE: float = 0.6


@dataclass(frozen=True, kw_only=True, slots=True)
class PartsTimePosterior:
    """The two-part time model: a Laplace posterior of the sum's coefficients (compute first)."""

    fit: PartsMemoryPosterior

    @property
    def sigma(self) -> float:
        return self.fit.sigma

    @property
    def n(self) -> int:
        return self.fit.n_exact

    @property
    def names(self) -> tuple[str, ...]:
        return self.fit.coefficient_names

    @property
    def compute_share(self) -> float:
        """The fitted share of the baseline's step spent in compute."""
        return self.fit.states_share

    @property
    def baseline_log_time(self) -> float:
        return float(self.predict(np.zeros((1, len(self.fit.names) - 1)))[0][0])

    def _jac(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu, _, jac = self.fit._parts(with_intercept(x))
        return mu, jac

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent log step time (no run noise) at design rows ``x``."""
        return self.fit.predict(x)

    def predict_difference(self, x: np.ndarray, x_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f(x) - f(x_ref)`` (delta method on the difference)."""
        mu, jac = self._jac(x)
        mu_r, jac_r = self._jac(np.asarray(x_ref, dtype=float).reshape(1, -1))
        d = jac - jac_r
        return mu - mu_r[0], np.maximum(np.sum((d @ self.fit.cov) * d, axis=1), 0.0)

    def believe(self, x: np.ndarray) -> PartsTimePosterior:
        """A fantasy observation at ``x`` equal to its prediction: the covariance shrinks along its gradient."""
        _, jac = self._jac(np.asarray(x, dtype=float).reshape(1, -1))
        cov = self.fit.cov
        cx = cov @ jac[0]
        denom = self.sigma ** 2 + float(jac[0] @ cx)
        return PartsTimePosterior(fit=replace(self.fit, cov=cov - np.outer(cx, cx) / denom))

    def effects(self) -> list[EffectRow]:
        return self.fit.effects()


def fit_time_parts(x: np.ndarray, y: np.ndarray, *, names: tuple[str, ...], parts: Sequence[frozenset[str]],
                   n_main: int, prior_mean: np.ndarray, prior_sd: np.ndarray, intercept: tuple[float, float],
                   noise: tuple[float, float], compute_share: float = COMPUTE_SHARE) -> PartsTimePosterior:
    """MAP and Laplace covariance of the two-part time model; ``y`` are log step times (none censored)."""
    y = np.asarray(y, dtype=float).reshape(-1)
    fit = fit_memory_parts(x, y, np.zeros(len(y), dtype=bool), names=names, parts=parts, n_main=n_main,
                           prior_mean=prior_mean, prior_sd=prior_sd, intercept=intercept, noise=noise,
                           states_share=compute_share, part_names=TIME_PARTS)
    return PartsTimePosterior(fit=fit)


#: sd of the intercept prior (log seconds) around the mean measured log time, when the caller gives none.
INTERCEPT_SD: float = 1.5


def intercept_for(y: np.ndarray, given: tuple[float, float] | None) -> tuple[float, float]:
    """The intercept prior of the sum: the caller's, else centred on the mean measured log time.

    Not the single model's broad ``(0, 10)``: each part has its own intercept, and
    with sd 10 on both the split between them would be free until many trials pin it.
    """
    if given is not None:
        return given
    return float(np.mean(y)), INTERCEPT_SD
