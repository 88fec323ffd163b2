"""checkpoint_blocks: before/after and what it declines."""

from __future__ import annotations

from tests.support.codemods import assert_codemod, assert_declines


def test_checkpoint_blocks_with_and_without_an_imported_checkpoint() -> None:
    assert_codemod("checkpoint_blocks", """
        import torch
        import torch.nn as nn

        class GPT(nn.Module):
            def forward(self, idx, mask=None):
                x = self.transformer.wte(idx)
                for block in self.transformer.h:
                    x = block(x, mask=mask)
                return x
    """, """
        import torch
        import torch.nn as nn

        class GPT(nn.Module):
            def forward(self, idx, mask=None):
                x = self.transformer.wte(idx)
                for block in self.transformer.h:
                    x = torch.utils.checkpoint.checkpoint(block, x, mask=mask, use_reentrant=False) if self.training else block(x, mask=mask)
                return x
    """)
    assert_codemod("checkpoint_blocks", """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Net(torch.nn.Module):
            def forward(self, h):
                for layer in self.layers: h = layer(h)
                return h
    """, """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Net(torch.nn.Module):
            def forward(self, h):
                for layer in self.layers: h = checkpoint(layer, h, use_reentrant=False) if self.training else layer(h)
                return h
    """)


def test_checkpoint_declines_loops_it_does_not_understand() -> None:
    assert_declines("checkpoint_blocks", """
        import torch
        class GPT(torch.nn.Module):
            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                    x = self.norm(x)
                return x
    """, "does more than `x = block(x)`")

