"""What every linear-Gaussian posterior of the search shares: row-wise quadratic forms, the prior-versus-posterior
table, and the probability that a log-normal figure stays under a limit.

The time model, its two-part form, the censored memory model, its two-part form and the crash model each keep
a Gaussian posterior over coefficients (mean, covariance); the arithmetic on it lives here once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from infrarsi.search.features import EffectRow


def quad(x: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Row-wise ``x_i' cov x_i`` (one matrix product; einsum's three-operand path is far slower)."""
    return np.sum((x @ cov) * x, axis=1)


def effect_rows(names: Sequence[str], prior_mean: Sequence[float], prior_sd: Sequence[float], mean: np.ndarray,
                cov: np.ndarray) -> list[EffectRow]:
    """Prior against posterior, per coefficient (the report's table; miscalibrated priors show here)."""
    sd = np.sqrt(np.diag(cov))
    return [EffectRow(feature=n, prior_mean=float(pm), prior_sd=float(ps), post_mean=float(m), post_sd=float(s))
            for n, pm, ps, m, s in zip(names, prior_mean, prior_sd, mean, sd)]


def prob_below(mu: np.ndarray, var: np.ndarray, sigma: float, limit_bytes: float) -> np.ndarray:
    """P(log peak < log limit) for predicted means ``mu`` with coefficient variance ``var`` and noise ``sigma``."""
    return special.ndtr((math.log(limit_bytes) - mu) / np.sqrt(var + sigma ** 2))
