"""PatchSpec / Effect: validation, JSON round trip, and a digest that never drifts."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.patches import Effect, PatchSpec


def _effect(**overrides: object) -> Effect:
    fields = dict(time_ratio=0.7, time_sigma=0.2, mem_ratio=0.8, mem_sigma=0.3, source="nanoGPT benchmarks")
    fields.update(overrides)
    return Effect(**fields)  # type: ignore[arg-type]


def _spec(**overrides: object) -> PatchSpec:
    fields: dict[str, object] = dict(
        id="sdpa", title="Fused attention", rationale="one kernel",
        targets=("model.py::CausalSelfAttention.forward",), effect=_effect(),
        kind="codemod", codemod="sdpa_causal_attention",
    )
    fields.update(overrides)
    return PatchSpec(**fields)  # type: ignore[arg-type]


def test_digest_is_pinned() -> None:
    # If this changes, every stored trial keyed by a patch digest is orphaned: bump SPEC_VERSION instead.
    assert _spec().digest() == "c3c04a065c99db5c6b0dc59f02c1ad9f34f0a2832d3a47e23f63f8583a92446d"


def test_digest_changes_with_any_field() -> None:
    base = _spec().digest()
    assert _spec(title="other").digest() != base
    assert _spec(effect=_effect(time_ratio=0.71)).digest() != base
    assert _spec(requires=("gelu",)).digest() != base
    assert _spec(evidence="trial 12").digest() != base


def test_round_trip_through_json() -> None:
    spec = _spec(requires=("gelu",), conflicts_with=("flash",), evidence="x")
    text = json.dumps(spec.to_dict())
    back = PatchSpec.from_dict(json.loads(text))
    assert back == spec
    assert back.digest() == spec.digest()


def test_a_gpu_only_patch_says_so_in_its_record_and_an_old_record_reads_as_not_gpu_only() -> None:
    spec = _spec(gpu_only=True)
    assert spec.to_dict()["gpu_only"] is True and PatchSpec.from_dict(spec.to_dict()) == spec
    assert "gpu_only" not in _spec().to_dict()  # absent when false: the digests of existing specs stay put
    with pytest.raises(ValueError, match="gpu_only"):
        PatchSpec.from_dict({**spec.to_dict(), "gpu_only": "yes"})


def test_replacement_spec_round_trips() -> None:
    spec = _spec(kind="replacement", codemod=None, replacement="def forward(self, x):\n    return x\n")
    assert PatchSpec.from_dict(spec.to_dict()) == spec
    assert spec.target_files == ("model.py",)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kind": "codemod", "codemod": None}, "needs `codemod`"),
        ({"kind": "codemod", "replacement": "def f(): pass"}, "no `replacement`"),
        ({"kind": "replacement", "codemod": None, "replacement": None}, "needs `replacement`"),
        ({"kind": "replacement", "codemod": None, "replacement": "def f(): pass", "targets": ("model.py",)},
         "exactly one"),
        ({"kind": "replacement", "codemod": None, "replacement": "def f(): pass",
          "targets": ("a.py::f", "b.py::g")}, "exactly one"),
        ({"kind": "magic"}, "kind"),
        ({"targets": ()}, "targets"),
        ({"id": ""}, "id"),
        ({"requires": ("sdpa",)}, "itself"),
        ({"requires": ("a",), "conflicts_with": ("a",)}, "overlap"),
    ],
)
def test_invalid_specs_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _spec(**overrides)


@pytest.mark.parametrize("field", ["time_ratio", "mem_ratio"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan, True])
def test_effect_ratios_must_be_positive_and_finite(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        _effect(**{field: value})


def test_effect_sigma_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="time_sigma"):
        _effect(time_sigma=-0.1)


def test_effect_log_means() -> None:
    effect = _effect()
    assert effect.log_time == pytest.approx(math.log(0.7))
    assert effect.log_mem == pytest.approx(math.log(0.8))


def test_from_dict_is_strict() -> None:
    data = _spec().to_dict()
    with pytest.raises(ValueError, match="unknown keys"):
        PatchSpec.from_dict({**data, "surprise": 1})
    with pytest.raises(ValueError, match="effect.time_sigma: required"):
        PatchSpec.from_dict({**data, "effect": {k: v for k, v in data["effect"].items() if k != "time_sigma"}})
    with pytest.raises(ValueError, match="targets"):
        PatchSpec.from_dict({**data, "targets": "model.py"})
    with pytest.raises(ValueError, match="version"):
        PatchSpec.from_dict({**data, "version": 99})


_text = st.text(min_size=1, max_size=20)
_ratio = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
_sigma = st.floats(min_value=0.0, max_value=5.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(
    ident=_text.filter(str.strip), targets=st.lists(_text, min_size=1, max_size=3),
    time_ratio=_ratio, time_sigma=_sigma, mem_ratio=_ratio, mem_sigma=_sigma, source=st.text(max_size=20),
)
def test_round_trip_property(ident: str, targets: list[str], time_ratio: float, time_sigma: float,
                             mem_ratio: float, mem_sigma: float, source: str) -> None:
    spec = PatchSpec(id=ident, title="t", rationale="r", targets=tuple(targets),
                     effect=Effect(time_ratio=time_ratio, time_sigma=time_sigma, mem_ratio=mem_ratio,
                                   mem_sigma=mem_sigma, source=source),
                     kind="codemod", codemod="fused_gelu")
    back = PatchSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    assert back.digest() == spec.digest()
