"""The reach analysis: dead branches and unreached functions are proven, everything else stays eligible."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.patching.catalog import catalog_for_repo
from bot.patching.reach import analyse
from infrarsi.contract import load_contract
from tests.support.tinygpt import infrarsi

pytestmark = pytest.mark.side_by_side  # its checks time nothing: CI runs it beside other tests (./dev)

# The shapes of nanoGPT's model.py and train.py (karpathy/nanoGPT): SDPA behind `if self.flash:` with the
# hand-written attention as a fallback, a model also built inside a `from_pretrained` classmethod, and a
# module-global configuration overridden by `--key=value` through an exec'd configurator.
MODEL = '''
import math
import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.n_head = n_head
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)


class GPT(nn.Module):
    def __init__(self, d=32, n_head=2, vocab=64):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.attn = CausalSelfAttention(d, n_head)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        logits = self.head(self.attn(self.wte(idx)))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @classmethod
    def from_pretrained(cls, name):
        model = GPT()
        return model

    def unused_helper(self):
        return 0
'''

TRAIN = '''
import torch
from model import GPT

init_from = 'scratch'
steps = 4
exec(open('configurator.py').read())

if init_from == 'scratch':
    model = GPT()
elif init_from.startswith('gpt2'):
    model = GPT.from_pretrained(init_from)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(steps):
    x = torch.randint(0, 64, (2, 16))
    _, loss = model(x, x)
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")
'''

CONFIGURATOR = '''
import sys
from ast import literal_eval
for arg in sys.argv[1:]:
    key, val = arg[2:].split('=')
    try:
        globals()[key] = literal_eval(val)
    except (SyntaxError, ValueError):
        globals()[key] = val
'''


def write_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in {"model.py": MODEL, "train.py": TRAIN, "configurator.py": CONFIGURATOR}.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def lines_of(path: Path, needle: str) -> list[int]:
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line]


def test_a_fallback_branch_and_an_unreached_classmethod_are_dead(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo")
    reach = analyse(repo, ["python", "train.py"])
    fallback = lines_of(repo / "model.py", "att = F.softmax")
    assert reach.unreached("model.py", fallback) == "the `else` of `if self.flash:`, which is always true"
    pretrained = lines_of(repo / "model.py", "model = GPT()")
    assert "GPT.from_pretrained" in (reach.unreached("model.py", pretrained) or "")
    assert "GPT.unused_helper" in (reach.unreached("model.py", lines_of(repo / "model.py", "return 0")) or "")
    # What does run stays eligible: the SDPA line, the model's forward, the training loop.
    assert reach.unreached("model.py", lines_of(repo / "model.py", "scaled_dot_product_attention(q")) is None
    assert reach.unreached("model.py", lines_of(repo / "model.py", "logits = self.head")) is None
    assert reach.unreached("train.py", lines_of(repo / "train.py", "loss.backward()")) is None


def test_torch_is_asked_of_the_jobs_interpreter_and_an_unanswered_question_decides_nothing(tmp_path: Path) -> None:
    """``hasattr(torch.…)`` is the job's torch's answer, not the bot's (which may have none): an interpreter that
    cannot answer (here: none at that path) leaves the branch undecided, so both sides stay eligible."""
    repo = write_repo(tmp_path / "repo")
    reach = analyse(repo, [str(tmp_path / "bin" / "python3.99"), "train.py"])
    assert reach.unreached("model.py", lines_of(repo / "model.py", "return 0"))  # the rest is still decided
    assert reach.unreached("model.py", lines_of(repo / "model.py", "att = F.softmax")) is None
    assert reach.unreached("model.py", lines_of(repo / "model.py", "scaled_dot_product_attention(q")) is None


def test_the_commands_overrides_decide_the_branch(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo")
    reach = analyse(repo, ["python", "train.py", "--init_from=gpt2"])
    assert reach.unreached("model.py", lines_of(repo / "model.py", "model = GPT()")) is None
    assert reach.unreached("train.py", lines_of(repo / "train.py", "    model = GPT()")) is not None


@pytest.mark.parametrize("knobs", [{"init_from"}, set()])
def test_a_knob_or_an_unknown_condition_leaves_the_branch_eligible(tmp_path: Path, knobs: set[str]) -> None:
    repo = write_repo(tmp_path / "repo")
    if not knobs:  # make the condition depend on the environment: nothing can decide it
        train = repo / "train.py"
        train.write_text(train.read_text().replace("init_from = 'scratch'",
                                                   "import os\ninit_from = os.environ.get('INIT', 'scratch')"))
    reach = analyse(repo, ["python", "train.py"], knobs=knobs)
    assert reach.unreached("model.py", lines_of(repo / "model.py", "model = GPT()")) is None


def test_a_string_reference_in_a_config_file_keeps_a_class_reached(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo")
    (repo / "conf.yaml").write_text("model:\n  _target_: model.GPT.unused_helper\n")
    reach = analyse(repo, ["python", "train.py"])
    assert reach.unreached("model.py", lines_of(repo / "model.py", "return 0")) is None


def test_the_contract_naming_every_symbol_does_not_keep_them_reached(tmp_path: Path) -> None:
    # infrarsi.toml's editable scope lists `model.py::GPT.unused_helper`: InfraRSI's file, not the job's config
    repo = write_repo(tmp_path / "repo")
    (repo / "infrarsi.toml").write_text('[scope]\neditable = ["model.py::GPT.unused_helper"]\n')
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.infrarsi.scope]\n'
                                         'editable = ["model.py::GPT.unused_helper"]\n')
    reach = analyse(repo, ["python", "train.py"])
    assert "GPT.unused_helper" in (reach.unreached("model.py", lines_of(repo / "model.py", "return 0")) or "")


# kuangliu/pytorch-cifar: main.py star-imports models/, whose files each end with a `test()` self-check
# under `if __name__ == '__main__':`, and defines its own `test(epoch)`, which is the one it calls.
CIFAR_MAIN = """
from models import *

