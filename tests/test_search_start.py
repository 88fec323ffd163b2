"""The first batch: baseline, bank transfers, the priors' favourites and space-filling picks; distinct, untried."""

from __future__ import annotations

import numpy as np

from infrarsi.contract.model import Knob
from infrarsi.search.features import Priors, build_features
from infrarsi.search.models import Models, fit_models
from infrarsi.search.space import SearchSpace
from infrarsi.search.start import initial_batch, maximin
from infrarsi.trial_record import Candidate
from tests.support.patches import patch

KNOBS = (Knob(name="compile", kind="bool", default=False, flag="--compile"),
         Knob(name="micro", kind="int", default=1, values=(1, 2, 4, 8), flag="--micro"),
         Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype"))


def _models() -> Models:
    space = SearchSpace.from_contract(KNOBS, (), (patch("a"), patch("b")))
    priors = Priors()
    return fit_models(space, build_features(space, priors), priors, [], memory_limit=None)


def test_maximin_picks_the_farthest_first_and_never_a_duplicate() -> None:
    models = _models()
    base = models.space.baseline()
    far = Candidate.of({"compile": True, "micro": 8, "dtype": "bf16"}, ("a", "b"))
    near = Candidate.of({"compile": False, "micro": 2, "dtype": "fp32"})
    assert maximin(models, [near, far], [base], 1) == [far]
    assert maximin(models, [base, base], [base], 2) == []  # at distance 0 from what is fixed
    assert maximin(models, [near, far], [], 0) == [] and maximin(models, [], [base], 3) == []
    assert maximin(models, [near, far, near], [base], 3) == [far, near]


def test_initial_batch_mixes_its_sources_in_order() -> None:
    models = _models()
    bank_point = Candidate.of({"compile": True, "micro": 4, "dtype": "bf16", "unknown_knob": 3}, ("a", "zzz"))
    batch = initial_batch(models, 8, np.random.default_rng(0), bank=[(bank_point, 0.9)])
    origins = [p.origin for p in batch]
    assert len(batch) == 8 and origins[0] == "baseline" and origins[1] == "bank"
    assert batch[0].candidate == models.space.baseline()
    assert batch[1].candidate == Candidate.of({"compile": True, "micro": 4, "dtype": "bf16"}, ("a",))
    assert "transferred (similarity 0.90)" in batch[1].note
    assert "prior" in origins and "spread" in origins
    assert origins.index("prior") < origins.index("spread")
    assert len({p.candidate.digest() for p in batch}) == 8
    assert all(models.space.contains(p.candidate) and 0 <= p.prob_ok <= 1 for p in batch)


def test_initial_batch_skips_what_was_tried_and_the_baseline_when_asked() -> None:
    models = _models()
    tried = [models.space.baseline()]
    batch = initial_batch(models, 4, np.random.default_rng(1), tried=tried)
    assert len(batch) == 4 and all(p.origin != "baseline" for p in batch)
    assert tried[0].digest() not in {p.candidate.digest() for p in batch}
    none = initial_batch(models, 3, np.random.default_rng(1), include_baseline=False)
    assert [p.origin for p in none][0] != "baseline" and len(none) == 3
    assert initial_batch(models, 0, np.random.default_rng(1)) == []
