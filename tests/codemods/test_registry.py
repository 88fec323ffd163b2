"""The codemod registry: every codemod is registered, declines code it does not fit and says why."""

from __future__ import annotations

import pytest

from bot.patching.codemods import REGISTRY, describe, run_codemod
from bot.patching.results import Broken, Declined
from tests.support.codemods import norm


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
        "hf_bf16", "hf_fused_optim", "hf_torch_compile", "lightning_bf16_precision",
        "channels_last", "autocast_fp16_scaler", "hf_tf32", "lightning_benchmark",
    }
    assert all(summary for summary in describe().values())


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_codemod_declines_unrelated_code_and_says_why(name: str) -> None:
    result = run_codemod(name, norm(UNRELATED))
    assert isinstance(result, Declined)
    codemod = REGISTRY[name]
    # The framework codemods look for the framework's import, not torch's.
    assert result.reason == codemod.NOT_FOUND or "entry-point" in result.reason or \
        result.reason.startswith("the file does not import")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_codemod_declines_code_without_torch(name: str) -> None:
    result = run_codemod(name, "import numpy as np\nmodel = Net()\nx = 0.5 * y * (1 + np.tanh(y))\n")
    assert isinstance(result, Declined) and "does not import" in result.reason


def test_unknown_codemod_and_unparsable_file_are_broken() -> None:
    assert isinstance(run_codemod("nope", "import torch\n"), Broken)
    broken = run_codemod("fused_gelu", "import torch\nC = 0.044715\ndef f(:\n")
    assert isinstance(broken, Broken) and "ParserSyntaxError" in broken.error

