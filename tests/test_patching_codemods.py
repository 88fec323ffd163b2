"""Every registered codemod: exact before/after (in the style of libcst's ``assertCodemod``),
why it declines code it does not fit, and that the rewrite computes the same function."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from libcst.codemod import CodemodTest

from bot.patching.codemods import REGISTRY, describe, run_codemod
from bot.patching.results import Broken, Declined, Rewritten

norm = CodemodTest.make_fixture_data
ROOT = Path(__file__).resolve().parent.parent
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


# -- the registry -------------------------------------------------------------------

UNRELATED = """
import json
import torch

def load(path):
    with open(path) as f:
        return torch.tensor(json.load(f))

class Config:
    size = 3
"""


def test_registry_has_the_codemods() -> None:
    assert set(REGISTRY) == {
        "sdpa_causal_attention", "fused_gelu", "fused_cross_entropy", "optimizer_foreach", "optimizer_fused",
        "zero_grad_set_to_none", "checkpoint_blocks", "autocast_bf16", "autocast_forward_bf16", "torch_compile_model",
        "dataloader_gpu_settings", "cuda_backend_flags", "grouped_experts", "ddp_no_sync",
    }
    assert all(summary for summary in describe().values())


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_codemod_declines_unrelated_code_and_says_why(name: str) -> None:
    result = run_codemod(name, norm(UNRELATED))
    assert isinstance(result, Declined)
    codemod = REGISTRY[name]
    assert result.reason == codemod.NOT_FOUND or "entry-point" in result.reason


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_codemod_declines_code_without_torch(name: str) -> None:
    result = run_codemod(name, "import numpy as np\nmodel = Net()\nx = 0.5 * y * (1 + np.tanh(y))\n")
    assert isinstance(result, Declined) and "does not import torch" in result.reason


def test_unknown_codemod_and_unparsable_file_are_broken() -> None:
    assert isinstance(run_codemod("nope", "import torch\n"), Broken)
    broken = run_codemod("fused_gelu", "import torch\nC = 0.044715\ndef f(:\n")
    assert isinstance(broken, Broken) and "ParserSyntaxError" in broken.error


# -- a. attention -------------------------------------------------------------------

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


# -- b. GELU ------------------------------------------------------------------------

def test_gelu_tanh_forms() -> None:
    assert_codemod("fused_gelu", """
        import math
        import torch
        import torch.nn.functional as F

        class NewGELU(torch.nn.Module):
            def forward(self, x):
                return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

        def fast_gelu(input):
            return 0.5 * input * (1.0 + torch.tanh(input * 0.7978845608 * (1.0 + 0.044715 * input * input)))

        def pow_gelu(x):
            y = x * (1 + (0.7978845608028654 * (x + 0.044715 * x ** 3)).tanh()) / 2
            return y
    """, """
        import math
        import torch
        import torch.nn.functional as F

        class NewGELU(torch.nn.Module):
            def forward(self, x):
                return F.gelu(x, approximate="tanh")

        def fast_gelu(input):
            return F.gelu(input, approximate="tanh")

        def pow_gelu(x):
            y = F.gelu(x, approximate="tanh")
            return y
    """, symbols=("NewGELU.forward", "fast_gelu", "pow_gelu"))


def test_gelu_erf_form_uses_torch_when_f_is_not_imported() -> None:
    assert_codemod("fused_gelu", """
        import math
        import torch

        def erf_gelu(h):
            return h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))
    """, """
        import math
        import torch

        def erf_gelu(h):
            return torch.nn.functional.gelu(h)
    """)


def test_gelu_declines_impure_operand_and_near_misses() -> None:
    assert_declines("fused_gelu", """
        import torch
        def g(self, x):
            return 0.5 * self.fc(x) * (1.0 + torch.tanh(0.7978845608 * (self.fc(x) + 0.044715 * self.fc(x) ** 3)))
    """, "which is not a plain name")
    assert_declines("fused_gelu", """
        import torch
        def not_gelu(x):
            return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.05 * x ** 3)))
    """, "no hand-written GELU formula")


# -- c. loss ------------------------------------------------------------------------

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


# -- d/e. optimizer -----------------------------------------------------------------

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


# -- f. activation checkpointing ----------------------------------------------------

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


# -- g. autocast --------------------------------------------------------------------

def test_autocast_wraps_forward_and_loss_lines() -> None:
    assert_codemod("autocast_bf16", """
        import torch

        def train_step(model, optimizer, x, y, accum):
            # forward
            logits, loss = model(x, y)
            loss = loss / accum
            loss.backward()
            optimizer.step()
            return loss.item()
    """, """
        import torch

        def train_step(model, optimizer, x, y, accum):
            # forward
            with torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16):
                logits, loss = model(x, y)
                loss = loss / accum
            loss.backward()
            optimizer.step()
            return loss.item()
    """)


def test_autocast_declines_code_already_under_autocast() -> None:
    assert_declines("autocast_bf16", """
        import torch

        def train_step(model, x, y):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y)
            loss.backward()
    """, "already runs under torch.autocast")


# -- h. torch.compile ---------------------------------------------------------------

def test_compile_after_construction() -> None:
    assert_codemod("torch_compile_model", """
        import torch
        from model import GPT

        def main(config):
            model = GPT(config).to("cuda")
            model = model.to(torch.bfloat16)
            return model
    """, """
        import torch
        from model import GPT

        def main(config):
            model = GPT(config).to("cuda")
            model.compile()
            model = model.to(torch.bfloat16)
            return model
    """, scope=["main"])


def test_compile_declines_a_file_that_already_compiles() -> None:
    assert_declines("torch_compile_model", """
        import torch

        def build(args):
            model = GPT(args)
            if args.compile:
                model = torch.compile(model)
            return model
    """, "already calls torch.compile")


def test_compile_ignores_copies_and_traces() -> None:
    assert_declines("torch_compile_model", """
        import copy
        import torch

        def fuse(model):
            fused_model = copy.deepcopy(model)
            return fused_model
    """, "no `model = <constructor>(...)` assignment")


def test_empty_tuple_arguments_do_not_trip_the_matchers() -> None:
    assert_codemod("autocast_bf16", """
        import torch

        def run(model):
            out = model(())
            return out
    """, """
        import torch

        def run(model):
            with torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16):
                out = model(())
            return out
    """)


# -- i. GPU settings ----------------------------------------------------------------

def test_dataloader_gpu_settings() -> None:
    assert_codemod("dataloader_gpu_settings", """
        import torch
        from torch.utils.data import DataLoader

        def loaders(train_ds, val_ds, bs):
            train = DataLoader(train_ds, batch_size=bs, shuffle=True)
            val = DataLoader(val_ds, bs, False, None, None, 2)
            return train, val
    """, """
        import torch
        from torch.utils.data import DataLoader

        def loaders(train_ds, val_ds, bs):
            train = DataLoader(train_ds, batch_size=bs, shuffle=True, pin_memory=torch.cuda.is_available(), num_workers=4 if torch.cuda.is_available() and not isinstance(train_ds, torch.utils.data.IterableDataset) else 0, persistent_workers=torch.cuda.is_available() and not isinstance(train_ds, torch.utils.data.IterableDataset))
            val = DataLoader(val_ds, bs, False, None, None, 2, pin_memory=torch.cuda.is_available(), persistent_workers=True)
            return train, val
    """)
    assert_declines("dataloader_gpu_settings", """
        import torch
        def loader(ds):
            return torch.utils.data.DataLoader(ds, pin_memory=True, num_workers=0, persistent_workers=False)
    """, "already sets pin_memory, num_workers and persistent_workers")


def test_cuda_backend_flags_in_an_entry_script() -> None:
    assert_codemod("cuda_backend_flags", """
        \"\"\"Train.\"\"\"
        import torch


        def main():
            pass


        if __name__ == "__main__":
            main()
    """, """
        \"\"\"Train.\"\"\"
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cudnn.benchmark = True


        def main():
            pass


        if __name__ == "__main__":
            main()
    """, symbols=("<module>",))


def test_cuda_backend_flags_in_a_target_function_skip_flags_already_set() -> None:
    assert_codemod("cuda_backend_flags", """
        import torch

        def main():
            \"\"\"Entry.\"\"\"
            torch.backends.cudnn.benchmark = True
            run()
    """, """
        import torch

        def main():
            \"\"\"Entry.\"\"\"
            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            torch.backends.cudnn.benchmark = True
            run()
    """, scope=["main"])
    assert_declines("cuda_backend_flags", """
        import torch
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        if __name__ == "__main__":
            pass
    """, "already set in this file")


def test_added_import_is_recorded() -> None:
    assert_codemod("autocast_bf16", """
        import numpy as np
        from torch import nn

        class Trainer:
            def step(self, batch):
                out = self.model(batch)
                return out
    """, """
        import numpy as np
        from torch import nn
        import torch

        class Trainer:
            def step(self, batch):
                with torch.autocast(device_type=next(self.model.parameters()).device.type, dtype=torch.bfloat16):
                    out = self.model(batch)
                return out
    """, imports=("import torch",))


# -- the rewrites compute the same thing -------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: thread start-up and contention would cost more than the maths."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_same(actual, expected, *, atol: float = 1e-5, rtol: float = 1e-5, msg: str = "") -> None:
    """Like torch.testing.assert_close, whose first call costs most of a second in imports."""
    assert actual.shape == expected.shape, msg
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), (msg, (actual - expected).abs().max())


def _load(source: str, name: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": name}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - test-only, our own snippets
    return namespace


def _both(name: str, source: str) -> tuple[dict[str, object], dict[str, object]]:
    result = run_codemod(name, norm(source))
    assert isinstance(result, Rewritten), result
    return _load(norm(source), "before"), _load(result.code, "after")


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
    before, after = _both("sdpa_causal_attention", source)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=g) for _ in range(3))
    for fn in ("attend", "scaled"):
        assert_same(after[fn](q, k, v, 7), before[fn](q, k, v, 7), atol=1e-5, rtol=1e-5)


def test_rewritten_gelu_and_loss_compute_the_same() -> None:
    gelu_before, gelu_after = _both("fused_gelu", """
        import math
        import torch

        def tanh_gelu(x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

        def erf_gelu(x):
            return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    """)
    x = torch.linspace(-6, 6, 101)
    for fn in ("tanh_gelu", "erf_gelu"):
        assert_same(gelu_after[fn](x), gelu_before[fn](x), atol=1e-6, rtol=1e-5)

    loss_before, loss_after = _both("fused_cross_entropy", """
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


# -- composition: apply_patches -----------------------------------------------------

from bot.patching.apply import apply_patch, apply_patches  # noqa: E402
from bot.patching.results import Applied, Failed, NotApplicable  # noqa: E402
from infrarsi.patches import Effect, PatchSpec  # noqa: E402

TRAIN = norm("""
    import torch

    def build_optimizer(model):
        return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def train_step(model, optimizer, x, y):
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()
""")
MODEL = norm(NANOGPT_ATTENTION) + norm("""

    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
""")


def _codemod(pid: str, codemod: str, *targets: str, requires: tuple[str, ...] = (),
             conflicts_with: tuple[str, ...] = ()) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=targets, kind="codemod", codemod=codemod,
                     requires=requires, conflicts_with=conflicts_with,
                     effect=Effect(time_ratio=0.9, time_sigma=0.2, mem_ratio=1.0, mem_sigma=0.1, source="test"))


