"""channels_last: before/after on the shapes image models are written in, what it declines, that the
patched model computes the same outputs, and that a convolutional class the entry point never uses does
not apply."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from bot.patching.catalog import catalog_for_repo
from infrarsi.contract import load_contract
from tests.support.codemods import assert_codemod, assert_declines, assert_same, both

NAME = "channels_last"

# A ResNet-style classifier: blocks built by the root model, the stem's conv in the root itself
# (the shape of torchvision's and timm's ResNets, shrunk).
RESNET = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class BasicBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(x + self.bn1(self.conv1(x)))

    class ResNet(nn.Module):
        def __init__(self, c=8, num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, c, 3, padding=1, bias=False)
            self.layer1 = nn.Sequential(BasicBlock(c), BasicBlock(c))
            self.fc = nn.Linear(c, num_classes)

        def forward(self, x):
            \"\"\"Class logits for a batch of images.\"\"\"
            # stem
            x = self.conv1(x)
            x = self.layer1(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
"""

RESNET_AFTER = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class BasicBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(x + self.bn1(self.conv1(x)))

    class ResNet(nn.Module):
        def __init__(self, c=8, num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, c, 3, padding=1, bias=False)
            self.layer1 = nn.Sequential(BasicBlock(c), BasicBlock(c))
            self.fc = nn.Linear(c, num_classes)
            self.to(memory_format=torch.channels_last)

        def forward(self, x):
            \"\"\"Class logits for a batch of images.\"\"\"
            if isinstance(x, torch.Tensor) and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            # stem
            x = self.conv1(x)
            x = self.layer1(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
"""


def test_converts_the_root_model_once_and_its_input_at_the_top_of_forward() -> None:
    assert_codemod(NAME, RESNET, RESNET_AFTER, symbols=("ResNet.__init__", "ResNet.forward"))


def test_a_model_whose_convolutions_sit_in_its_blocks_only_is_still_convolutional() -> None:
    # The root builds no conv itself; `from torch import nn` and the conv reached through a block.
    assert_codemod(NAME, """
        import torch
        from torch import nn

        class Stage(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.ConvTranspose2d(4, 4, 2)

            def forward(self, x):
                return self.conv(x)

        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.stage = Stage()

            def forward(self, z):
                return self.stage(z)
    """, """
        import torch
        from torch import nn

        class Stage(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.ConvTranspose2d(4, 4, 2)

            def forward(self, x):
                return self.conv(x)

        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.stage = Stage()
                self.to(memory_format=torch.channels_last)

            def forward(self, z):
                if isinstance(z, torch.Tensor) and z.dim() == 4:
                    z = z.contiguous(memory_format=torch.channels_last)
                return self.stage(z)
    """, symbols=("Decoder.__init__", "Decoder.forward"))


def test_a_3d_model_gets_the_5d_format() -> None:
    assert_codemod(NAME, """
        import torch.nn as nn

        class Video(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv3d(3, 8, 3)

            def forward(self, clip):
                return self.conv(clip)
    """, """
        import torch.nn as nn
        import torch

        class Video(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv3d(3, 8, 3)
                self.to(memory_format=torch.channels_last_3d)

            def forward(self, clip):
                if isinstance(clip, torch.Tensor) and clip.dim() == 5:
                    clip = clip.contiguous(memory_format=torch.channels_last_3d)
                return self.conv(clip)
    """, imports=("import torch",))


@pytest.mark.parametrize("source,reason", [
    # A transformer: no convolution, nothing for the layout to buy.
    ("""
        import torch.nn as nn
        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
            def forward(self, x):
                return self.fc(x)
    """, "no nn.Module subclass of the file builds nn.Conv2d/nn.Conv3d"),
    # A `Conv2d` of the user's own, not torch's.
    ("""
        import torch
        from mylayers import Conv2d
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = Conv2d(3, 8, 3)
            def forward(self, x):
                return self.conv(x)
    """, "no nn.Module subclass of the file builds nn.Conv2d/nn.Conv3d"),
    # timm's train.py: the user's own --channels-last switch decides it.
    ("""
        import torch
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
            def forward(self, x):
                return self.conv(x)
        def main(args):
            model = Net()
            if args.channels_last:
                model.to(memory_format=torch.channels_last)
    """, "already uses the channels-last memory format"),
    ("""
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Conv2d(3, 8, 3)
                self.b = nn.Conv3d(8, 8, 3)
            def forward(self, x):
                return self.b(self.a(x).unsqueeze(2))
    """, "mixes 2-D and 3-D convolutions"),
    ("""
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
            def forward(self, *inputs):
                return self.conv(inputs[0])
    """, "takes no positional input to convert"),
    # a transformer's attention module with a 1x1 convolution for its projections, built by a model in
    # another file (so a root here): its input is a (B, T, C) sequence, the layout buys nothing
    ("""
        import torch
        import torch.nn as nn
        class Attention(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.qkv = nn.Conv2d(c, 3 * c, 1)
            def forward(self, x):
                q, k, v = self.qkv(x[..., None]).squeeze(-1).chunk(3, dim=1)
                return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
    """, "builds nn.Conv2d/nn.Conv3d layers outside an attention module"),
    # lucidrains/x-transformers: talking heads are a 1x1 Conv2d over the attention map, inside the attention
    # module; the encoder-decoder built of it is not a convolutional model
    ("""
        import torch
        import torch.nn as nn
        class Attention(nn.Module):
            def __init__(self, heads):
                super().__init__()
                self.talking_heads = nn.Conv2d(heads, heads, 1, bias=False)
            def forward(self, x):
                return self.talking_heads(torch.softmax(x @ x.transpose(-2, -1), dim=-1)) @ x
        class XTransformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = Attention(4)
            def forward(self, x):
                return self.encoder(x)
    """, "no nn.Module subclass of the file builds nn.Conv2d/nn.Conv3d"),
], ids=["no-conv", "not-torchs-conv", "already", "2d-and-3d", "no-input", "attention", "conv-inside-attention"])
def test_declines(source: str, reason: str) -> None:
    assert_declines(NAME, source, reason)


def test_both_methods_must_be_in_the_targets() -> None:
    assert_declines(NAME, RESNET, "ResNet.__init__ is outside the patch targets", scope=["ResNet.forward"])


def test_the_patched_model_computes_the_same_outputs_with_channels_last_weights() -> None:
    before, after = both(NAME, RESNET)
    torch.manual_seed(0)
    a = before["ResNet"]()
    b = after["ResNet"]()
    b.load_state_dict(a.state_dict())  # copied into the channels-last parameters, layout kept
    assert b.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert b.layer1[0].conv1.weight.is_contiguous(memory_format=torch.channels_last)
    images = torch.randn(2, 3, 8, 8)
    assert_same(b(images), a(images), atol=1e-5, rtol=1e-4)


# A repo whose training command uses an MLP; the convolutional class beside it is never built.
_CONTRACT = """
    version = 1

    [workload]
    command = "python train.py"
    tokens_per_step = 32

    [timing]
    warmup_steps = 1
    measured_steps = 2

    [scope]
    editable = ["model.py", "train.py"]
    locked = []
"""
_MODEL = """
    import torch.nn as nn


    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)


    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.conv(x).mean((2, 3))
"""
_TRAIN = """
    import torch
    from model import MLP

    model = MLP()
    for step in range(2):
        model(torch.randn(8, 4)).square().mean().backward()
"""


def write_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in {"infrarsi.toml": _CONTRACT, **files}.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def test_a_convolutional_class_the_entry_point_never_uses_does_not_apply(tmp_path: Path) -> None:
    repo = write_repo(tmp_path, {"model.py": _MODEL, "train.py": _TRAIN})
    found = {a.entry.codemod: a for a in catalog_for_repo(load_contract(repo))}[NAME]
    assert not found.applies
    assert any("does not apply: not reached from the entry point" in r and "SmallCNN" in r
               for r in found.reasons), found.reasons
    # Once the command trains it, the same class is the target.
    repo = write_repo(tmp_path, {"train.py": _TRAIN.replace("MLP", "SmallCNN").replace("(8, 4)", "(8, 3, 6, 6)")})
    found = {a.entry.codemod: a for a in catalog_for_repo(load_contract(repo))}[NAME]
    assert found.applies and found.spec is not None
    assert found.spec.targets == ("model.py::SmallCNN.__init__", "model.py::SmallCNN.forward")
