"""What the witness reads of dropout, in a real interpreter (the site payload's ``_Levers``): its masks keyed so
that a rewrite drawing them through another kernel, or recomputing them, draws the same ones. The MoE reading (and
dropout switched off) is exercised on the fixtures by tests/redteam/test_levers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.executors.local import LocalExecutor
from infrarsi.seams.executor import TrialSpec

pytestmark = [pytest.mark.slow, pytest.mark.side_by_side]  # its checks time nothing: CI runs it beside other tests (./dev)

JOB = """
import math, sys, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
P = 0.0 if "p0" in sys.argv else 0.2

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.drop, self.resid = nn.Linear(16, 48), nn.Dropout(P), nn.Dropout(P)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, 2, 8).transpose(1, 2) for t in self.qkv(x).split(16, 2))
        if "sdpa" in sys.argv:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=P if self.training else 0.0, is_causal=True)
        else:
            att = ((q @ k.transpose(-2, -1)) / math.sqrt(8)).masked_fill(torch.tril(torch.ones(T, T)) == 0, -1e9)
            y = self.drop(att.softmax(-1)) @ v
        return x + self.resid(y.transpose(1, 2).reshape(B, T, C))

blocks = nn.ModuleList([Attention() for _ in range(2)])
head = nn.Linear(16, 5)
opt = torch.optim.AdamW([*blocks.parameters(), *head.parameters()], lr=1e-2)
for step in range(4):
    for micro in range(2):
        x = torch.randn(2, 6, 16)
        for b in blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) if "ckpt" in sys.argv else b(x)
        loss = F.cross_entropy(head(x).view(-1, 5), torch.randint(0, 5, (12,)))
        (loss / 2).backward()
    opt.step()
    opt.zero_grad()
"""


def _witness(cwd: Path, *argv: str) -> dict:
    ex = LocalExecutor().execute(TrialSpec(argv=(sys.executable, *argv), cwd=str(cwd), timeout_s=300, witness=3))
    assert ex.returncode == 0 and ex.witness_error is None, ex.stderr_tail[-2000:]
    return ex.witness


def test_dropout_moved_into_sdpa_or_recomputed_by_checkpointing_draws_the_same_masks(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    explicit = _witness(tmp_path, "job.py")
    assert explicit["dropout"] == [[0.2, [2, 6, 6], 576, "keyed"], [0.2, [6, 16], 768, "keyed"]]
    for variant in ("sdpa", "ckpt"):
        other = _witness(tmp_path, "job.py", variant)
        assert other["dropout"] == explicit["dropout"], variant
        assert other["backward_loss"] == pytest.approx(explicit["backward_loss"], rel=1e-6), variant
        assert other["grad_norms"] == pytest.approx(explicit["grad_norms"], rel=1e-5), variant
