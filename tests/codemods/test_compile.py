"""torch_compile_model: before/after and what it declines."""

from __future__ import annotations

from tests.support.codemods import assert_codemod, assert_declines


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



def test_compile_after_a_model_picked_from_a_registry_of_architectures() -> None:
    # pytorch/examples' imagenet: the architecture comes from torchvision's namespace, in both branches.
    assert_codemod("torch_compile_model", """
        import torch
        import torchvision.models as models

        def main_worker(args):
            if args.pretrained:
                model = models.__dict__[args.arch](pretrained=True)
            else:
                model = models.__dict__[args.arch]()
            model = torch.nn.DataParallel(model).cuda()
    """, """
        import torch
        import torchvision.models as models

        def main_worker(args):
            if args.pretrained:
                model = models.__dict__[args.arch](pretrained=True)
                model.compile()
            else:
                model = models.__dict__[args.arch]()
                model.compile()
            model = torch.nn.DataParallel(model).cuda()
    """, scope=["main_worker"])


def test_compile_ignores_a_call_picked_from_a_table_of_something_else() -> None:
    assert_declines("torch_compile_model", """
        import torch

        def main(args):
            model = HANDLERS[args.kind](args)
    """, "no `model = <constructor>(...)` assignment")


def test_compile_leaves_registered_factories_to_the_entry_points_create_model() -> None:
    # timm/DeiT: dozens of `@register_model` factories, one of which runs through `create_model(name)`.
    assert_declines("torch_compile_model", """
        import torch
        from timm.models.registry import register_model

        @register_model
        def deit_tiny_patch16_224(pretrained=False, **kwargs):
            model = VisionTransformer(patch_size=16, embed_dim=192, **kwargs)
            return model
    """, "registered model factory")
