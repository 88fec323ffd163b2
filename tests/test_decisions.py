"""Settings that decide the same thing (infrarsi.decisions) are never proposed together (issue 18, acceptance 3).

The property is checked from the declarations themselves, not through the space's own bookkeeping: for every
candidate the search proposes, each decision is made by at most one active setting (a patch in the candidate, or
a knob away from its default)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.contract.model import Knob
from infrarsi.conflicts import clashes
from infrarsi.decisions import knob_decides
from infrarsi.search.engine import SearchEngine
from infrarsi.trial_record import Candidate
from tests.support.demo_space import DEMO_KNOBS, PATCHES, SPACE, demo_record


def deciders(candidate: Candidate) -> Counter[str]:
    """How many active settings of ``candidate`` make each decision."""
    values = candidate.knob_dict()
    made: Counter[str] = Counter()
    for knob in DEMO_KNOBS:
        if values.get(knob.name, knob.default) != knob.default:
            made.update(knob_decides(knob))
    for spec in PATCHES:
        if spec.id in candidate.patches:
            made.update(spec.decides)
    return made


def assert_one_each(candidates: list[Candidate]) -> None:
    for c in candidates:
        twice = {d: n for d, n in deciders(c).items() if n > 1}
        assert not twice, f"{c.describe()} decides {twice} more than once"


def test_the_catalog_and_the_demo_knobs_declare_what_they_decide() -> None:
    by_id = {p.id: p.decides for p in PATCHES}
    assert by_id["optimizer_fused"] == by_id["optimizer_foreach"] == ("optimizer_impl",)
    assert by_id["autocast_bf16"] == by_id["autocast_forward_bf16"] == ("compute_dtype",)
    assert by_id["torch_compile_model"] == ("compile",)
    knobs = {k.name: knob_decides(k) for k in DEMO_KNOBS}
    assert knobs["optimizer"] == ("optimizer_impl",) and knobs["dtype"] == ("compute_dtype",)
    assert knobs["compile"] == ("compile",) and knobs["micro_batch"] == ()
    # A contract's own declaration wins over the name table.
    assert knob_decides(Knob(name="opt_kind", kind="categorical", default="a", values=("a", "b"),
                             decides=("optimizer_impl",))) == ("optimizer_impl",)


def test_the_issue_s_winner_is_refused_and_says_why() -> None:
    both = SPACE.complete(Candidate.of({"optimizer": "adamw_foreach"}, ("optimizer_fused",)))
    assert not SPACE.contains(both)
    assert any("decide the same thing" in v for v in SPACE.violations(both))
    values = both.knob_dict()
    assert clashes(values, both.patches, DEMO_KNOBS, {p.id: p for p in PATCHES}) == [
        "patch optimizer_fused and knob optimizer='adamw_foreach' both decide optimizer_impl"]
    assert SPACE.contains(SPACE.complete(Candidate.of({"optimizer": "adamw"}, ("optimizer_fused",))))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_sampled_points_and_their_neighbours_never_decide_twice(seed: int) -> None:
    points = SPACE.sample(np.random.default_rng(seed), 40)
    assert points
    assert_one_each(points)
    for p in points[:5]:
        assert_one_each(SPACE.neighbors(p))


def test_the_engine_never_proposes_two_settings_that_decide_the_same_thing() -> None:
    engine = SearchEngine(SPACE, seed=3)
    proposed = [p.candidate for p in engine.initial_batch(8)]
    engine.observe([demo_record(i, c) for i, c in enumerate(proposed, start=1)])
    more = [p.candidate for p in engine.next_batch(4)]
    assert_one_each(proposed + more)
