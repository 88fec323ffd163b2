"""Tensor- and expert-parallel groups that span nodes: design columns on the communication part of a step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infrarsi.parallel.group_placement import TIME_PRIORS, placement_features
from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.contract.model import Knob
from infrarsi.search.derived import GroupPlacement
from infrarsi.search.features import build_features
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate

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
