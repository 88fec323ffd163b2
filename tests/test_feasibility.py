"""The logistic feasibility model: a crash region learnt, moderated toward 1/2, the base rate with no data."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.search.feasibility import fit_feasibility


def test_feasibility_learns_a_crash_region() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, (40, 3)).astype(float)
    failed = ((x[:, 0] == 1) & (x[:, 1] == 1)).astype(float)
    names = ("a", "b", "a*b")
    design = np.column_stack([x[:, 0], x[:, 1], x[:, 0] * x[:, 1]])
    fit = fit_feasibility(design, failed, names=names, prior_mean=np.zeros(3), prior_sd=np.full(3, 1.5))
    p = fit.prob_ok(np.array([[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=float))
    assert p[0] < 0.2 and (p[1:] > 0.8).all()
    moderated = 1 - fit.prob_fail(np.array([[1.0, 1.0, 1.0]]), moderated=True)
    assert p[0] < moderated[0] < 0.5  # averaging over the posterior pulls toward 1/2
    empty = fit_feasibility(np.zeros((0, 3)), np.zeros(0), names=names, prior_mean=np.zeros(3),
                            prior_sd=np.ones(3), base_rate=0.1)
    assert empty.prob_ok(np.zeros((1, 3)))[0] == pytest.approx(0.9)
