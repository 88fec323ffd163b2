"""Statistics for verifying that a candidate's speedup is real."""

from infrarsi.stats.compare import Comparison, compare, min_exact_p
from infrarsi.stats.descriptives import NoiseProfile, cv, median, noise_profile, sigma_log_upper
from infrarsi.stats.power import (
    MEDIAN_EFFICIENCY,
    MWU_ARE,
    min_repeats,
    minimum_detectable_effect,
    repeats_for_effect,
)

__all__ = [
    "MEDIAN_EFFICIENCY",
    "MWU_ARE",
    "Comparison",
    "NoiseProfile",
    "compare",
    "cv",
    "median",
    "min_exact_p",
    "min_repeats",
    "minimum_detectable_effect",
    "noise_profile",
    "repeats_for_effect",
    "sigma_log_upper",
]
