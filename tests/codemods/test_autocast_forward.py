"""autocast_forward_bf16: before/after on the shapes public GPT trainers write, and when it declines."""

from __future__ import annotations

import torch
from libcst.codemod import CodemodTest

from bot.patching.codemods import run_codemod
from bot.patching.results import Declined, Rewritten

norm = CodemodTest.make_fixture_data
NAME = "autocast_forward_bf16"

# The shape of nanoGPT's and minGPT's GPT: blocks built in __init__, the loss computed in forward from targets.
GPT = """
    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = nn.Linear(d, d)

        def forward(self, x):
            return x + self.fc(x)

    class GPT(nn.Module):
        def __init__(self, d, vocab):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.h = nn.ModuleList([Block(d) for _ in range(2)])
            self.lm_head = nn.Linear(d, vocab)

        def forward(self, idx, targets=None):
            \"\"\"Logits, and the loss when targets are given.\"\"\"
            x = self.wte(idx)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(x)
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                loss = None
            return logits, loss
"""

GPT_AFTER = """
    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = nn.Linear(d, d)

        def forward(self, x):
            return x + self.fc(x)

    class GPT(nn.Module):
        def __init__(self, d, vocab):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.h = nn.ModuleList([Block(d) for _ in range(2)])
            self.lm_head = nn.Linear(d, vocab)

        def forward(self, idx, targets=None):
            \"\"\"Logits, and the loss when targets are given.\"\"\"
            with torch.autocast(device_type=next(self.parameters()).device.type, dtype=torch.bfloat16):
                x = self.wte(idx)
                for block in self.h:
                    x = block(x)
                logits = self.lm_head(x)
                if targets is not None:
                    loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1), ignore_index=-1)
                else:
                    loss = None
                return logits, loss
"""


def test_wraps_only_the_root_models_forward_and_keeps_the_loss_in_fp32() -> None:
    result = run_codemod(NAME, norm(GPT))
    assert isinstance(result, Rewritten), result
    assert result.code == norm(GPT_AFTER)
    assert result.symbols == ("GPT.forward",)
    assert result.added_imports == ()


def test_respects_the_scope() -> None:
    result = run_codemod(NAME, norm(GPT), scope=["Block.forward"])
    assert isinstance(result, Declined)
    assert "outside the patch targets" in result.reason


def test_declines_a_forward_that_already_autocasts() -> None:
    source = """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def forward(self, x):
                with torch.autocast("cuda", dtype=torch.float16):
                    return self.fc(x)
    """
    result = run_codemod(NAME, norm(source))
    assert isinstance(result, Declined) and "already runs under torch.autocast" in result.reason


def test_declines_files_without_a_module_forward() -> None:
    result = run_codemod(NAME, norm("import torch\n\ndef train(model):\n    return model\n"))
    assert isinstance(result, Declined)


def test_the_patched_model_computes_the_same_loss_within_bf16_tolerance() -> None:
    before, after = {}, {}
    exec(compile(norm(GPT), "before", "exec"), before)
    exec(compile(run_codemod(NAME, norm(GPT)).code, "after", "exec"), after)  # type: ignore[union-attr]
    torch.manual_seed(0)
    a = before["GPT"](32, 64)
    b = after["GPT"](32, 64)
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 64, (2, 8))
    _, loss_a = a(idx, idx)
    logits_b, loss_b = b(idx, idx)
    assert logits_b.dtype == torch.bfloat16  # the matmuls ran in bf16
    assert loss_b.dtype == torch.float32  # the loss did not
    torch.testing.assert_close(loss_b, loss_a, rtol=2e-2, atol=2e-2)


def test_only_the_root_of_a_deit_style_file_is_wrapped_and_never_its_loss_module() -> None:
    # DeiT's models_v2: blocks reach the root as default arguments and through a factory's arguments; a
    # distillation loss module sits beside the model. Only vit_models.forward is the model's entry.
    source = norm("""
        import torch
        import torch.nn as nn

        class Attention(nn.Module):
            def forward(self, x):
                return x

        class Block(nn.Module):
            def __init__(self, dim, Attention_block=Attention):
                super().__init__()
                self.attn = Attention_block()

            def forward(self, x):
                return x + self.attn(x)

        class LayerScaleBlock(Block):
            def forward(self, x):
                return 2 * x

        class vit_models(nn.Module):
            def __init__(self, depth, block_layers=Block):
                super().__init__()
                self.blocks = nn.ModuleList([block_layers(8) for _ in range(depth)])

            def forward(self, x):
                for blk in self.blocks:
                    x = blk(x)
                return x

        class DistillationLoss(nn.Module):
            def forward(self, outputs, labels):
                return torch.nn.functional.cross_entropy(outputs, labels)

        def deit_tiny_LS(**kwargs):
            return vit_models(depth=12, block_layers=LayerScaleBlock, **kwargs)
    """)
    result = run_codemod(NAME, source)
    assert isinstance(result, Rewritten), result
    assert result.symbols == ("vit_models.forward",)
