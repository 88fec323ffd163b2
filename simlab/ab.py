"""Monte Carlo check of the decision rule under a simple noise model.

Model: each run's median step time is log-normal around the arm's true
median, ``log m = log mu + sigma_log * Z``, independently across runs, with
``mu_candidate = mu_baseline / true_speedup``. This is the model the power
formulas assume; it has no drift and no heavy tails, so it tells how the rule
behaves when the assumptions hold, not how robust it is to their failure.
"""

from __future__ import annotations

import numpy as np

from infrarsi.stats._checks import non_negative, positive_int
from infrarsi.stats.compare import check_rule, decide

#: Bootstrap values held at once (about 16 MB per float64 array).
_CHUNK_VALUES: int = 2_000_000


def simulate_ab(*, sigma_log: float, true_speedup: float, n: int, trials: int,
                min_effect: float, alpha: float = 0.05, seed: int = 0,
                n_boot: int = 2000) -> float:
    """Share of simulated A/B comparisons that :func:`compare` would promote.

    ``true_speedup`` is a ratio like :attr:`Comparison.speedup` (1.0 = A/A,
    1.05 = candidate 5% faster); ``n`` runs per arm. With ``true_speedup = 1``
    the result is the false-promotion rate, otherwise the power. Runs the
    exact decision rule of ``compare``, batched; deterministic for a seed.
    """
    non_negative(sigma_log, "sigma_log")
    if not (np.isfinite(true_speedup) and true_speedup > 0):
        raise ValueError(f"true_speedup must be a positive ratio, got {true_speedup!r}")
    n = positive_int(n, "n", minimum=2)
    trials = positive_int(trials, "trials")
    check_rule(min_effect=min_effect, alpha=alpha, n_boot=n_boot, seed=seed)
    data_seq, rule_seq = np.random.SeedSequence(seed).spawn(2)
    rng = np.random.default_rng(data_seq)
    mu = 0.1  # seconds; the rule is scale free, the value only keeps times realistic
    base = mu * np.exp(sigma_log * rng.standard_normal((trials, n)))
    cand = (mu / true_speedup) * np.exp(sigma_log * rng.standard_normal((trials, n)))
    # Chunks bound memory (the bootstrap holds trials x n_boot values); each
    # chunk's bootstrap seed comes from the same SeedSequence, so the result
    # depends only on the arguments.
    step = max(1, _CHUNK_VALUES // n_boot)
    starts = range(0, trials, step)
    promoted = 0
    for start, chunk_seq in zip(starts, rule_seq.spawn(len(starts))):
        sl = slice(start, start + step)
        batch = decide(base[sl], cand[sl], min_effect=min_effect, alpha=alpha, n_boot=n_boot,
                        seed=int(chunk_seq.generate_state(1)[0]))
        promoted += int(np.count_nonzero(batch.significant))
    return promoted / trials