SPECS = [
    _codemod("attn", "sdpa_causal_attention", "model.py::CausalSelfAttention.forward"),
    _codemod("gelu", "fused_gelu", "model.py::gelu"),
    _codemod("foreach", "optimizer_foreach", "train.py::build_optimizer"),
    _codemod("zero", "zero_grad_set_to_none", "train.py::train_step"),
    _codemod("autocast", "autocast_bf16", "train.py::train_step", requires=("zero",)),
]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _fresh(root: Path) -> Path:
    root.mkdir()
    (root / "model.py").write_text(MODEL)
    (root / "train.py").write_text(TRAIN)
    return root


def test_apply_patches_is_deterministic_and_order_independent(tmp_path: Path) -> None:
    forward, backward = _fresh(tmp_path / "a"), _fresh(tmp_path / "b")
    results_a = apply_patches(forward, SPECS)
    results_b = apply_patches(backward, list(reversed(SPECS)))
    assert results_a == results_b
    assert [r.patch_id for r in results_a] == ["attn", "foreach", "gelu", "zero", "autocast"]
    assert all(isinstance(r, Applied) for r in results_a), results_a
    assert _tree(forward) == _tree(backward)
    assert _tree(forward) != {"model.py": MODEL.encode(), "train.py": TRAIN.encode()}


