"""Descriptive statistics of step times, and the noise profile of a baseline.

Assumptions: each run is a sequence of per-step wall times in seconds with the
warm-up steps already removed (compilation, cache fills and allocator growth
make the first steps slow, and they are not what a candidate speeds up). The
quantity compared between runs is the *run median*, because a median ignores
the occasional slow step (garbage collection, a checkpoint, a noisy neighbour)
that would drag a mean around.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from infrarsi.stats._checks import positive_1d, probability

#: Scales a median absolute deviation to the standard deviation of a normal
#: distribution (1 / Phi^-1(3/4)), so robust and classical spreads agree on
#: well-behaved data.
MAD_TO_SIGMA: float = 1.4826022185056018


def median(x: Sequence[float]) -> float:
    """Median of positive times (mean of the two middle values for even n)."""
    return float(np.median(positive_1d(x, "x")))


def cv(x: Sequence[float], *, robust: bool = False) -> float:
    """Coefficient of variation: spread relative to the centre.

    Classical: sample standard deviation (ddof=1) over the mean. Robust:
    ``MAD_TO_SIGMA * MAD / median``, which a handful of outlier steps cannot
    inflate; it equals the classical CV for normal data. Needs two values.
    """
    arr = positive_1d(x, "x", min_len=2)
    if robust:
        centre = float(np.median(arr))
        return MAD_TO_SIGMA * float(np.median(np.abs(arr - centre))) / centre
    return float(np.std(arr, ddof=1) / np.mean(arr))


def _log_sd(x: np.ndarray, *, robust: bool) -> float:
    """Spread of ``log(x)``; for small spreads this is about the CV."""
    logs = np.log(x)
    if robust:
        return MAD_TO_SIGMA * float(np.median(np.abs(logs - np.median(logs))))
    return float(np.std(logs, ddof=1))


@dataclass(frozen=True, kw_only=True, slots=True)
class NoiseProfile:
    """How noisy a job's step times are, measured from repeated baseline runs.

    ``sigma_log`` is the number the power calculations need: the standard
    deviation of ``log(run median)`` between runs of identical code. It is the
    larger of

    - ``sigma_log_between``: the observed standard deviation (ddof=1) of the log
      run medians. It already contains both run-to-run drift (thermal state,
      placement, other tenants) and the sampling error of each run's median, so
      nothing is added on top of it; and
    - ``sigma_log_floor``: the sampling error a median of ``m`` independent steps
      must have, ``sqrt(pi/2) * within_sigma_log / sqrt(m)``. It stops a few
      runs that happen to agree from claiming less noise than the steps
      themselves imply. Step times are often autocorrelated, which makes the
      true error larger, so this is a floor only.

    With few runs ``sigma_log_between`` is itself very uncertain (from 3 runs
    the estimate has 2 degrees of freedom); see :func:`sigma_log_upper` for a
    conservative value to plan with.
    """

    n_runs: int
    steps_per_run: tuple[int, ...]
    run_medians: tuple[float, ...]
    pooled_median: float
    """Median of all steps of all runs pooled (seconds)."""
    within_cv: float
    """Median over runs of each run's CV (robust or classical, see ``robust``)."""
    between_cv: float
    """Classical CV of the run medians."""
    within_sigma_log: float
    """Median over runs of each run's spread of log step times."""
    sigma_log_between: float
    sigma_log_floor: float
    sigma_log: float
    robust: bool


def noise_profile(runs: Sequence[Sequence[float]], *, robust: bool = True,
                  figures: Sequence[float] | None = None) -> NoiseProfile:
    """Summarise the noise of a job from two or more baseline runs.

    ``robust`` (default) measures the within-run spread with the MAD, because
    per-step times carry outliers; the between-run spread always uses the
    classical standard deviation, since with a handful of run medians a MAD is
    too coarse to be useful (and there are no single slow steps to resist).
    ``figures``: each run's measured step time as verification compares it
    (infrarsi.step_clock: a span, not a median), whose run-to-run spread is the
    one verification sees; the runs' medians when not given.
    """
    arrays = [positive_1d(run, f"runs[{i}]", min_len=2) for i, run in enumerate(runs)]
    if len(arrays) < 2:
        raise ValueError(f"need at least 2 runs to see run-to-run noise, got {len(arrays)}")
    if figures is not None and (len(figures) != len(arrays) or any(not f or f <= 0 for f in figures)):
        figures = None
    run_medians = np.array(list(figures) if figures is not None else [np.median(a) for a in arrays])
    within_sigma_log = float(np.median([_log_sd(a, robust=robust) for a in arrays]))
    sigma_between = float(np.std(np.log(run_medians), ddof=1))
    typical_steps = float(np.median([a.size for a in arrays]))
    floor = math.sqrt(math.pi / 2.0) * within_sigma_log / math.sqrt(typical_steps)
    return NoiseProfile(
        n_runs=len(arrays),
        steps_per_run=tuple(a.size for a in arrays),
        run_medians=tuple(float(m) for m in run_medians),
        pooled_median=float(np.median(np.concatenate(arrays))),
        within_cv=float(np.median([cv(a, robust=robust) for a in arrays])),
        between_cv=cv(run_medians),
        within_sigma_log=within_sigma_log,
        sigma_log_between=sigma_between,
        sigma_log_floor=floor,
        sigma_log=max(sigma_between, floor),
        robust=robust,
    )


def sigma_log_upper(profile: NoiseProfile, confidence: float = 0.8) -> float:
    """One-sided upper confidence bound on the between-run log sigma.

    Uses the chi-square interval for a normal standard deviation with
    ``n_runs - 1`` degrees of freedom (log run medians are close to normal).
    Planning the number of A/B repeats with this value instead of the point
    estimate keeps the promised power when the baseline had only a few runs;
    the price is more repeats (from 3 runs at 80% confidence, about 2.1x the
    sigma and 4.5x the repeats).
    """
    confidence = probability(confidence, "confidence")
    dof = profile.n_runs - 1
    factor = math.sqrt(dof / float(_st.chi2.ppf(1.0 - confidence, dof)))
    return max(profile.sigma_log_between * factor, profile.sigma_log_floor)
