"""The grouped-experts codemod: a Python loop over MoE experts becomes sorted, padded groups and batched matmuls,
computing what the loop computes (outputs and gradients, with and without dropped assignments)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from bot.patching.codemods import run_codemod
from bot.patching.results import Rewritten
from tests.support.tinygpt import REPO

TINYMOE = REPO / "fixtures" / "tinymoe"


def _load_model(source: str, name: str):
    path = Path(f"/tmp/infrarsi_tinymoe_{name}_{time.time_ns()}.py")
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    path.unlink()
    return module


# -- the grouped-experts codemod ------------------------------------------------------------------

LOOP = '''
import torch
import torch.nn.functional as F


class MoE(torch.nn.Module):
    def dispatch(self, x_flat, topk_idx, topk_w):
        out = torch.zeros_like(x_flat)
        for e in range(self.n_experts):
            tok, slot = torch.where(topk_idx == e)
            if tok.numel() == 0:
                continue
            h = F.gelu(x_flat[tok] @ self.w_in[e] + self.b_in[e])
            y = h @ self.w_out[e]
            out.index_add_(0, tok, y * topk_w[tok, slot].unsqueeze(-1))
        return out
'''

GROUPED = '''
import torch
import torch.nn.functional as F


class MoE(torch.nn.Module):
    def dispatch(self, x_flat, topk_idx, topk_w):
        out = torch.zeros_like(x_flat)
        _grp_flat = (topk_idx).reshape(-1)
        _grp_valid = (_grp_flat >= 0) & (_grp_flat < self.n_experts)
        _grp_order = torch.argsort(torch.where(_grp_valid, _grp_flat, self.n_experts), stable=True)[: int(_grp_valid.sum())]
        _grp_expert = _grp_flat[_grp_order]
        tok = _grp_order // (topk_idx).shape[-1]
        slot = _grp_order % (topk_idx).shape[-1]
        _grp_counts = torch.bincount(_grp_expert, minlength=self.n_experts)
        _grp_pos = torch.arange(_grp_expert.numel(), device=_grp_expert.device) - (torch.cumsum(_grp_counts, 0) - _grp_counts)[_grp_expert]
        _grp_cap = int(_grp_counts.max()) if _grp_expert.numel() else 0
        _grp_x0 = (x_flat).new_zeros((self.n_experts, _grp_cap, (x_flat).shape[-1]))
        _grp_x0[_grp_expert, _grp_pos] = (x_flat)[tok]
        h = F.gelu(_grp_x0 @ self.w_in + (self.b_in).unsqueeze(1))
        y = h @ self.w_out
        out.index_add_(0, tok, y[_grp_expert, _grp_pos] * topk_w[tok, slot].unsqueeze(-1))
        return out
'''


def test_grouped_experts_codemod_before_after() -> None:
    outcome = run_codemod("grouped_experts", LOOP, scope=["MoE.dispatch"])
    assert isinstance(outcome, Rewritten), outcome
    assert outcome.code == GROUPED
    assert outcome.symbols == ("MoE.dispatch",)


def test_grouped_experts_declines_other_loops() -> None:
    body = LOOP.replace("            y = h @ self.w_out[e]\n", "            y = h @ self.w_out[e]\n"
                        "            print(e)\n")
    outcome = run_codemod("grouped_experts", body, scope=["MoE.dispatch"])
    assert not isinstance(outcome, Rewritten)
    assert "straight-line assignments" in outcome.reason
    assert not isinstance(run_codemod("grouped_experts", LOOP, scope=["MoE.route"]), Rewritten)


@pytest.mark.parametrize("capacity_factor", [0.0, 1.0])
def test_grouped_experts_compute_what_the_loop_computes(capacity_factor: float) -> None:
    """Same outputs and gradients as the loop, with and without dropped (index -1) assignments."""
    import torch

    source = (TINYMOE / "model.py").read_text()
    outcome = run_codemod("grouped_experts", source, scope=["MoE.dispatch"])
    assert isinstance(outcome, Rewritten), outcome
    loop, grouped = _load_model(source, "loop"), _load_model(outcome.code, "grouped")
    config = dict(vocab_size=64, seq_len=16, n_layer=1, n_head=2, d_model=32, n_experts=4, top_k=2, d_expert=16,
                  capacity_factor=capacity_factor)
    results = []
    for module in (loop, grouped):
        torch.manual_seed(0)
        model = module.MoEGPT(module.MoEConfig(**config))
        idx = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
        loss = model(idx, idx.roll(1, dims=1))
        loss.backward()
        routed = int(model.blocks[0].moe.routed_tokens)
        results.append((loss.item(), [p.grad.clone() for p in model.parameters()], routed))
    (l1, g1, r1), (l2, g2, r2) = results
    assert r1 == r2
    assert (r1 < 4 * 16 * 2) == (capacity_factor > 0)  # a capacity of 1.0 drops some assignments here
    assert l2 == pytest.approx(l1, rel=1e-6)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


# -- experts as a list of modules (issue 48): enumerate, index masks, torch.where / index_select ------------------

CAPMOE = REPO / "fixtures" / "capmoe"

MODULE_LOOP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w1 = nn.Linear(d, 4 * d, bias=False)
        self.w3 = nn.Linear(d, 4 * d, bias=False)
        self.w2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.gate = nn.Linear(d, n, bias=False)
        self.experts = nn.ModuleList([Expert(d) for _ in range(n)])

    def forward(self, x, idx, w):
        out = torch.zeros_like(x)
        for e in range(len(self.experts)):
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            y = self.experts[e](x.index_select(0, tok))
            out.index_add_(0, tok, y * w[tok, slot, None])
        return out
'''


def test_experts_held_as_modules_are_inlined_on_stacked_weights() -> None:
    """A SwiGLU expert without biases, `range(len(self.experts))`, `torch.nonzero(..., as_tuple=True)` and
    `X.index_select(0, tok)`: the call is the expert's forward on stacked (in, out) weights."""
    outcome = run_codemod("grouped_experts", MODULE_LOOP, scope=["MoE.forward"])
    assert isinstance(outcome, Rewritten), outcome
    code = outcome.code
    assert "_grp_w1_w = torch.stack([m.w1.weight for m in self.experts]).transpose(1, 2)" in code
    assert "_grp_w1_b" not in code  # bias=False
    assert "y = (((F.silu((_grp_x0 @ _grp_w1_w)) * (_grp_x0 @ _grp_w3_w)) @ _grp_w2_w))" in code, code
    assert "for e in" not in code


