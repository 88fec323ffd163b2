"""Composition: apply_patches is deterministic, order-independent, all-or-none per patch."""

from __future__ import annotations

from pathlib import Path

from bot.patching.one_patch import apply_patch
from bot.patching.patch_set import apply_patches
from bot.patching.results import Applied, Failed, NotApplicable
from infrarsi.patches import Effect, PatchSpec
from tests.support.codemods import NANOGPT_ATTENTION, norm


TRAIN = norm("""
    import torch

    def build_optimizer(model):
        return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def train_step(model, optimizer, x, y):
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()
""")


MODEL = norm(NANOGPT_ATTENTION) + norm("""

    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
""")


def _codemod(pid: str, codemod: str, *targets: str, requires: tuple[str, ...] = (),
             conflicts_with: tuple[str, ...] = ()) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=targets, kind="codemod", codemod=codemod,
                     requires=requires, conflicts_with=conflicts_with,
                     effect=Effect(time_ratio=0.9, time_sigma=0.2, mem_ratio=1.0, mem_sigma=0.1, source="test"))


SPECS = [
    _codemod("attn", "sdpa_causal_attention", "model.py::CausalSelfAttention.forward"),
    _codemod("gelu", "fused_gelu", "model.py::gelu"),
    _codemod("foreach", "optimizer_foreach", "train.py::build_optimizer"),
    _codemod("zero", "zero_grad_set_to_none", "train.py::train_step"),
    _codemod("autocast", "autocast_bf16", "train.py::train_step", requires=("zero",)),
]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _fresh(root: Path) -> Path:
    root.mkdir()
    (root / "model.py").write_text(MODEL)
    (root / "train.py").write_text(TRAIN)
    return root


def test_apply_patches_is_deterministic_and_order_independent(tmp_path: Path) -> None:
    forward, backward = _fresh(tmp_path / "a"), _fresh(tmp_path / "b")
    results_a = apply_patches(forward, SPECS)
    results_b = apply_patches(backward, list(reversed(SPECS)))
    assert results_a == results_b
    assert [r.patch_id for r in results_a] == ["attn", "foreach", "gelu", "zero", "autocast"]
    assert all(isinstance(r, Applied) for r in results_a), results_a
    assert _tree(forward) == _tree(backward)
    assert _tree(forward) != {"model.py": MODEL.encode(), "train.py": TRAIN.encode()}


def test_two_patches_in_one_file_commute(tmp_path: Path) -> None:
    one, two = _fresh(tmp_path / "one"), _fresh(tmp_path / "two")
    for spec in (SPECS[0], SPECS[1]):
        assert isinstance(apply_patch(one, spec), Applied)
    for spec in (SPECS[1], SPECS[0]):
        assert isinstance(apply_patch(two, spec), Applied)
    assert _tree(one) == _tree(two)


def test_conflicts_and_requirements_are_settled_first(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "r")
    fused = _codemod("fused", "optimizer_fused", "train.py::build_optimizer", conflicts_with=("foreach",))
    needs = _codemod("needs", "fused_gelu", "model.py::gelu", requires=("absent",))
    results = {r.patch_id: r for r in apply_patches(root, [SPECS[2], fused, needs, SPECS[1]])}
    assert isinstance(results["foreach"], NotApplicable) and "conflicts with fused" in results["foreach"].reason
    assert isinstance(results["fused"], NotApplicable) and "conflicts with foreach" in results["fused"].reason
    assert isinstance(results["needs"], NotApplicable) and "requires absent" in results["needs"].reason
    assert isinstance(results["gelu"], Applied)
    assert (root / "train.py").read_text() == TRAIN


def test_single_patch_checks_what_is_already_applied(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "s")
    autocast = SPECS[4]
    assert isinstance(apply_patch(root, autocast), NotApplicable)
    assert isinstance(apply_patch(root, autocast, applied={"zero"}), Applied)
    clash = _codemod("x", "fused_gelu", "model.py::gelu", conflicts_with=("attn",))
    result = apply_patch(root, clash, applied={"attn"})
    assert isinstance(result, NotApplicable) and "conflicts with attn" in result.reason


def test_a_patch_failing_in_one_file_writes_no_file(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "t")
    (root / "bad.py").write_text("import torch\nC = 0.044715\ndef f(:\n")
    spec = _codemod("mixed", "fused_gelu", "model.py::gelu", "bad.py")
    result = apply_patch(root, spec)
    assert isinstance(result, Failed) and "bad.py" in result.error
    assert (root / "model.py").read_text() == MODEL


def test_requirement_cycles_and_unknown_codemods_are_values(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "c")
    a = _codemod("a", "fused_gelu", "model.py::gelu", requires=("b",))
    b = _codemod("b", "optimizer_foreach", "train.py::build_optimizer", requires=("a",))
    unknown = _codemod("u", "no_such_codemod", "model.py")
    results = {r.patch_id: r for r in apply_patches(root, [a, b, unknown])}
    assert isinstance(results["a"], NotApplicable) and "cycle" in results["a"].reason
    assert isinstance(results["u"], Failed) and "no codemod named" in results["u"].error


def test_a_codemod_target_that_does_not_exist_is_named(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "m")
    result = apply_patch(root, _codemod("g", "fused_gelu", "model.py::gelu_fast"))
    assert isinstance(result, NotApplicable)
    assert result.reason.startswith("model.py: no definition named 'gelu_fast' in this file")