def test_two_patches_in_one_file_commute(tmp_path: Path) -> None:
    one, two = _fresh(tmp_path / "one"), _fresh(tmp_path / "two")
    for spec in (SPECS[0], SPECS[1]):
        assert isinstance(apply_patch(one, spec), Applied)
    for spec in (SPECS[1], SPECS[0]):
        assert isinstance(apply_patch(two, spec), Applied)
    assert _tree(one) == _tree(two)


def test_conflicts_and_requirements_are_settled_first(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "r")
    fused = _codemod("fused", "optimizer_fused", "train.py::build_optimizer", conflicts_with=("foreach",))
    needs = _codemod("needs", "fused_gelu", "model.py::gelu", requires=("absent",))
    results = {r.patch_id: r for r in apply_patches(root, [SPECS[2], fused, needs, SPECS[1]])}
    assert isinstance(results["foreach"], NotApplicable) and "conflicts with fused" in results["foreach"].reason
    assert isinstance(results["fused"], NotApplicable) and "conflicts with foreach" in results["fused"].reason
    assert isinstance(results["needs"], NotApplicable) and "requires absent" in results["needs"].reason
    assert isinstance(results["gelu"], Applied)
    assert (root / "train.py").read_text() == TRAIN


def test_single_patch_checks_what_is_already_applied(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "s")
    autocast = SPECS[4]
    assert isinstance(apply_patch(root, autocast), NotApplicable)
    assert isinstance(apply_patch(root, autocast, applied={"zero"}), Applied)
    clash = _codemod("x", "fused_gelu", "model.py::gelu", conflicts_with=("attn",))
    result = apply_patch(root, clash, applied={"attn"})
    assert isinstance(result, NotApplicable) and "conflicts with attn" in result.reason


