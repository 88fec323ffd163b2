"""Input checks of the statistics modules: good inputs come back typed, bad ones raise ValueError saying why."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.stats._checks import non_negative, positive_1d, positive_int, probability


def test_positive_1d() -> None:
    arr = positive_1d([1, 2.5], "times")
    assert arr.dtype == np.float64 and arr.tolist() == [1.0, 2.5]
    with pytest.raises(ValueError, match=r"times must be one-dimensional, got shape \(1, 2\)"):
        positive_1d([[1, 2]], "times")
    with pytest.raises(ValueError, match="times needs at least 2 value\\(s\\), got 1"):
        positive_1d([1.0], "times", min_len=2)
    for bad in ([0.0], [-1.0], [math.nan], [math.inf]):
        with pytest.raises(ValueError, match="times must contain finite, strictly positive times"):
            positive_1d(bad, "times")


def test_probability() -> None:
    assert probability(0.05, "alpha") == 0.05
    assert probability(1.5, "x", upper=2.0) == 1.5
    for bad in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1.0\)"):
            probability(bad, "alpha")


def test_non_negative() -> None:
    assert non_negative(0, "delta") == 0.0 and isinstance(non_negative(3, "delta"), float)
    for bad in (-1e-9, math.inf, math.nan):
        with pytest.raises(ValueError, match="delta must be finite and >= 0"):
            non_negative(bad, "delta")


def test_positive_int() -> None:
    assert positive_int(3, "n") == 3 and positive_int(2.0, "n") == 2 and positive_int(0, "n", minimum=0) == 0
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            positive_int(bad, "n")
