"""The design of every model: main features, squares of ordered knobs, eligible pairs, and their priors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.contract.model import Knob
from infrarsi.search.features import EffectRow, FeatureMap, Priors, build_features, part_key, part_prior_lookup
from infrarsi.search.space import SearchSpace
from tests.support.patches import patch

KNOBS = (Knob(name="compile", kind="bool", default=False, flag="--compile"),
         Knob(name="micro", kind="int", default=1, values=(1, 2, 4, 8), flag="--micro"),
         Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16", "fp16"), flag="--dtype"))


def _space(*patches) -> SearchSpace:
    return SearchSpace.from_contract(KNOBS, (), patches or (patch("a"), patch("b")))


def test_part_keys() -> None:
    assert part_key("tp*zero=0 [states]") == ("tp*zero=0", "states")
    assert part_key("tp") == ("tp", "") and part_key("tp [states") == ("tp [states", "")
    given = {"tp*zero=0 [states]": (0.1, 0.2)}
    assert part_prior_lookup(given, "zero=0*tp", "states") == (0.1, 0.2)  # a pair in either order
    assert part_prior_lookup(given, "tp*zero=0", "activations") is None


def test_priors_are_frozen_copies_and_name_their_typos() -> None:
    given = {"compile=True": (-0.3, 0.1)}
    priors = Priors(time=given, memory={"micro": (0.5, 0.1), "mikro": (0.5, 0.1)},
                    memory_by_part={"micro [states]": (0.0, 0.1), "micro [weights]": (0.0, 0.1)})
    given["x"] = (0.0, 1.0)
    assert "x" not in priors.time
    with pytest.raises(TypeError):
        priors.time["y"] = (0.0, 1.0)  # type: ignore[index]
    assert priors.unknown_names(_space()) == ["micro [weights]", "mikro"]


def test_effect_row_ratio() -> None:
    assert EffectRow(feature="f", prior_mean=0, prior_sd=1, post_mean=math.log(0.7), post_sd=0.1).ratio == \
        pytest.approx(0.7)


def test_feature_map_names_and_expand() -> None:
    fmap = FeatureMap(main_names=("a", "b", "c"), squares=(1,), pairs=((0, 2),))
    assert fmap.names == ("a", "b", "c", "b^2", "a*c") and fmap.n_main == 3
    np.testing.assert_allclose(fmap.expand([1.0, 3.0, 2.0]), [[1.0, 3.0, 2.0, 9.0, 2.0]])


def test_build_features_squares_ordered_knobs_and_pairs_across_knobs_only() -> None:
    space = _space()
    fmap = build_features(space, Priors())
    assert fmap.main_names == ("compile=True", "micro", "dtype=bf16", "dtype=fp16", "patch:a", "patch:b")
    assert fmap.squares == (1,)  # micro: a log2 knob with four levels
    assert (2, 3) not in fmap.pairs  # two levels of one knob are never both on
    assert len(fmap.pairs) == 15 - 1
    conflicting = build_features(_space(patch("a", conflicts=("b",)), patch("b")), Priors())
    assert (4, 5) not in conflicting.pairs
    dependent = build_features(_space(patch("a"), patch("b", requires=("a",))), Priors())
    assert (4, 5) not in dependent.pairs


def test_main_priors_given_else_the_patch_effect_else_the_knob_default() -> None:
    space = _space()
    fmap = build_features(space, Priors())
    mean, sd = fmap.main_prior(space, Priors(time={"compile=True": (-0.3, 0.1)}), "time")
    np.testing.assert_allclose(mean, [-0.3, 0, 0, 0, math.log(0.9), math.log(0.9)])
    np.testing.assert_allclose(sd, [0.1, 0.2, 0.2, 0.2, 0.1, 0.1])
    mean, sd = fmap.main_prior(space, Priors(), "memory")
    np.testing.assert_allclose(sd, [0.3, 0.3, 0.3, 0.3, 0.1, 0.1])
    mean, sd = fmap.prior(space, Priors(), "crash")
    assert len(mean) == len(fmap.names) and not mean.any()
    assert sd[:6].tolist() == [1.5] * 6
    assert sd[6] < 1.5  # the square's sd is per the knob's whole span squared
