"""Search over launch knobs and code patches: models, acquisition, first batch, engine.

Pure numpy/scipy. The engine sees trial records and proposes candidates; it
never runs anything itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names resolve on first use (PEP 562): importing one submodule, e.g. ``infrarsi.search.features`` from a
# Protocol module, must not load the models and scipy with it; the CLI's start-up time depends on it.
_WHERE = {
    "Best": "infrarsi.search.engine",
    "EffectRow": "infrarsi.search.features",
    "FeatureMap": "infrarsi.search.features",
    "Incumbent": "infrarsi.search.acquisition",
    "KnobAxis": "infrarsi.search.space",
    "MemoryPosterior": "infrarsi.search.memory_model",
    "MemoryPrice": "infrarsi.search.memory_model",
    "Models": "infrarsi.search.models",
    "PartsMemoryPosterior": "infrarsi.search.memory_parts",
    "PosteriorReport": "infrarsi.search.engine",
    "Priors": "infrarsi.search.features",
    "Proposal": "infrarsi.search.acquisition",
    "SearchEngine": "infrarsi.search.engine",
    "SearchSpace": "infrarsi.search.space",
    "StopAdvice": "infrarsi.search.acquisition",
    "TimePosterior": "infrarsi.search.time_model",
    "build_features": "infrarsi.search.features",
    "expected_improvement": "infrarsi.search.acquisition",
    "expected_remaining_improvement": "infrarsi.search.acquisition",
    "fit_memory": "infrarsi.search.memory_model",
    "fit_memory_parts": "infrarsi.search.memory_parts",
    "fit_models": "infrarsi.search.models",
    "fit_time": "infrarsi.search.time_model",
    "initial_batch": "infrarsi.search.start",
    "maximin": "infrarsi.search.start",
    "pair_with_savers": "infrarsi.search.acquisition",
    "propose_batch": "infrarsi.search.acquisition",
}

if TYPE_CHECKING:
    from infrarsi.search.engine import Best
    from infrarsi.search.features import EffectRow
    from infrarsi.search.features import FeatureMap
    from infrarsi.search.acquisition import Incumbent
    from infrarsi.search.space import KnobAxis
    from infrarsi.search.memory_model import MemoryPosterior
    from infrarsi.search.memory_model import MemoryPrice
    from infrarsi.search.models import Models
    from infrarsi.search.memory_parts import PartsMemoryPosterior
    from infrarsi.search.engine import PosteriorReport
    from infrarsi.search.features import Priors
    from infrarsi.search.acquisition import Proposal
    from infrarsi.search.engine import SearchEngine
    from infrarsi.search.space import SearchSpace
    from infrarsi.search.acquisition import StopAdvice
    from infrarsi.search.time_model import TimePosterior
    from infrarsi.search.features import build_features
    from infrarsi.search.acquisition import expected_improvement
    from infrarsi.search.acquisition import expected_remaining_improvement
    from infrarsi.search.memory_model import fit_memory
    from infrarsi.search.memory_parts import fit_memory_parts
    from infrarsi.search.models import fit_models
    from infrarsi.search.time_model import fit_time
    from infrarsi.search.start import initial_batch
    from infrarsi.search.start import maximin
    from infrarsi.search.acquisition import pair_with_savers
    from infrarsi.search.acquisition import propose_batch


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
