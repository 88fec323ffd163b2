"""The one conflict rule (infrarsi/conflicts.py): every place that asks gets the same answer, and the built-in
catalog's exclusions are exactly the ones its hand-written ``conflicts_with`` lists and ``decides`` gave before
the lists were folded into the rule."""

from __future__ import annotations

from itertools import combinations

from bot.patching.catalog import CATALOG
from infrarsi.conflicts import blocking, clashes, conflicts, goes_with, held_knobs, resolve, why
from infrarsi.contract.model import Knob
from infrarsi.patches import Effect, PatchSpec
from infrarsi.search.space import SearchSpace
from tests.support.demo_space import DEMO_KNOBS

SPECS = [e.spec(("train.py",)) for e in CATALOG]
BY_ID = {s.id: s for s in SPECS}
EFFECT = Effect(time_ratio=1.0, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")

#: Every pair of catalog patches the search space kept apart before the rule was one (computed with the old
#: code: the union of each entry's ``conflicts_with`` and the pairs deciding the same thing). The old lists
#: alone missed (hf_bf16, lightning_bf16_precision), which the space still refused as both decide the dtype.
OLD_EXCLUDED = {
    ("autocast_bf16", "autocast_forward_bf16"), ("autocast_bf16", "autocast_fp16_scaler"),
    ("autocast_bf16", "hf_bf16"), ("autocast_bf16", "lightning_bf16_precision"),
    ("autocast_forward_bf16", "autocast_fp16_scaler"), ("autocast_forward_bf16", "hf_bf16"),
    ("autocast_forward_bf16", "lightning_bf16_precision"), ("autocast_fp16_scaler", "hf_bf16"),
    ("autocast_fp16_scaler", "lightning_bf16_precision"), ("cuda_backend_flags", "hf_tf32"),
    ("cuda_backend_flags", "lightning_benchmark"), ("hf_bf16", "lightning_bf16_precision"),
    ("hf_fused_optim", "optimizer_foreach"), ("hf_fused_optim", "optimizer_fused"),
    ("hf_torch_compile", "torch_compile_model"), ("optimizer_foreach", "optimizer_fused"),
}

#: Per catalog patch, the demo knobs it held at their defaults before (the old ``patch_knob_clashes``).
OLD_HELD = {
    "optimizer_foreach": (("optimizer", "adamw"),), "optimizer_fused": (("optimizer", "adamw"),),
    "hf_fused_optim": (("optimizer", "adamw"),), "checkpoint_blocks": (("grad_ckpt", 0),),
    "autocast_bf16": (("dtype", "fp32"),), "autocast_forward_bf16": (("dtype", "fp32"),),
    "hf_bf16": (("dtype", "fp32"),), "lightning_bf16_precision": (("dtype", "fp32"),),
    "autocast_fp16_scaler": (("dtype", "fp32"),), "torch_compile_model": (("compile", 0),),
    "hf_torch_compile": (("compile", 0),),
}


def _replacement(pid: str, target: str, **kw: object) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="", targets=(target,), effect=EFFECT, kind="replacement",
                     replacement="def f():\n    pass\n", **kw)  # type: ignore[arg-type]


def test_every_catalog_pair_is_excluded_exactly_as_before() -> None:
    found = conflicts(SPECS)
    excluded = {(a, b) for a, b in combinations(sorted(BY_ID), 2) if b in found.get(a, {})}
    assert excluded == OLD_EXCLUDED


def test_the_space_the_application_and_the_feature_map_give_the_rule_s_answer() -> None:
    space = SearchSpace.from_contract(DEMO_KNOBS, (), SPECS)
    for a, b in combinations(sorted(BY_ID), 2):
        expected = (a, b) in OLD_EXCLUDED
        assert space.conflicting(a, b) == space.conflicting(b, a) == expected, (a, b)
        assert bool(blocking(BY_ID[a], [BY_ID[b]])) == bool(blocking(BY_ID[b], [BY_ID[a]])) == expected, (a, b)
    assert {pid: held for pid, held in held_knobs(DEMO_KNOBS, SPECS).items()} == OLD_HELD


def test_no_catalog_entry_lists_its_conflicts_and_every_one_is_a_shared_decision() -> None:
    assert all(not s.conflicts_with for s in SPECS)
    for a, others in conflicts(SPECS).items():
        for b, reason in others.items():
            assert reason.startswith("both decide "), (a, b, reason)


def test_a_patch_goes_with_a_knob_deciding_the_same_only_at_its_default() -> None:
    optimizer = next(k for k in DEMO_KNOBS if k.name == "optimizer")
    micro = next(k for k in DEMO_KNOBS if k.name == "micro_batch")
    assert goes_with(BY_ID["optimizer_fused"], optimizer, "adamw")
    assert not goes_with(BY_ID["optimizer_fused"], optimizer, "adamw_foreach")
    assert goes_with(BY_ID["optimizer_fused"], micro, 16)
    flag = Knob(name="compile", kind="int", default=0, values=(0, 1))
    assert not goes_with(BY_ID["torch_compile_model"], flag, False)  # False is not the default 0
    assert clashes({"optimizer": "adamw_fused"}, ["optimizer_foreach", "optimizer_fused"], DEMO_KNOBS, BY_ID) == [
        "patch optimizer_foreach and knob optimizer='adamw_fused' both decide optimizer_impl",
        "patch optimizer_fused and knob optimizer='adamw_fused' both decide optimizer_impl",
        "patches optimizer_foreach and optimizer_fused: both decide optimizer_impl"]


def test_overlapping_claims_conflict_unless_one_requires_the_other() -> None:
    a, b = _replacement("a", "m.py::f"), _replacement("b", "m.py::g")
    c = _replacement("c", "m.py::h", requires=("a",))
    overlaps = {"a": {"b": ["m.py::f"], "c": ["m.py::f"]}, "b": {"a": ["m.py::f"]}, "c": {"a": ["m.py::f"]}}
    assert why(a, b) is None
    assert why(a, b, overlaps=overlaps) == "both change m.py::f"
    assert why(a, c, overlaps=overlaps) is None  # made to stack
    assert conflicts([a, b, c], overlaps) == {"a": {"b": "both change m.py::f"}, "b": {"a": "both change m.py::f"}}


def test_a_declared_conflict_counts_from_either_side_and_a_bare_id_only_by_the_declaration() -> None:
    a, b = _replacement("a", "m.py::f", conflicts_with=("b",)), _replacement("b", "m.py::g")
    assert why(a, b) == why(b, a) == "declared"
    assert blocking(a, ["b", "x"]) == ["b"] and blocking(b, ["a"]) == []
    assert blocking(b, [a]) == ["a"]


def test_resolve_writes_the_rule_s_answer_and_keeps_what_was_declared_first() -> None:
    x = _replacement("x", "m.py::f", conflicts_with=("zzz",))
    resolved = {s.id: s for s in resolve([*SPECS, x], {"x": {"fused_gelu": ["m.py::f"]}})}
    assert resolved["x"].conflicts_with == ("zzz", "fused_gelu")
    assert "x" in resolved["fused_gelu"].conflicts_with
    assert resolved["optimizer_fused"].conflicts_with == ("hf_fused_optim", "optimizer_foreach")
    assert resolved["channels_last"].conflicts_with == ()
    # Idempotent: a resolved record read back resolves to itself.
    assert resolve(list(resolved.values())) == list(resolved.values())
