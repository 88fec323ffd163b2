"""Tensor- and expert-parallel groups that span nodes: design columns on the communication part of a step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.search_tuners import engine_space, prediction_error, simulated_records, without_derived
from infrarsi.parallel.group_placement import TIME_PRIORS, placement_features
from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.contract.model import Knob
from infrarsi.search.derived import GroupPlacement
from infrarsi.search.features import build_features
from infrarsi.search.space import SearchSpace
from simlab.cluster import SimulatedJob
from infrarsi.trial import Candidate

MEGATRON = [Knob(name="tp", kind="int", default=1, values=(1, 2, 4, 8), flag="--tensor-model-parallel-size"),
            Knob(name="experts", kind="int", default=1, values=(1, 2, 4, 8), flag="--expert-model-parallel-size")]


def test_the_share_of_a_ranks_peers_on_other_nodes_follows_megatrons_rank_order() -> None:
    ep = GroupPlacement(group="ep", size="ep", stride=("tp",), ranks_per_node=8)
    assert ep.off_node_share({"tp": 4, "ep": 2}) == 0.0  # eight adjacent ranks: one node
    assert ep.off_node_share({"tp": 8, "ep": 2}) == 1.0  # the two expert ranks are a node apart
    assert ep.off_node_share({"tp": 4, "ep": 8}) == pytest.approx(6 / 7)  # two of eight per node
    assert ep.off_node_share({"tp": 1, "ep": 8}) == 0.0
    assert ep.off_node_share({"tp": 1, "ep": 16}) == pytest.approx(8 / 15)
    tp = GroupPlacement(group="tp", size="tp", ranks_per_node=4)
    assert tp.off_node_share({"tp": 4}) == 0.0 and tp.off_node_share({"tp": 8}) == pytest.approx(4 / 7)


def test_columns_only_where_some_levels_span_nodes() -> None:
    (ep,) = placement_features(MEGATRON, 16, 8)  # tp <= 8 stays in a node; tp x ep up to 64 does not
    assert ep.name == "off_node:ep" and ep.knobs == ("experts", "tp")  # roles from the flags' leaves
    assert [f.name for f in placement_features(MEGATRON, 16, 4)] == ["off_node:tp", "off_node:ep"]
    assert placement_features(MEGATRON, 8, 8) == ()  # one node
    assert placement_features(MEGATRON, 1, None) == ()  # the bot does not start the ranks
    assert placement_features(MEGATRON[:1], 16, 8) == ()  # no level of tp leaves a node of eight


def test_the_columns_are_relative_to_the_baseline_pair_with_nothing_and_price_communication() -> None:
    knobs = [replace(MEGATRON[0], default=8), MEGATRON[1]]  # a baseline whose experts would spread
    space = SearchSpace.from_contract(knobs, [], [], derived=placement_features(knobs, 16, 8))
    assert not space.encode(space.baseline()).any()
    col = space.feature_names.index("off_node:ep")
    assert space.encode(Candidate.of({"tp": 8, "experts": 2}, ()))[col] == 1.0
    assert space.encode(Candidate.of({"tp": 4, "experts": 2}, ()))[col] == 0.0
    priors = builtin_priors(space, 16, 8)
    fmap = build_features(space, priors)
    assert col not in fmap.squares and all(col not in pair for pair in fmap.pairs)
    assert priors.time["off_node:ep"] == TIME_PRIORS["ep"] and priors.time_parts["off_node:ep"] == "communication"
    assert priors.memory["off_node:ep"][0] == 0.0 and priors.unknown_names(space) == []


def test_the_engine_predicts_experts_kept_in_a_node_from_runs_that_spread_them() -> None:
    """Simulated mixtral-8x7b on two H100 nodes: every measured layout with experts spread (tp = 8, ep = 2;
    tp = 4, ep = 4) sends the all-to-all over the network. tp = 4, ep = 2 keeps it on NVLink; per-knob
    slopes read the network's cost as a cost of ep and tp and miss it there."""
    job = SimulatedJob("mixtral-8x7b", "h100-2x8", seed=0)
    base = {**job.space.default(), "zero": 1, "recompute": "selective", "sequence_parallel": True,
            "flash_attention": True, "grouped_gemm": True, "micro_batch": 2}
    tried = [{**base, "tp": tp, "ep": ep, "pp": pp} for tp, ep, pp in
             ((8, 1, 2), (8, 2, 1), (4, 4, 1), (4, 1, 4), (8, 1, 1), (4, 1, 2))]
    records = simulated_records(job, tried)
    assert all(r.outcome.value == "ok" for r in records)
    target = {**base, "tp": 4, "ep": 2, "pp": 1}
    space = engine_space(job)
    plain = without_derived(space, "off_node:")
    assert len(plain.derived) < len(space.derived)
    errors = {label: prediction_error(s, job, records, target)
              for label, s in (("with", space), ("without", plain))}
    assert abs(errors["with"]) < 0.05 < abs(errors["without"]), errors  # 4.5% and 7.3% at the time of writing