net = SimpleDLA()


def test(epoch):
    return net


for epoch in range(2):
    test(epoch)
"""
CIFAR_MODEL = """
import torch.nn as nn


class SimpleDLA(nn.Module):
    def forward(self, x):
        return x


def test():
    net = SimpleDLA()
    print(net)


if __name__ == '__main__':
    test()
"""


def test_a_local_def_shadows_a_star_import_and_an_imported_modules_main_guard_is_dead(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "main.py").write_text(textwrap.dedent(CIFAR_MAIN).lstrip())
    (repo / "models" / "__init__.py").write_text("from .dla_simple import *\n")
    (repo / "models" / "dla_simple.py").write_text(textwrap.dedent(CIFAR_MODEL).lstrip())
    reach = analyse(repo, ["python", "main.py"])
    model = repo / "models" / "dla_simple.py"
    assert "function `test`" in (reach.unreached("models/dla_simple.py", lines_of(model, "print(net)")) or "")
    assert reach.unreached("models/dla_simple.py", lines_of(model, "return x")) is None
    assert reach.unreached("main.py", lines_of(repo / "main.py", "return net")) is None
    # the same self-check stays reached where main.py imports the name itself
    (repo / "main.py").write_text("from models.dla_simple import test\n" + (repo / "main.py").read_text()
                                  .replace("def test(epoch):\n    return net\n", ""))
    reach = analyse(repo, ["python", "main.py"])
    assert reach.unreached("models/dla_simple.py", lines_of(model, "print(net)")) is None


# karpathy/minGPT's CfgNode.merge_from_args walks the config with getattr(obj, k) and sets with setattr:
# nothing it fetches is called, so it dispatches to no method. A getattr whose result is called does.
CONFIG_WALK = '''
def merge(cfg, key, val):
    obj = cfg
    for k in key.split('.')[:-1]:
        obj = getattr(obj, k)
    setattr(obj, key.split('.')[-1], val)
    return hasattr(obj, key)
'''
DISPATCH = '''
def merge(cfg, key, val):
    hook = getattr(cfg, key)
    hook(val)
'''


@pytest.mark.parametrize(("helper", "dead"), [(CONFIG_WALK, True), (DISPATCH, False),
                                              ("def merge(cfg, key, val):\n    getattr(cfg, key)(val)\n", False)])
def test_only_a_getattr_whose_result_is_called_keeps_every_method_alive(tmp_path: Path, helper: str,
                                                                       dead: bool) -> None:
    repo = write_repo(tmp_path / "repo")
    (repo / "cfg.py").write_text(textwrap.dedent(helper).lstrip())
    train = repo / "train.py"
    train.write_text("from cfg import merge\nmerge(object(), 'a', 1)\n" + train.read_text())
    reach = analyse(repo, ["python", "train.py"])
    found = reach.unreached("model.py", lines_of(repo / "model.py", "return 0"))
    assert (found is not None) is dead


@pytest.mark.slow
def test_the_catalog_says_does_not_apply_for_unreached_targets_and_offers_what_runs(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo")
    result = infrarsi("init", str(repo), "--command", "python train.py", "--tokens-per-step", "32")
    assert result.returncode == 0, result.stderr
    found = {a.entry.codemod: a for a in catalog_for_repo(load_contract(repo))}
    sdpa = found["sdpa_causal_attention"]
    assert not sdpa.applies and any("not reached from the entry point" in r and "self.flash" in r
                                    for r in sdpa.reasons), sdpa.reasons
    compile_ = found["torch_compile_model"]
    assert not compile_.applies and any("GPT.from_pretrained" in r for r in compile_.reasons), compile_.reasons
    assert found["autocast_forward_bf16"].applies
