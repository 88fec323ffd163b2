"""The tinygpt fixture's model patched by three codemods computes the same loss and gradients."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from bot.patching.codemods import run_codemod
from bot.patching.results import Rewritten
from tests.support.codemods import TINYGPT, assert_same


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


@pytest.mark.skipif(not (TINYGPT / "model.py").is_file(), reason="the tinygpt fixture is not there")
def test_tinygpt_patched_model_computes_the_same_loss_and_grads(tmp_path: Path) -> None:
    shutil.copy(TINYGPT / "model.py", tmp_path / "model.py")
    source = (tmp_path / "model.py").read_text()
    # checkpoint_blocks is left out: its first call imports torch._dynamo (seconds), and
    # equality under non-reentrant checkpointing is torch's own guarantee.
    scopes = {"sdpa_causal_attention": ["CausalSelfAttention.forward"], "fused_gelu": ["gelu_tanh"],
              "fused_cross_entropy": ["GPT.forward"]}
    for name, scope in scopes.items():
        result = run_codemod(name, source, scope=scope)
        assert isinstance(result, Rewritten), (name, result)
        assert result.symbols == tuple(scope) and result.added_imports == ()
        source = result.code
    (tmp_path / "patched.py").write_text(source)
    base = _import(tmp_path / "model.py", "tinygpt_base")
    patched = _import(tmp_path / "patched.py", "tinygpt_patched")

    config = dict(vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=32)
    torch.manual_seed(0)
    model_a = base.GPT(base.GPTConfig(**config))
    torch.manual_seed(0)
    model_b = patched.GPT(patched.GPTConfig(**config))
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, 64, (3, 16), generator=g)
    targets = torch.randint(0, 64, (3, 16), generator=g)
    loss_a, loss_b = model_a(idx, targets), model_b(idx, targets)
    assert_same(loss_b, loss_a, atol=1e-5, rtol=1e-5)
    loss_a.backward()
    loss_b.backward()
    for (name, p_a), (_, p_b) in zip(model_a.named_parameters(), model_b.named_parameters()):
        assert_same(p_b.grad, p_a.grad, atol=1e-5, rtol=1e-4, msg=name)

