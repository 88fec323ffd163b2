"""sdpa_causal_attention: before/after, what it declines, and that the rewrite computes the same."""

from __future__ import annotations

import torch

from tests.support.codemods import NANOGPT_ATTENTION, assert_codemod, assert_declines, assert_same, both


def test_attention_nanogpt() -> None:
    after = NANOGPT_ATTENTION.replace(
        """        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v # (B, nh, T, hs)
""",
        """        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout.p if self.training else 0.0, is_causal=True) # (B, nh, T, hs)
""")
    assert_codemod("sdpa_causal_attention", NANOGPT_ATTENTION, after, symbols=("CausalSelfAttention.forward",))


def test_attention_variants_triu_mask_matmul_renamed_and_returned() -> None:
    assert_codemod("sdpa_causal_attention", """
        import torch

        def attend(q, k, v, T):
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            scores = torch.matmul(q, k.transpose(-1, -2)) / (q.size(-1) ** 0.5)
            scores = scores.masked_fill(mask, -1e9)
            probs = scores.softmax(dim=-1)
            return torch.matmul(probs, v)
    """, """
        import torch

        def attend(q, k, v, T):
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    """)


def test_attention_custom_scale_is_passed_through() -> None:
    assert_codemod("sdpa_causal_attention", """
        import math
        import torch
        import torch.nn.functional as F

        def attend(q, k, v, hd):
            T = q.size(-2)
            bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
            att = torch.softmax(att, dim=-1)
            y = att @ v
            return y
    """, """
        import math
        import torch
        import torch.nn.functional as F

        def attend(q, k, v, hd):
            T = q.size(-2)
            bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(hd))
            return y
    """)


def test_attention_declines_a_mask_it_cannot_prove_causal() -> None:
    assert_declines("sdpa_causal_attention", """
        import torch
        import torch.nn.functional as F

        def attend(q, k, v, mask):
            att = (q @ k.transpose(-2, -1)) * 0.125
            att = att.masked_fill(mask == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            return att @ v
    """, "cannot prove the mask `mask == 0` is causal")


def test_attention_declines_non_causal_attention_and_used_weights() -> None:
    assert_declines("sdpa_causal_attention", """
        import torch

        def attend(q, k, v):
            att = (q @ k.transpose(-2, -1)) * 0.125
            att = torch.softmax(att, dim=-1)
            return att @ v
    """, "not causal attention")
    assert_declines("sdpa_causal_attention", """
        import torch

        def attend(q, k, v, T):
            bias = torch.tril(torch.ones(T, T))
            att = (q @ k.transpose(-2, -1)) * 0.125
            att = att.masked_fill(bias == 0, float("-inf"))
            att = torch.softmax(att, dim=-1)
            y = att @ v
            return y, att
    """, "`att` (scores or attention weights) is used after the attention output")


def test_attention_outside_targets_is_left_alone_and_reported() -> None:
    assert_declines("sdpa_causal_attention", NANOGPT_ATTENTION, "outside the patch targets",
                    scope=["CausalSelfAttention.__init__"])


def test_rewritten_attention_computes_the_same() -> None:
    source = """
        import math
        import torch

        def attend(q, k, v, T):
            bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = att.masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
            att = torch.softmax(att, dim=-1)
            return att @ v

        def scaled(q, k, v, T):
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            s = torch.matmul(q, k.transpose(-1, -2)) * 0.3
            s = s.masked_fill(mask, -1e9)
            p = s.softmax(dim=-1)
            return torch.matmul(p, v)
    """
    before, after = both("sdpa_causal_attention", source)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=g) for _ in range(3))
    for fn in ("attend", "scaled"):
        assert_same(after[fn](q, k, v, 7), before[fn](q, k, v, 7), atol=1e-5, rtol=1e-5)

