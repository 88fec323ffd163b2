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