def test_an_expert_that_is_not_row_wise_or_not_read_is_declined() -> None:
    normed = MODULE_LOOP.replace("        self.w2 = nn.Linear(4 * d, d, bias=False)\n",
                                 "        self.w2 = nn.Linear(4 * d, d, bias=False)\n"
                                 "        self.norm = nn.LayerNorm(d)\n").replace(
        "return self.w2(F.silu(self.w1(x)) * self.w3(x))", "return self.norm(self.w2(F.silu(self.w1(x)) * self.w3(x)))")
    outcome = run_codemod("grouped_experts", normed, scope=["MoE.forward"])
    assert not isinstance(outcome, Rewritten) and "uses `self.norm`" in outcome.reason, outcome
    elsewhere = MODULE_LOOP.replace("class Expert(nn.Module):", "class Other(nn.Module):")
    outcome = run_codemod("grouped_experts", elsewhere, scope=["MoE.forward"])
    assert not isinstance(outcome, Rewritten) and "not built from a class defined in this file" in outcome.reason


def test_capmoe_grouped_computes_what_its_loop_computes() -> None:
    """The capmoe fixture's loop (`enumerate(self.experts)`, an index mask, `torch.where`, `torch.index_select`,
    capacity drops): the same loss and gradients, the experts' own parameters reached."""
    import torch

    source = (CAPMOE / "model.py").read_text()
    outcome = run_codemod("grouped_experts", source, scope=["MoELayer.forward"])
    assert isinstance(outcome, Rewritten), outcome
    sys.path.insert(0, str(CAPMOE))
    try:
        loop, grouped = _load_model(source, "caploop"), _load_model(outcome.code, "capgrouped")
    finally:
        sys.path.remove(str(CAPMOE))
    results = []
    for module in (loop, grouped):
        torch.manual_seed(0)
        model = module.MoEGPT(module.MoEConfig(n_embd=32, block_size=16, capacity_factor=1.0))
        idx = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(1))
        model(idx, idx.roll(1, dims=1)).backward()
        results.append([p.grad.clone() if p.grad is not None else None for p in model.parameters()])
    for a, b in zip(*results):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
