"""checkpoint_blocks: before/after and what it declines."""

from __future__ import annotations

import textwrap

from bot.patching.codemods import run_codemod
from bot.patching.results import Rewritten
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



COLLECTED = """
    import torch
    import torch.nn as nn
    from manager import MANAGER

    class Router(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            self.gate = nn.Linear(d, n)

        def forward(self, x):
            logits = self.gate(x)
            MANAGER.add_aux_loss(logits.logsumexp(-1).pow(2).mean())
            return logits.softmax(-1)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.router = Router(d, 4)

        def forward(self, x):
            return x + self.router(x)

    class GPT(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(h=nn.ModuleList([Block(d) for _ in range(2)])))

        def forward(self, x):
            for block in self.transformer.h:
                x = block(x)
            return x
"""


def test_blocks_whose_forward_registers_losses_in_a_global_collector_are_not_checkpointed() -> None:
    """nanoMoE-style: the router appends its losses to a module-level manager during the forward; a recomputed
    forward appends them again ("Trying to backward through the graph a second time" on every trial)."""
    assert_declines("checkpoint_blocks", COLLECTED,
                    "change state outside themselves in their forward (Router.forward: "
                    "`MANAGER.add_aux_loss(logits.logsumexp(-1).pow(2).mean())` (changes the module-level MANAGER))")


def test_counters_and_caches_on_the_block_are_named_and_a_plain_attribute_is_not() -> None:
    counted = COLLECTED.replace("            MANAGER.add_aux_loss(logits.logsumexp(-1).pow(2).mean())\n",
                                "            self.calls += 1\n")
    assert_declines("checkpoint_blocks", counted, "`self.calls += 1` (a counter on the module")
    cached = COLLECTED.replace("            MANAGER.add_aux_loss(logits.logsumexp(-1).pow(2).mean())\n",
                               "            self.seen[x.shape[0]] = logits\n")
    assert_declines("checkpoint_blocks", cached, "(a cache on the module")
    stored = COLLECTED.replace("            MANAGER.add_aux_loss(logits.logsumexp(-1).pow(2).mean())\n",
                               "            self.aux_loss = logits.logsumexp(-1).pow(2).mean()\n")
    assert isinstance(run_codemod("checkpoint_blocks", textwrap.dedent(stored)), Rewritten)
