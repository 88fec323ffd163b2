"""fused_gelu: before/after, what it declines, and that the rewrite computes the same."""

from __future__ import annotations

import torch

from tests.support.codemods import assert_codemod, assert_declines, assert_same, both


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


def test_a_parameter_shadowing_an_import_is_not_mistaken_for_it() -> None:
    # `torch` here is a parameter, so `torch.tanh` is whatever the caller passed in.
    assert_declines("fused_gelu", """
        import math
        import torch

        def gelu(x, torch):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    """, "no hand-written GELU formula")



def test_rewritten_gelu_computes_the_same() -> None:
    gelu_before, gelu_after = both("fused_gelu", """
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
