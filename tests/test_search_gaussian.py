"""Shared linear-Gaussian arithmetic: row-wise quadratic forms, the effect table, P(peak under a limit)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.search.gaussian import effect_rows, prob_below, quad


def test_quad_is_each_rows_quadratic_form() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3))
    a = rng.normal(size=(3, 3))
    cov = a @ a.T
    np.testing.assert_allclose(quad(x, cov), [row @ cov @ row for row in x])


def test_effect_rows_pair_prior_and_posterior_per_coefficient() -> None:
    rows = effect_rows(("a", "b"), [0.0, 1.0], [2.0, 3.0], np.array([0.5, -1.0]), np.diag([0.25, 4.0]))
    assert [(r.feature, r.prior_mean, r.prior_sd, r.post_mean, r.post_sd) for r in rows] == [
        ("a", 0.0, 2.0, 0.5, 0.5), ("b", 1.0, 3.0, -1.0, 2.0)]


def test_prob_below_is_the_normal_cdf_of_the_log_margin() -> None:
    limit = math.exp(2.0)
    p = prob_below(np.array([2.0, 1.0, 3.0]), np.array([0.0, 0.5, 0.5]), 0.5, limit)
    assert p[0] == pytest.approx(0.5)
    assert p[1] == pytest.approx(1 - p[2]) and p[1] > 0.85
