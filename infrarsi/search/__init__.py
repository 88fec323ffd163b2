"""Search over launch knobs and code patches: models, acquisition, first batch, engine.

Pure numpy/scipy. The engine sees trial records and proposes candidates; it
never runs anything itself.
"""

from infrarsi.search.acquisition import (
    Incumbent,
    Proposal,
    StopAdvice,
    expected_improvement,
    expected_remaining_improvement,
    pair_with_savers,
    propose_batch,
)
from infrarsi.search.engine import Best, PosteriorReport, SearchEngine
from infrarsi.search.features import EffectRow, FeatureMap, Priors, build_features
from infrarsi.search.memory_model import MemoryPosterior, MemoryPrice, fit_memory
from infrarsi.search.memory_parts import PartsMemoryPosterior, fit_memory_parts
from infrarsi.search.models import Models, fit_models
from infrarsi.search.space import KnobAxis, SearchSpace
from infrarsi.search.start import initial_batch, maximin
from infrarsi.search.time_model import TimePosterior, fit_time

__all__ = [
    "Best",
    "EffectRow",
    "FeatureMap",
    "Incumbent",
    "KnobAxis",
    "MemoryPosterior",
    "MemoryPrice",
    "Models",
    "PartsMemoryPosterior",
    "PosteriorReport",
    "Priors",
    "Proposal",
    "SearchEngine",
    "SearchSpace",
    "StopAdvice",
    "TimePosterior",
    "build_features",
    "expected_improvement",
    "expected_remaining_improvement",
    "fit_memory",
    "fit_memory_parts",
    "fit_models",
    "fit_time",
    "initial_batch",
    "maximin",
    "pair_with_savers",
    "propose_batch",
]
