"""What the codemod tests share: before/after assertions in the style of libcst's ``assertCodemod``,
a nanoGPT attention block, and running a snippet before and after its rewrite."""

from __future__ import annotations

from pathlib import Path

import torch
from libcst.codemod import CodemodTest

from bot.patching.codemods import run_codemod
from bot.patching.results import Declined, Rewritten

__all__ = ["NANOGPT_ATTENTION", "ROOT", "TINYGPT", "assert_codemod", "assert_declines", "assert_same", "both", "norm"]

norm = CodemodTest.make_fixture_data


ROOT = Path(__file__).resolve().parents[2]


TINYGPT = ROOT / "fixtures" / "tinygpt"



def assert_codemod(name: str, before: str, after: str, *, scope: list[str] | None = None,
                   imports: tuple[str, ...] = (), symbols: tuple[str, ...] | None = None) -> None:
    result = run_codemod(name, norm(before), scope=scope)
    assert isinstance(result, Rewritten), result
    assert result.code == norm(after)
    assert result.added_imports == imports
    if symbols is not None:
        assert result.symbols == symbols


def assert_declines(name: str, source: str, reason: str, *, scope: list[str] | None = None) -> None:
    result = run_codemod(name, norm(source), scope=scope)
    assert isinstance(result, Declined), result
    assert reason in result.reason, result.reason


NANOGPT_ATTENTION = """
import math
import torch
import torch.nn as nn
from torch.nn import functional as F

class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn_dropout = nn.Dropout(config.dropout)
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                     .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        # manual implementation of attention
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v # (B, nh, T, hs)
        return y
"""


def assert_same(actual, expected, *, atol: float = 1e-5, rtol: float = 1e-5, msg: str = "") -> None:
    """Like torch.testing.assert_close, whose first call costs most of a second in imports."""
    assert actual.shape == expected.shape, msg
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), (msg, (actual - expected).abs().max())


def _load(source: str, name: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": name}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - test-only, our own snippets
    return namespace


def both(name: str, source: str) -> tuple[dict[str, object], dict[str, object]]:
    result = run_codemod(name, norm(source))
    assert isinstance(result, Rewritten), result
    return _load(norm(source), "before"), _load(result.code, "after")

