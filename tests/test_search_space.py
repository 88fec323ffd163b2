"""The joint search space: validity, sampling, moves, enumeration, encoding and distance."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.contract.model import Constraint, Knob
from tests.support.patches import patch
from infrarsi.search.features import ALL_PAIRS_MAX, Priors, build_features
from infrarsi.search.space import GRID_POINTS, SearchSpace
from infrarsi.trial_record import Candidate


KNOBS = (
    Knob(name="micro_batch", kind="int", default=2, values=(1, 2, 4, 8, 16), flag="--mb"),
    Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16", "fp16"), flag="--dtype"),
    Knob(name="compile", kind="bool", default=False, flag="--compile"),
    Knob(name="workers", kind="int", default=0, values=(0, 1, 2, 4), flag="--workers"),
)
CONSTRAINTS = (
    Constraint(kind="divides", knob="micro_batch", value=8),
    Constraint(kind="forbid", when=(("dtype", "fp16"), ("compile", True))),
)
PATCHES = (
    patch("sdpa"),
    patch("flash", requires=("sdpa",)),
    patch("foreach", conflicts=("fused",)),
    patch("fused", conflicts=("foreach",)),
    patch("ckpt", t=1.2, m=0.6),
)


@pytest.fixture
def space() -> SearchSpace:
    return SearchSpace.from_contract(KNOBS, CONSTRAINTS, PATCHES)


def brute_force(space: SearchSpace) -> set[str]:
    """Every valid point, by checking the full product (the reference for enumerate/sample)."""
    out = set()
    for levels in itertools.product(*(a.levels for a in space.axes)):
        values = {a.name: v for a, v in zip(space.axes, levels)}
        for mask in itertools.product((0, 1), repeat=len(space.patch_ids)):
            c = Candidate.of(values, [p for p, b in zip(space.patch_ids, mask) if b])
            if space.contains(c):
                out.add(c.digest())
    return out


def test_axes_choose_encodings(space: SearchSpace) -> None:
    enc = {a.name: a.encoding for a in space.axes}
    # powers of two -> log2; 0 in the values -> one-hot; categorical and bool -> one-hot
    assert enc == {"micro_batch": "log2", "dtype": "onehot", "compile": "onehot", "workers": "onehot"}
    assert space.feature_names == ("micro_batch", "dtype=bf16", "dtype=fp16", "compile=True", "workers=1",
                                   "workers=2", "workers=4", "patch:ckpt", "patch:flash", "patch:foreach",
                                   "patch:fused", "patch:sdpa")


def test_baseline_encodes_to_origin(space: SearchSpace) -> None:
    base = space.baseline()
    assert space.contains(base)
    assert not space.encode(base).any()
    assert base.knob_dict() == {"micro_batch": 2, "dtype": "fp32", "compile": False, "workers": 0}


def test_encoding_values(space: SearchSpace) -> None:
    c = Candidate.of({"micro_batch": 8, "dtype": "bf16", "compile": True, "workers": 4}, ["sdpa", "flash"])
    z = dict(zip(space.feature_names, space.encode(c)))
    assert z["micro_batch"] == pytest.approx(2.0)  # log2(8 / 2)
    assert z["dtype=bf16"] == 1 and z["dtype=fp16"] == 0 and z["compile=True"] == 1
    assert z["workers=4"] == 1 and z["workers=1"] == 0
    assert z["patch:sdpa"] == 1 and z["patch:flash"] == 1 and z["patch:ckpt"] == 0


def test_equal_candidates_hash_and_encode_equal(space: SearchSpace) -> None:
    a = Candidate.of({"dtype": "bf16", "micro_batch": 4, "compile": False, "workers": 0}, ["fused", "sdpa"])
    b = Candidate.of({"workers": 0, "compile": False, "micro_batch": 4, "dtype": "bf16"}, ("sdpa", "fused", "sdpa"))
    assert a == b and hash(a) == hash(b) and a.digest() == b.digest()
    assert np.array_equal(space.encode(a), space.encode(b))
    assert space.complete(Candidate.of({"dtype": "bf16", "micro_batch": 4}, ["sdpa", "fused"])) == a


def test_validity_rules(space: SearchSpace) -> None:
    base = space.baseline().knob_dict()
    assert not space.contains(Candidate.of({**base, "micro_batch": 16}))  # 16 does not divide 8
    assert not space.contains(Candidate.of({**base, "dtype": "fp16", "compile": True}))  # forbidden
    assert not space.contains(Candidate.of(base, ["flash"]))  # requires sdpa
    assert not space.contains(Candidate.of(base, ["foreach", "fused"]))  # conflict
    assert not space.contains(Candidate.of(base, ["nope"]))
    assert not space.contains(Candidate.of({**base, "micro_batch": 3}))
    assert not space.contains(Candidate.of({k: v for k, v in base.items() if k != "dtype"}))  # missing knob
    assert space.contains(Candidate.of({**base, "dtype": "fp16"}, ["sdpa", "flash", "fused"]))
    assert "flash requires sdpa" in space.violations(Candidate.of(base, ["flash"]))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_sample_is_valid_and_distinct(seed: int) -> None:
    space = SearchSpace.from_contract(KNOBS, CONSTRAINTS, PATCHES)
    points = space.sample(np.random.default_rng(seed), 40)
    assert len(points) == 40
    assert len({c.digest() for c in points}) == 40
    assert all(space.contains(c) for c in points)


def test_sample_covers_the_space(space: SearchSpace) -> None:
    every = brute_force(space)
    drawn = {c.digest() for c in space.sample(np.random.default_rng(0), len(every), max_attempts=200_000)}
    assert drawn == every  # every valid point is reachable, including dense and sparse patch sets


def test_enumerate_matches_brute_force(space: SearchSpace) -> None:
    points = space.enumerate(10_000)
    assert points is not None
    assert len(points) == len({c.digest() for c in points})
    assert {c.digest() for c in points} == brute_force(space)
    assert space.enumerate(10) is None


def test_neighbors_are_valid_single_changes(space: SearchSpace) -> None:
    c = Candidate.of({"micro_batch": 2, "dtype": "bf16", "compile": True, "workers": 1}, ["sdpa", "foreach"])
    moves = space.neighbors(c)
    digests = [m.digest() for m in moves]
    assert len(digests) == len(set(digests)) and c.digest() not in digests
    assert all(space.contains(m) for m in moves)
    mb = {m.knob_dict()["micro_batch"] for m in moves if m.patches == c.patches}
    assert mb == {1, 2, 4}  # ordered knob: adjacent levels only
    assert Candidate.of(c.knob_dict(), ["sdpa", "fused"]) in moves  # adding a conflicting patch swaps
    assert Candidate.of(c.knob_dict(), ["sdpa", "flash", "foreach"]) in moves
    assert Candidate.of(c.knob_dict(), ["foreach"]) in moves  # removing sdpa
    with_flash = Candidate.of(c.knob_dict(), ["sdpa", "flash"])
    assert Candidate.of(c.knob_dict(), []) in space.neighbors(with_flash)  # removing sdpa removes flash too
    # fp16 would be forbidden with compile: that move is absent
    assert all(m.knob_dict()["dtype"] != "fp16" for m in moves)


def test_distance(space: SearchSpace) -> None:
    base = space.baseline()
    kd = base.knob_dict()
    assert space.distance(base, base) == 0
    assert space.distance(base, Candidate.of(kd, ["ckpt"])) == pytest.approx(1.0)
    assert space.distance(base, Candidate.of({**kd, "dtype": "bf16"})) == pytest.approx(1.0)
    assert space.distance(Candidate.of({**kd, "dtype": "fp16"}), Candidate.of({**kd, "dtype": "bf16"})) == \
        pytest.approx(1.0)
    far = Candidate.of({**kd, "micro_batch": 8})
    near = Candidate.of({**kd, "micro_batch": 4})
    # an ordered knob counts its share of its range of levels (1..16: four doublings)
    assert space.distance(Candidate.of({**kd, "micro_batch": 1}), far) == pytest.approx(0.75)
    assert space.distance(base, near) < space.distance(base, far)
    assert space.distance(near, far) == space.distance(far, near)


def test_project_from_the_bank(space: SearchSpace) -> None:
    foreign = Candidate.of({"dtype": "bf16", "seq_parallel": True}, ["sdpa", "triton_rope"])
    point = space.project(foreign)
    assert point is not None and space.contains(point)
    assert point.knob_dict()["dtype"] == "bf16" and point.knob_dict()["micro_batch"] == 2
    assert point.patches == ("sdpa",)
    assert space.project(Candidate.of({"dtype": "int4"})) is None


def test_continuous_knobs_are_gridded() -> None:
    knobs = (Knob(name="lr_scale", kind="float", default=1.0, low=0.1, high=10.0, log=True, flag="--lr"),
             Knob(name="frac", kind="float", default=0.5, low=0.0, high=1.0, flag="--frac"),
             Knob(name="threads", kind="int", default=4, low=1, high=64, log=True, flag="--threads"),
             Knob(name="accum", kind="int", default=1, low=1, high=4, flag="--accum"))
    space = SearchSpace.from_contract(knobs, (), ())
    axes = {a.name: a for a in space.axes}
    lr = axes["lr_scale"]
    assert lr.encoding == "log2" and 1.0 in lr.levels and len(lr.levels) == GRID_POINTS + 1
    ratios = np.diff(np.log([v for v in lr.levels if v != 1.0]))
    assert np.allclose(ratios, ratios[0])  # geometric grid
    assert axes["frac"].encoding == "linear" and len(axes["frac"].levels) == GRID_POINTS + 1
    assert all(isinstance(v, int) for v in axes["threads"].levels) and 4 in axes["threads"].levels
    assert axes["accum"].levels == (1, 2, 3, 4)
    assert not space.encode(space.baseline()).any()
    c = Candidate.of({"lr_scale": 4.0, "frac": 1.0, "threads": 4, "accum": 1})
    z = dict(zip(space.feature_names, space.encode(c)))
    assert z["lr_scale"] == pytest.approx(2.0) and z["frac"] == pytest.approx(0.5)
    assert space.contains(c)  # a value off the grid but inside the domain is still a point
    points = space.enumerate(100_000)
    assert points is not None and len(points) == math.prod(len(a.levels) for a in space.axes)


def test_interactions_exclude_impossible_pairs(space: SearchSpace) -> None:
    fmap = build_features(space, Priors())
    names = set(fmap.names)
    assert "micro_batch^2" in names  # ordered knob with 5 levels
    assert "micro_batch*dtype=bf16" in names
    assert "dtype=bf16*dtype=fp16" not in names  # one knob
    assert "patch:foreach*patch:fused" not in names  # conflict
    assert "patch:flash*patch:sdpa" not in names  # flash requires sdpa: the product is flash itself
    assert fmap.expand(space.encode(space.baseline())[None, :]).sum() == 0


def test_many_features_limit_the_pairs() -> None:
    patches = [patch(f"p{i:02d}", t=0.98 - 0.03 * (i % 5)) for i in range(20)]
    space = SearchSpace.from_contract(KNOBS, CONSTRAINTS, patches)
    fmap = build_features(space, Priors())
    assert len(space.feature_names) > ALL_PAIRS_MAX
    assert len(fmap.pairs) <= ALL_PAIRS_MAX * (ALL_PAIRS_MAX - 1) // 2
    paired = {i for pair in fmap.pairs for i in pair}
    assert space.feature_names.index("patch:p04") in paired  # among the strongest priors (0.86)
    assert space.feature_names.index("patch:p00") not in paired  # among the weakest (0.98)