def test_a_patch_failing_in_one_file_writes_no_file(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "t")
    (root / "bad.py").write_text("import torch\nC = 0.044715\ndef f(:\n")
    spec = _codemod("mixed", "fused_gelu", "model.py::gelu", "bad.py")
    result = apply_patch(root, spec)
    assert isinstance(result, Failed) and "bad.py" in result.error
    assert (root / "model.py").read_text() == MODEL


def test_requirement_cycles_and_unknown_codemods_are_values(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "c")
    a = _codemod("a", "fused_gelu", "model.py::gelu", requires=("b",))
    b = _codemod("b", "optimizer_foreach", "train.py::build_optimizer", requires=("a",))
    unknown = _codemod("u", "no_such_codemod", "model.py")
    results = {r.patch_id: r for r in apply_patches(root, [a, b, unknown])}
    assert isinstance(results["a"], NotApplicable) and "cycle" in results["a"].reason
    assert isinstance(results["u"], Failed) and "no codemod named" in results["u"].error


@pytest.mark.skipif(not (TINYGPT / "train.py").is_file(), reason="the tinygpt fixture is not there")
def test_which_codemods_fit_the_tinygpt_train_script() -> None:
    # model.py's three (attention, GELU, loss) are checked, with their symbols, by
    # test_tinygpt_patched_model_computes_the_same_loss_and_grads.
    train = (TINYGPT / "train.py").read_text()
    for name, symbols in (("optimizer_foreach", ("build_optimizer",)), ("zero_grad_set_to_none", ("train_step",))):
        result = run_codemod(name, train)
        assert isinstance(result, Rewritten), (name, result)
        assert result.symbols == symbols and result.added_imports == ()


def test_a_codemod_target_that_does_not_exist_is_named(tmp_path: Path) -> None:
    root = _fresh(tmp_path / "m")
    result = apply_patch(root, _codemod("g", "fused_gelu", "model.py::gelu_fast"))
    assert isinstance(result, NotApplicable)
    assert result.reason.startswith("model.py: no definition named 'gelu_fast' in this file")


def test_a_parameter_shadowing_an_import_is_not_mistaken_for_it() -> None:
    # `torch` here is a parameter, so `torch.tanh` is whatever the caller passed in.
    assert_declines("fused_gelu", """
        import math
        import torch

        def gelu(x, torch):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    """, "no hand-written GELU formula")


def test_module_scope_round_trips_through_reported_symbols() -> None:
    # Rewritten.symbols says `<module>` for module-level edits; given back as the scope, it allows them.
    source = norm("""
        import torch

        def main():
            pass

        if __name__ == "__main__":
            main()
    """)
    first = run_codemod("cuda_backend_flags", source)
    assert isinstance(first, Rewritten) and first.symbols == ("<module>",)
    again = run_codemod("cuda_backend_flags", source, scope=list(first.symbols))
    assert isinstance(again, Rewritten) and again.code == first.code
    assert isinstance(run_codemod("cuda_backend_flags", source, scope=["main.helper"]), Declined)
