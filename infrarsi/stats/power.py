"""How many A/B repeats the decision rule needs, and what they can detect.

Model: each run median is log-normal, ``log m = log mu + sigma_log * Z``, runs
independent, ``n`` runs per arm; the true speedup is ``exp(delta)`` with
``delta = log mu_baseline - log mu_candidate``. The normal approximation for a
one-sided two-sample test of ``delta`` at level alpha and power ``1 - beta``
needs ``delta >= (q_alpha + z_power) * se`` with ``se = sigma * sqrt(2 / n)``
for a t test on log medians. :func:`infrarsi.stats.compare` has two gates and
both must pass:

- the Mann-Whitney U test, whose asymptotic relative efficiency against the t
  test is ``3 / pi`` for normal data: it behaves like a t test on
  ``n * 3 / pi`` runs, so ``se = sigma * sqrt(2 * pi / (3 * n))``;
- the bootstrap lower bound on the ratio of *medians* clearing
  ``1 + min_effect``: the sample median has efficiency ``2 / pi`` against the
  mean, so ``se = sigma * sqrt(pi / n)``, and the target moves from 0 to
  ``log(1 + min_effect)``.

The second gate is always the stricter one (``pi > 2 * pi / 3``, and
``min_effect >= 0``), so it sets the repeat count; the first is kept in the
formula so that the model states the whole rule.

``q_alpha`` is the Student t quantile with ``n - 1`` degrees of freedom (the
runs in one arm) instead of the normal quantile. This is a calibration, not a
derivation: the percentile bootstrap interval of a median comes out a little
wider than normal theory says (one-sided miss rate about 3.5-4% at alpha = 5%),
which costs power. Simulating the actual rule (``simulate_ab``, 10,000 trials
each) over sigma_log 0.01-0.08, effects 3-10% and min_effect 0-2%, the normal
quantile gave n one short of 80% power at the largest n (power 0.79), ``2n - 2``
degrees of freedom still fell short there, and ``n - 1`` delivered 0.80-0.89 at
every grid point while asking at most one or two runs more than necessary.

Measured with ``simulate_ab`` (20,000 trials, n_boot 2000, alpha 0.05, power
0.8, n from ``repeats_for_effect(sigma, 0.05, min_effect=0.01)``):

=========  ==  =====================  =====================  ==================
sigma_log  n   A/A, min_effect 0      A/A, min_effect 0.01   power, true +5%
=========  ==  =====================  =====================  ==================
0.01        4  0.027                  0.002                  0.999
0.02        7  0.031                  0.004                  0.897
0.03       13  0.027                  0.005                  0.830
0.05       34  0.030                  0.007                  0.818
=========  ==  =====================  =====================  ==================

Below :func:`min_repeats` runs per arm the exact rank test cannot reach
``p < alpha`` at all, so nothing is detectable there.
"""

from __future__ import annotations

import math

from scipy import stats as _st

from infrarsi.stats._checks import non_negative, positive_int, probability
from infrarsi.stats.compare import min_exact_p, p_below

#: Asymptotic relative efficiency of the Mann-Whitney U test vs the t test
#: under normality.
MWU_ARE: float = 3.0 / math.pi

#: Efficiency of the sample median vs the sample mean under normality.
MEDIAN_EFFICIENCY: float = 2.0 / math.pi


def min_repeats(alpha: float = 0.05) -> int:
    """Smallest runs per arm (equal arms) at which ``p < alpha`` is possible.

    The exact one-sided Mann-Whitney p-value is at least ``1 / C(2n, n)``:
    alpha = 0.05 needs 4 runs per arm (3 give exactly 0.05, which is not below
    it), alpha = 0.01 needs 5, alpha = 0.001 needs 7.
    """
    alpha = probability(alpha, "alpha", upper=0.5)
    n = 1
    while not p_below(min_exact_p(n, n), alpha):
        n += 1
    return n


def _log_mde(sigma_log: float, n: int, alpha: float, power: float, min_effect: float) -> float:
    q = float(_st.t.ppf(1.0 - alpha, n - 1)) + float(_st.norm.ppf(power))
    mwu_gate = q * sigma_log * math.sqrt(2.0 / (n * MWU_ARE))
    median_gate = math.log1p(min_effect) + q * sigma_log * math.sqrt(2.0 / (n * MEDIAN_EFFICIENCY))
    return max(mwu_gate, median_gate)


def minimum_detectable_effect(sigma_log: float, n: int, alpha: float = 0.05,
                              power: float = 0.8, *, min_effect: float = 0.0) -> float:
    """Smallest relative speedup (0.04 = 4%) promoted with probability ``power``.

    ``sigma_log`` is the run-to-run noise of log run medians (a
    :class:`NoiseProfile`'s ``sigma_log``); ``n`` the runs per arm; the test is
    one-sided at ``alpha``; ``min_effect`` is the same bar passed to
    :func:`compare` (the default 0 asks only for a real speedup). Returns
    ``inf`` when ``n`` is below :func:`min_repeats`.
    """
    sigma_log = non_negative(sigma_log, "sigma_log")
    n = positive_int(n, "n")
    alpha = probability(alpha, "alpha", upper=0.5)
    power = probability(power, "power")
    min_effect = non_negative(min_effect, "min_effect")
    if n < min_repeats(alpha):
        return math.inf
    return math.expm1(_log_mde(sigma_log, n, alpha, power, min_effect))


def repeats_for_effect(sigma_log: float, effect: float, alpha: float = 0.05,
                       power: float = 0.8, *, min_effect: float = 0.0,
                       n_max: int = 64) -> int:
    """Runs per arm needed to promote a true ``effect`` with probability ``power``.

    The smallest ``n`` in ``[min_repeats(alpha), n_max]`` with
    ``minimum_detectable_effect(...) <= effect``, so never fewer than
    :func:`min_repeats`. When even ``n_max`` is not enough (too much noise, or
    ``effect <= min_effect``) it returns ``n_max``; callers that care check
    ``minimum_detectable_effect(sigma_log, n_max, ...) <= effect`` and may
    report the job as too noisy to verify instead.
    """
    sigma_log = non_negative(sigma_log, "sigma_log")
    effect = non_negative(effect, "effect")
    alpha = probability(alpha, "alpha", upper=0.5)
    power = probability(power, "power")
    min_effect = non_negative(min_effect, "min_effect")
    lo = min_repeats(alpha)
    n_max = positive_int(n_max, "n_max", minimum=lo)
    target = math.log1p(effect)
    if _log_mde(sigma_log, lo, alpha, power, min_effect) <= target:
        return lo
    if _log_mde(sigma_log, n_max, alpha, power, min_effect) > target:
        return n_max
    hi = n_max  # invariant: mde(lo) > target >= mde(hi); mde falls as n grows
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _log_mde(sigma_log, mid, alpha, power, min_effect) <= target:
            hi = mid
        else:
            lo = mid
    return hi
