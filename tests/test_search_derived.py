"""Derived design columns: the pipeline bubble's stretch of a step and a communication group's off-node share."""

from __future__ import annotations

import math

import pytest

from infrarsi.search.derived import (PIPELINE_BUBBLE, GroupPlacement, PipelineRoles, group_placement, knob_number,
                                     pipeline_bubble)


def test_knob_number() -> None:
    assert knob_number({"pp": 4}, "pp", 1) == 4.0
    assert knob_number({"pp": 4}, "tp", 1) == 1.0 and knob_number({}, None, 2) == 2.0
    assert knob_number({"x": True}, "x", 1) == 1.0  # a bool is not a number here
    assert knob_number({"x": "auto"}, "x", 3) == 3.0


def test_microbatches_from_accumulation_or_the_global_batch() -> None:
    acc = PipelineRoles(pp="pp", world_size=8, accumulation="ga")
    assert acc.microbatches({"ga": 4}) == 4.0 and acc.microbatches({"ga": 0}) == 1.0
    gb = PipelineRoles(pp="pp", world_size=16, global_batch=256, tp="tp", micro_batch="mbs")
    assert gb.microbatches({"pp": 2, "tp": 2, "mbs": 4}) == 256 // (4 * 4)  # dp = 16 / 4
    assert PipelineRoles(pp="pp", world_size=8).microbatches({"pp": 2}) is None
    assert gb.knobs == ("pp", "tp", "mbs")


def test_the_bubble_column() -> None:
    roles = PipelineRoles(pp="pp", world_size=8, vpp="vpp", accumulation="ga")
    assert roles.log_slots({"pp": 1, "ga": 4}) == 0.0  # no pipeline, no bubble
    assert roles.log_slots({"pp": 4, "ga": 8, "vpp": 1}) == pytest.approx(math.log1p(3 / 8))
    assert roles.log_slots({"pp": 4, "ga": 8, "vpp": 2}) == pytest.approx(math.log1p(3 / 16))
    column = pipeline_bubble(roles)
    assert column is not None and column.name == PIPELINE_BUBBLE and column.knobs == ("pp", "vpp", "ga")
    assert column.value({"pp": 2, "ga": 1}) == pytest.approx(math.log(2))
    assert pipeline_bubble(PipelineRoles(pp="pp", world_size=8)) is None  # the micro-batch count is unknown


def test_off_node_share_of_a_group() -> None:
    ep = GroupPlacement(group="ep", size="ep", stride=("tp",), ranks_per_node=8)
    assert ep.off_node_share({"ep": 2, "tp": 4}) == 0.0  # 8 ranks: one node
    assert ep.off_node_share({"ep": 2, "tp": 8}) == 1.0  # each peer on another node
    assert ep.off_node_share({"ep": 4, "tp": 4}) == pytest.approx((4 - 2) / 3)
    assert ep.off_node_share({"ep": 1, "tp": 16}) == 0.0
    column = group_placement(ep)
    assert column.name == "off_node:ep" and column.knobs == ("ep", "tp")
    assert column.value({"ep": 8, "tp": 2}) == pytest.approx(4 / 7)
