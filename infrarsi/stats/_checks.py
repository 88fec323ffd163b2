"""Input checks shared by the statistics modules.

Bad inputs here are programming errors (an empty run, a negative step time, an
alpha of 2), so they raise ``ValueError``. A comparison that merely fails to be
significant is never an error: it comes back as a value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def positive_1d(x: Sequence[float] | np.ndarray, name: str, *, min_len: int = 1) -> np.ndarray:
    """Return ``x`` as a float64 vector of finite, strictly positive values.

    Times are durations, so zero, negative, NaN or infinite values mean the
    measurement is broken, not that the job is infinitely fast.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size < min_len:
        raise ValueError(f"{name} needs at least {min_len} value(s), got {arr.size}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must contain finite, strictly positive times")
    return arr


def probability(value: float, name: str, *, upper: float = 1.0) -> float:
    """Check ``0 < value < upper`` and return it as a float."""
    value = float(value)
    if not (0.0 < value < upper):
        raise ValueError(f"{name} must lie in (0, {upper}), got {value!r}")
    return value


def non_negative(value: float, name: str) -> float:
    """Check ``value`` is finite and ``>= 0`` and return it as a float."""
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return value


def positive_int(value: int, name: str, *, minimum: int = 1) -> int:
    """Check ``value`` is an integer ``>= minimum`` and return it."""
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
