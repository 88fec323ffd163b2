"""The pipeline bubble as a design column: 1F1B's idle slots from pp, vpp, tp and the micro-batch count."""

from __future__ import annotations

import math

import pytest

from infrarsi.parallel.pipeline_bubble import TIME_PRIOR, bubble_features
from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.contract.model import Constraint, Knob
from infrarsi.search.derived import PIPELINE_BUBBLE, PipelineRoles
from infrarsi.search.features import build_features
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate

MEGATRON = [Knob(name="tensor_model_parallel_size", kind="int", default=1, values=(1, 2, 4, 8)),
            Knob(name="pipeline_model_parallel_size", kind="int", default=1, values=(1, 2, 4)),
            Knob(name="virtual_pipeline_model_parallel_size", kind="int", default=1, values=(1, 2)),
            Knob(name="micro_batch_size", kind="int", default=1, values=(1, 2, 4, 8))]
GLOBAL_BATCH = Constraint(kind="divides", knob="micro_batch_size", value=256, reason="global batch")


def _space(knobs: list[Knob] = MEGATRON, constraints: tuple[Constraint, ...] = (GLOBAL_BATCH,),
           world: int | None = 32) -> SearchSpace:
    return SearchSpace.from_contract(knobs, list(constraints), [],
                                     derived=bubble_features(knobs, constraints, world))


def test_the_column_is_the_log_of_the_slots_1f1b_runs() -> None:
    roles = PipelineRoles(pp="pp", tp="tp", vpp="vpp", micro_batch="mb", world_size=32, global_batch=256)
    # dp = 32 / (4 * 2) = 4 replicas, m = 256 / (4 * 4) = 16 micro-batches: one idle slot in 16
    assert roles.log_slots({"pp": 2, "tp": 4, "vpp": 1, "mb": 4}) == pytest.approx(math.log1p(1 / 16))
    assert roles.log_slots({"pp": 2, "tp": 4, "vpp": 2, "mb": 4}) == pytest.approx(math.log1p(1 / 32))
    assert roles.log_slots({"pp": 8, "tp": 4, "vpp": 1, "mb": 8}) == pytest.approx(math.log1p(7 / 32))
    assert roles.log_slots({"pp": 1, "tp": 4, "vpp": 1, "mb": 8}) == 0.0
    # a gradient-accumulation knob is the micro-batch count itself
    accum = PipelineRoles(pp="pp", accumulation="gradient_accumulation_steps", world_size=8)
    assert accum.log_slots({"pp": 4, "gradient_accumulation_steps": 12}) == pytest.approx(math.log1p(3 / 12))


def test_megatron_names_and_the_global_batch_give_the_column_and_the_baseline_stays_at_zero() -> None:
    space = _space()
    assert space.feature_names[-1] == PIPELINE_BUBBLE and space.feature_kinds[-1] == "derived"
    assert not space.encode(space.baseline()).any()
    deep = Candidate.of({"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 4,
                         "virtual_pipeline_model_parallel_size": 1, "micro_batch_size": 8}, ())
    assert space.encode(deep)[-1] == pytest.approx(math.log1p(3 / 32))  # dp 1, m 32
    # a baseline that already pipelines: the column is relative to it, like every feature
    piped = [MEGATRON[0], Knob(name="pp", kind="int", default=4, values=(1, 2, 4)), MEGATRON[3]]
    space = _space(piped)
    assert not space.encode(space.baseline()).any()
    flat = Candidate.of({"tensor_model_parallel_size": 1, "pp": 1, "micro_batch_size": 1}, ())
    assert space.encode(flat)[-1] == pytest.approx(-math.log1p(3 / 32))  # dp 8, m 32 at the baseline


def test_no_column_without_a_pipeline_knob_or_a_micro_batch_count() -> None:
    assert bubble_features(MEGATRON, (), 32) == ()  # no global batch, no accumulation knob
    assert bubble_features(MEGATRON, (GLOBAL_BATCH,), None) == ()  # the world size decides dp
    assert bubble_features(MEGATRON, (GLOBAL_BATCH,), 1) == ()  # one rank as far as the bot knows: dp unknown
    assert bubble_features([MEGATRON[0], MEGATRON[3]], (GLOBAL_BATCH,), 32) == ()  # nothing pipelines
    # Megatron's layers-per-virtual-stage is the inverse of a stage count: not read as vpp
    layers = Knob(name="num_layers_per_virtual_pipeline_stage", kind="int", default=4, values=(1, 2, 4))
    (feature,) = bubble_features([*MEGATRON[:2], layers, MEGATRON[3]], (GLOBAL_BATCH,), 32)
    assert layers.name not in feature.knobs
    accum = Knob(name="gradient_accumulation_steps", kind="int", default=8, values=(4, 8, 16))
    (feature,) = bubble_features([MEGATRON[1], accum], (), None)
    assert accum.name in feature.knobs


def test_the_column_pairs_with_nothing_and_carries_the_bubble_prior() -> None:
    space = _space()
    priors = builtin_priors(space, 32)
    fmap = build_features(space, priors)
    col = space.feature_names.index(PIPELINE_BUBBLE)
    assert col not in fmap.squares and all(col not in pair for pair in fmap.pairs)
    assert priors.time[PIPELINE_BUBBLE] == TIME_PRIOR and priors.time_parts[PIPELINE_BUBBLE] == "compute"
    assert priors.unknown_names(space) == []
    # with the column, pp's own time prior is the sends only (the bubble is no longer priced twice)
    plain = SearchSpace.from_contract(MEGATRON, [GLOBAL_BATCH], [])
    pp = "pipeline_model_parallel_size"
    assert builtin_priors(space, 32).time[pp][0] < builtin_priors(plain, 32).time[pp][0]


def test_a_global_batch_on_the_command_and_a_hydra_override_are_read() -> None:
    knobs = [Knob(name="model_pp", kind="int", default=1, values=(1, 2, 4),
                  override="model.pipeline_model_parallel_size"),
             Knob(name="mbs", kind="int", default=1, values=(1, 2, 4), flag="--micro-batch-size")]
    argv = ("python", "pretrain_gpt.py", "--global-batch-size", "64", "--seq-length", "4096")
    (feature,) = bubble_features(knobs, (), 8, argv)
    assert feature.knobs == ("model_pp", "mbs")
    assert feature.value({"model_pp": 4, "mbs": 4}) == pytest.approx(math.log1p(3 / 8))  # dp 2, m 8
    (hydra,) = bubble_features(knobs, (), 8, ("python", "train.py", "model.global_batch_size=64"))
    assert hydra.value({"model_pp": 4, "mbs": 4}) == feature.value({"model_pp": 4, "mbs": 4})
    # a plain batch size is not a global batch: nothing says how many micro-batches a step holds
    assert bubble_features(knobs, (), 8, ("python", "train.py", "--batch-size", "64")) == ()
