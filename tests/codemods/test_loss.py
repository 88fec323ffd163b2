"""fused_cross_entropy: before/after, what it declines, and that the rewrite computes the same."""

from __future__ import annotations

import torch

from tests.support.codemods import assert_codemod, assert_declines, assert_same, both


def test_loss_gather_chain_through_locals() -> None:
    assert_codemod("fused_cross_entropy", """
        import torch
        import torch.nn.functional as F

        class GPT(torch.nn.Module):
            def forward(self, idx, targets):
                logits = self.lm_head(self.hidden(idx))
                logp = torch.log_softmax(logits.float(), dim=-1)
                # pick the target entries
                target_logp = torch.gather(logp, -1, targets.unsqueeze(-1)).squeeze(-1)
                return -target_logp.mean()
    """, """
        import torch
        import torch.nn.functional as F

        class GPT(torch.nn.Module):
            def forward(self, idx, targets):
                logits = self.lm_head(self.hidden(idx))
                # pick the target entries
                return F.cross_entropy(logits.flatten(0, -2), targets.flatten())
    """, symbols=("GPT.forward",))


def test_loss_nll_and_float_cross_entropy_forms() -> None:
    assert_codemod("fused_cross_entropy", """
        import torch.nn.functional as F

        def loss_fn(logits, targets):
            logits = logits.view(-1, logits.size(-1))
            return F.nll_loss(F.log_softmax(logits, dim=-1), targets.view(-1), ignore_index=-1)

        def loss2(logits, targets):
            logp = F.log_softmax(logits.float(), dim=-1)
            loss = F.nll_loss(logp.view(-1, logp.size(-1)), targets.view(-1))
            return loss

        def loss3(logits, y):
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), ignore_index=-1)

        def loss4(logits, y):
            lp = logits.log_softmax(-1)
            return -(lp.gather(-1, y[..., None])).sum()
    """, """
        import torch.nn.functional as F

        def loss_fn(logits, targets):
            logits = logits.view(-1, logits.size(-1))
            return F.cross_entropy(logits, targets.view(-1), ignore_index=-1)

        def loss2(logits, targets):
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return loss

        def loss3(logits, y):
            return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=-1)

        def loss4(logits, y):
            return F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="sum")
    """)


def test_loss_declines_shared_log_probs_and_unknown_rank() -> None:
    assert_declines("fused_cross_entropy", """
        import torch
        def loss(logits, t):
            logp = torch.log_softmax(logits, dim=-1)
            nll = -torch.gather(logp, -1, t.unsqueeze(-1)).squeeze(-1).mean()
            entropy = -(logp.exp() * logp).sum(-1).mean()
            return nll + 0.1 * entropy
    """, "`logp` is used elsewhere as well")
    assert_declines("fused_cross_entropy", """
        import torch.nn.functional as F
        def loss(logits, t):
            return F.nll_loss(F.log_softmax(logits, dim=-1), t)
    """, "cannot tell that `logits` is 2-D")



def test_rewritten_loss_computes_the_same() -> None:
    loss_before, loss_after = both("fused_cross_entropy", """
        import torch
        import torch.nn.functional as F

        def gathered(logits, targets):
            logp = torch.log_softmax(logits.float(), dim=-1)
            tl = torch.gather(logp, -1, targets.unsqueeze(-1)).squeeze(-1)
            return -tl.mean()

        def nll(logits, targets):
            logp = F.log_softmax(logits, dim=-1)
            return F.nll_loss(logp.view(-1, logp.size(-1)), targets.view(-1), reduction="sum")
    """)
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 11, generator=g)
    targets = torch.randint(0, 11, (2, 5), generator=g)
    for fn in ("gathered", "nll"):
        assert_same(loss_after[fn](logits, targets), loss_before[fn](logits, targets))
