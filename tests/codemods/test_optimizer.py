"""optimizer_foreach, optimizer_fused and zero_grad_set_to_none: before/after and what they decline."""

from __future__ import annotations

import pytest

from bot.patching.codemods import run_codemod
from bot.patching.results import Rewritten
from tests.support.codemods import TINYGPT, assert_codemod, assert_declines


OPTIMIZERS = """
    import torch
    from torch.optim import AdamW
    from torch import optim

    def build(model, lr):
        a = torch.optim.AdamW(model.parameters(), lr=lr)
        b = AdamW(
            model.parameters(),
            lr=lr,
            betas=(0.9, 0.95),
        )
        c = optim.SGD(model.parameters(),
                      lr=lr)
        kwargs = {"lr": lr, "weight_decay": 0.1}
        d = torch.optim.Adam(model.parameters(), foreach=False, **kwargs)
        return a, b, c, d
"""


def test_optimizer_foreach() -> None:
    assert_codemod("optimizer_foreach", OPTIMIZERS, """
        import torch
        from torch.optim import AdamW
        from torch import optim

        def build(model, lr):
            a = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)
            b = AdamW(
                model.parameters(),
                lr=lr,
                betas=(0.9, 0.95),
                foreach=True,
            )
            c = optim.SGD(model.parameters(),
                          lr=lr,
                          foreach=True)
            kwargs = {"lr": lr, "weight_decay": 0.1}
            d = torch.optim.Adam(model.parameters(), foreach=True, **kwargs)
            return a, b, c, d
    """)


def test_optimizer_fused() -> None:
    assert_codemod("optimizer_fused", OPTIMIZERS, """
        import torch
        from torch.optim import AdamW
        from torch import optim

        def build(model, lr):
            a = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
            b = AdamW(
                model.parameters(),
                lr=lr,
                betas=(0.9, 0.95),
                fused=True,
            )
            c = optim.SGD(model.parameters(),
                          lr=lr,
                          fused=True)
            kwargs = {"lr": lr, "weight_decay": 0.1}
            d = torch.optim.Adam(model.parameters(), foreach=False, fused=True, **kwargs)
            return a, b, c, d
    """)


def test_optimizer_flags_decline_when_set_or_unknowable() -> None:
    assert_declines("optimizer_foreach", """
        import torch
        def build(p):
            return torch.optim.AdamW(p, foreach=True)
    """, "already has foreach=True")
    assert_declines("optimizer_foreach", """
        import torch
        def build(p):
            return torch.optim.AdamW(p, fused=True)
    """, "sets fused=True; foreach and fused cannot both be True")
    assert_declines("optimizer_fused", """
        import torch
        def build(p, use_fused):
            extra = dict(fused=True) if use_fused else dict()
            return torch.optim.AdamW(p, **extra)
    """, "passes **mapping that may set fused/foreach")
    assert_declines("optimizer_fused", """
        import torch
        def build(p):
            return torch.optim.RMSprop(p)
    """, "no torch.optim.Adam/AdamW/SGD constructor")


def test_zero_grad_set_to_none() -> None:
    assert_codemod("zero_grad_set_to_none", """
        import torch

        def step(model, optimizer):
            optimizer.step()
            optimizer.zero_grad()
            model.zero_grad(set_to_none=False)
    """, """
        import torch

        def step(model, optimizer):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
    """)
    assert_declines("zero_grad_set_to_none", """
        import torch
        def step(optimizer):
            optimizer.zero_grad(set_to_none=True)
    """, "already passes set_to_none=True")


@pytest.mark.skipif(not (TINYGPT / "train.py").is_file(), reason="the tinygpt fixture is not there")
def test_which_codemods_fit_the_tinygpt_train_script() -> None:
    # model.py's three (attention, GELU, loss) are checked, with their symbols, by
    # test_tinygpt_patched_model_computes_the_same_loss_and_grads.
    train = (TINYGPT / "train.py").read_text()
    for name, symbols in (("optimizer_foreach", ("build_optimizer",)), ("zero_grad_set_to_none", ("train_step",))):
        result = run_codemod(name, train)
        assert isinstance(result, Rewritten), (name, result)
        assert result.symbols == symbols and result.added_imports == ()

