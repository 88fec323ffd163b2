"""Conflicts from targets: a set of patches yields exactly every member's own change, or is refused.

A member's claim is what it changes applied alone to the base; two members that
change the same symbol (or one inside the other) conflict whoever wrote them
(a catalog codemod, a model's replacement). The property test draws random sets
of replacements and codemods over overlapping symbols (a class and its methods,
a function both a codemod and a replacement rewrite).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.patching.one_patch import apply_patch
from bot.patching.patch_set import apply_patches
from bot.patching.audit import unit_codes
from bot.patching.conflicts import claim_of, derived_conflicts, shared
from bot.patching.results import Applied, NotApplicable
from infrarsi.patches import Effect, PatchSpec

BASE = '''\
import math

import torch


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def scale(x):
    return x * 2


class Block:
    def first(self, x):
        return x + 1

    def second(self, x):
        return x - 1
'''
BASE_UNITS = unit_codes(BASE)
EFFECT = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")
# symbol → replacement sources (each keeps the name; the class ones rewrite one or both methods)
BODIES = {
    "gelu": ["def gelu(x):\n    return torch.nn.functional.gelu(x, approximate='tanh')\n",
             "def gelu(x):\n    return x * torch.sigmoid(1.702 * x)\n"],
    "scale": ["def scale(x):\n    return x + x\n", "def scale(x):\n    return 2 * x\n"],
    "Block.first": ["def first(self, x):\n    return 1 + x\n"],
    "Block.second": ["def second(self, x):\n    return -1 + x\n"],
    "Block": ["class Block:\n    def first(self, x):\n        return x + 1\n\n    def second(self, x):\n"
              "        return x - 2\n",
              "class Block:\n    def first(self, x):\n        return x + 3\n\n    def second(self, x):\n"
              "        return x - 1\n"],
}


def _replacement(n: int, symbol: str, body: str) -> PatchSpec:
    return PatchSpec(id=f"r{n}_{symbol.replace('.', '_')}", title="t", rationale="r", effect=EFFECT,
                     targets=(f"model.py::{symbol}",), kind="replacement", replacement=body)


CODEMOD = PatchSpec(id="fused_gelu", title="t", rationale="r", effect=EFFECT, targets=("model.py::gelu",),
                    kind="codemod", codemod="fused_gelu")


def _fresh(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "model.py").write_text(BASE)
    return root


@st.composite
def patch_sets(draw: st.DrawFn) -> list[PatchSpec]:
    chosen = draw(st.lists(st.sampled_from(sorted(BODIES)), min_size=1, max_size=4))
    specs = [_replacement(n, sym, draw(st.sampled_from(BODIES[sym]))) for n, sym in enumerate(chosen)]
    if draw(st.booleans()):
        specs.append(CODEMOD)
    return draw(st.permutations(specs))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=patch_sets())
def test_an_applied_set_holds_exactly_every_members_claimed_change_or_is_refused(specs: list[PatchSpec]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        claims = {}
        for n, spec in enumerate(specs):  # each member alone on its own copy of the base: what it claims
            alone = _fresh(Path(tmp) / f"alone{n}")
            assert isinstance(apply_patch(alone, spec), Applied)
            after = unit_codes((alone / "model.py").read_text())
            claims[spec.id] = {u: after.get(u) for u in set(BASE_UNITS) | set(after)
                               if BASE_UNITS.get(u) != after.get(u)}
        root = _fresh(Path(tmp) / "set")
        results = apply_patches(root, specs)
        applied = [r.patch_id for r in results if isinstance(r, Applied)]
        expected = dict(BASE_UNITS)
        for pid in applied:  # the applied members' changes are disjoint, and all of them are in the tree
            for unit, code in claims[pid].items():
                assert expected.get(unit) == BASE_UNITS.get(unit), f"{unit} claimed twice, yet both applied"
                expected[unit] = code
        assert {u: c for u, c in expected.items() if c is not None} == unit_codes((root / "model.py").read_text())
        if len(applied) < len(specs):  # a member was refused: only ever for an overlap
            symbols = [spec.targets[0].split("::")[1] for spec in specs]
            assert any(a == b or a.startswith(b + ".") or b.startswith(a + ".")
                       for i, a in enumerate(symbols) for b in symbols[i + 1:]), f"disjoint, yet refused: {results}"

def test_a_model_replacement_and_a_catalog_codemod_of_one_function_conflict_in_either_order(tmp_path: Path) -> None:
    model = _replacement(0, "gelu", BODIES["gelu"][1])
    for n, order in enumerate(([model, CODEMOD], [CODEMOD, model])):
        root = _fresh(tmp_path / str(n))
        results = {r.patch_id: r for r in apply_patches(root, order)}
        assert all(isinstance(r, NotApplicable) for r in results.values())
        assert f"{model.id} also changes model.py::gelu" in results["fused_gelu"].reason
        assert (root / "model.py").read_text() == BASE


def test_a_class_replacement_conflicts_with_a_patch_of_one_of_its_methods(tmp_path: Path) -> None:
    base = {"model.py": BASE.encode()}
    whole = _replacement(0, "Block", BODIES["Block"][0])  # changes only `second`, but rewrites the class
    method = _replacement(1, "Block.first", BODIES["Block.first"][0])
    other = _replacement(2, "scale", BODIES["scale"][0])
    claims = {s.id: claim_of(base, s) for s in (whole, method, other)}
    assert claims[whole.id].symbols == ("model.py::Block.second",)
    assert shared(claims[whole.id], claims[method.id]) == ["model.py::Block"]
    assert derived_conflicts([whole, method, other], claims) == {
        whole.id: {method.id: ["model.py::Block"]}, method.id: {whole.id: ["model.py::Block"]}}
