"""Model-state bytes per parameter as a design column on the states part of peak memory."""

from __future__ import annotations

import math

import pytest

from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.parallel.sharding_priors import states_bytes
from infrarsi.parallel.states_column import MODEL_STATES, STATES_PRIOR, states_feature
from infrarsi.contract.model import Knob
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate

KNOBS = [Knob(name="tp", kind="int", default=1, values=(1, 2, 4, 8), flag="--tensor-model-parallel-size"),
         Knob(name="pp", kind="int", default=1, values=(1, 2, 4)),
         Knob(name="ep", kind="int", default=1, values=(1, 2, 4, 8)),
         Knob(name="zero_stage", kind="int", default=3, values=(0, 1, 2, 3))]


def test_the_column_is_the_log_of_the_bytes_formula_relative_to_the_baseline() -> None:
    feature = states_feature(KNOBS, 16)
    assert feature is not None and feature.name == MODEL_STATES
    assert feature.value({"tp": 4, "pp": 1, "ep": 2, "zero_stage": 1}) == pytest.approx(
        math.log(states_bytes(1, 16, mp=4, ep=2, moe=True)))
    space = SearchSpace.from_contract(KNOBS, [], [], derived=[feature])
    assert not space.encode(space.baseline()).any()
    col = space.feature_names.index(MODEL_STATES)
    # ZeRO-3 shards everything over the world: tp and ep change nothing there, ZeRO-1 at tp 4 x ep 2 does
    assert space.encode(Candidate.of({"tp": 8, "ep": 8}, ()))[col] == pytest.approx(0.0)
    assert space.encode(Candidate.of({"tp": 4, "ep": 2, "zero_stage": 1}, ()))[col] == pytest.approx(
        math.log(states_bytes(1, 16, mp=4, ep=2, moe=True) / states_bytes(3, 16, moe=True)))


def test_no_column_without_a_stage_or_a_world() -> None:
    assert states_feature(KNOBS, 1) is None and states_feature(KNOBS, None) is None
    assert states_feature(KNOBS[:3], 16) is None  # no sharding knob: the baseline's sharding is unknown
    odd = Knob(name="zero_stage", kind="categorical", default="auto", values=("auto", "1"))
    assert states_feature([*KNOBS[:3], odd], 16) is None


def test_with_the_column_the_stage_and_degree_priors_on_states_are_residuals() -> None:
    space = SearchSpace.from_contract(KNOBS, [], [], derived=[states_feature(KNOBS, 16)])
    priors = builtin_priors(space, 16)
    assert priors.memory_by_part[f"{MODEL_STATES} [states]"] == STATES_PRIOR
    assert priors.memory_by_part["zero_stage=0 [states]"][0] == 0.0
    assert priors.memory_by_part["tp*zero_stage=1 [states]"][0] == 0.0
    assert priors.memory_by_part["tp [activations]"][0] < 0  # tp still splits activations
    assert priors.memory_parts[MODEL_STATES] == "states" and priors.unknown_names(space) == []
