"""torch_compile_model: before/after and what it declines."""

from __future__ import annotations

from tests.codemods.support import assert_codemod, assert_declines


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

