"""Scope from the entry point: in a repo whose model is a package inside it (with its own tests/ and several
training scripts, as lucidrains/x-transformers and karpathy/nanochat are laid out), ``editable`` is what the
entry point reaches in the repo's own model code; data, evaluation, logging, checkpoint and timing functions
stay locked with their reason; the catalog lists a patch only where the job runs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from bot.patching.catalog import catalog_for_repo
from bot.patching.reach import analyse
from bot.progress import Ticker
from bot.stages.init.scope_draft import role_of
from infrarsi.contract.load import load_contract
from tests.support.repos import init_repo

MODEL = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Attention(nn.Module):
        def __init__(self, dim, heads=2):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


    class FeedForward(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            return self.net(x)


    class Decoder(nn.Module):
        def __init__(self, dim, depth):
            super().__init__()
            self.layers = nn.ModuleList([nn.ModuleList([Attention(dim), FeedForward(dim)]) for _ in range(depth)])

        def forward(self, x):
            for attn, ff in self.layers:
                x = x + attn(x)
                x = x + ff(x)
            return x


    def exists(v):
        return v is not None
''')

CONV = textwrap.dedent('''
    import torch.nn as nn


    class PatchEmbed(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Conv2d(3, dim, 4, stride=4)

        def forward(self, x):
            return self.proj(x).flatten(2).transpose(1, 2)
''')

TRAIN = textwrap.dedent('''
    import argparse
    import time

    import torch

    from tinyformer.model import Decoder


    def cycle(loader):
        while True:
            for batch in loader:
                yield batch


    def get_dataset(n, seq_len):
        return [torch.randn(seq_len, 16) for _ in range(n)]


    def evaluate(model, data):
        with torch.no_grad():
            return sum(model(x[None]).pow(2).mean().item() for x in data) / len(data)


    def save_checkpoint(model, path):
        torch.save(model.state_dict(), path)


    def step_timer():
        return time.perf_counter()


    def make_optimizer(model, lr):
        return torch.optim.Adam(model.parameters(), lr=lr)


    parser = argparse.ArgumentParser()
    parser.add_argument("--num_batches", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--seq_len", type=int, default=8)
    args = parser.parse_args()
    model = Decoder(16, 2)
    optim = make_optimizer(model, 1e-3)
    data = get_dataset(32, args.seq_len)
    loader = cycle(torch.utils.data.DataLoader(data, batch_size=args.batch_size))
    for i in range(args.num_batches):
        t0 = step_timer()
        loss = model(next(loader)).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {i} loss {loss.item():.4f} dt {step_timer() - t0:.3f}")
        if i % 50 == 0:
            print(f"valid loss {evaluate(model, data[:4]):.4f}")
            save_checkpoint(model, "model.pt")
''')

TEST = textwrap.dedent('''
    import torch
    from tinyformer.model import Decoder

    def test_decoder_shapes():
        opt = torch.optim.Adam(Decoder(16, 1).parameters())
        assert Decoder(16, 1)(torch.randn(1, 4, 16)).shape == (1, 4, 16)
''')


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    files = {"tinyformer/__init__.py": "", "tinyformer/model.py": MODEL, "tinyformer/vision.py": CONV,
             "train_copy.py": TRAIN, "train_parity.py": TRAIN.replace("Decoder(16, 2)", "Decoder(16, 4)"),
             "tests/test_model.py": TEST, "tests/__init__.py": ""}
    init_repo(root, files)
    init = subprocess.run([sys.executable, "-m", "bot", "init", str(root), "--command", "python train_copy.py"],
                          capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    return root


def test_editable_is_what_the_entry_point_reaches_in_the_repos_model_code(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    contract = load_contract(root)
    assert set(contract.scope.editable) == {"tinyformer/model.py::Attention", "tinyformer/model.py::FeedForward",
                                            "tinyformer/model.py::Decoder", "train_copy.py::make_optimizer"}
    text = (root / "infrarsi.toml").read_text()
    for line in ("train_copy.py::get_dataset: builds or splits the dataset", "train_copy.py::evaluate: evaluates",
                 "train_copy.py::save_checkpoint: saves or loads checkpoints", "train_copy.py::step_timer: times steps"):
        assert f"#   {line}" in text, text
    assert "train_parity.py" not in text and "tests/" not in text.split("[scope]")[1].split("[knobs")[0].replace(
        "never tests/", "")


def test_the_catalog_lists_a_patch_only_where_the_job_runs(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    # a hand-widened scope: the other training script, the tests, the unused vision module
    text = (root / "infrarsi.toml").read_text().replace(
        'editable = [', 'editable = ["train_parity.py", "tests/test_model.py", "tinyformer/vision.py", ', 1)
    (root / "infrarsi.toml").write_text(text)
    found = {a.entry.codemod: a for a in catalog_for_repo(load_contract(root))}
    fused = found["optimizer_fused"]
    assert fused.applies and fused.spec is not None and set(fused.spec.targets) == {"train_copy.py::make_optimizer"}
    for path in ("train_parity.py", "tests/test_model.py", "tinyformer/vision.py"):
        assert f"{path}: not examined: nothing on the path from the entry point imports it" in fused.reasons
    assert not found["channels_last"].applies  # the only convolution is in a module the job never imports
    reach = analyse(root, ["python", "train_copy.py"])
    assert reach.modules == frozenset({"train_copy.py", "tinyformer/__init__.py", "tinyformer/model.py"})
    assert "tinyformer/model.py::exists" not in reach.symbols and "tinyformer/model.py::Decoder" in reach.symbols


def test_the_patches_listing_is_json_lines_of_reached_targets(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    out = subprocess.run([sys.executable, "-m", "bot", "patches", str(root), "--json"], capture_output=True,
                         text=True, check=True)
    targets = {t for line in out.stdout.splitlines() for t in json.loads(line)["targets"]}
    assert targets and all(t.startswith(("tinyformer/model.py::", "train_copy.py::")) for t in targets), targets


def test_roles_by_name_and_a_step_timer_by_its_body() -> None:
    assert role_of("create_datasets") == "builds or splits the dataset"
    assert role_of("get_data_loader") is None  # a loader's builder: its workers and pinning are a patch's
    assert role_of("estimate_loss") == "evaluates"
    assert role_of("print0") == "logs or prints"
    assert role_of("get_lr") == "schedules the learning rate"
    assert role_of("tick", "def tick():\n    return time.perf_counter()") == "times steps"
    assert role_of("train", "def train():\n    t0 = time.time()\n    loss.backward()") is None


def test_slow_static_analysis_says_how_far_it_is_on_stderr() -> None:
    stream = io.StringIO()
    ticker = Ticker(label="reading", quiet_s=0.0, every_s=0.0, stream=stream)
    ticker.tick(3, 10, "files")
    ticker.done("10 files read")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("reading: 3/10 files (") and lines[1].startswith("reading: 10 files read (")
    quiet = io.StringIO()
    fast = Ticker(label="reading", stream=quiet)  # a small repo: done before the quiet period, nothing printed
    fast.tick(1, 2)
    fast.done("2 files read")
    assert quiet.getvalue() == ""


VARIANT = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def exists(v):
        return v is not None


    def log(t, eps=1e-20):
        return torch.log(t.clamp(min=eps))


    class XValWrapper(nn.Module):
        def forward(self, x):
            return log(x) if exists(x) else x
''')
ENWIK8 = textwrap.dedent('''
    import os

    import torch

    import tinyformer
    from tinyformer import Decoder as Stack

    assert os.path.exists("train_copy.py")
    model = Stack(16, 2) if torch.log(torch.ones(1)).item() == 0 else tinyformer.FeedForward(16)
    print(model)
''')


def test_a_package_init_that_imports_every_module_reaches_only_what_the_entry_point_uses(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    init = ("from tinyformer.model import Attention, FeedForward, Decoder\n"
            "from tinyformer.xval import XValWrapper\nfrom tinyformer.vision import *\n")
    init_repo(root, {"tinyformer/__init__.py": init, "tinyformer/model.py": MODEL, "tinyformer/xval.py": VARIANT,
                     "tinyformer/vision.py": CONV, "train_enwik8.py": ENWIK8})
    reach = analyse(root, ["python", "train_enwik8.py"])
    assert {"tinyformer/xval.py", "tinyformer/vision.py"} <= set(reach.modules or ())  # imported: their top level runs
    # a name imported by the package and used under an alias, an attribute of the package: reached through the
    # re-export; what only the package's __init__ imports, and namesakes of torch.log and os.path.exists, are not
    assert {"tinyformer/model.py::Decoder", "tinyformer/model.py::FeedForward"} <= reach.symbols
    assert not {s for s in reach.symbols if s.startswith(("tinyformer/xval.py", "tinyformer/vision.py"))}
    assert "tinyformer/model.py::exists" not in reach.symbols
    why = reach.unreached("tinyformer/xval.py", [VARIANT.splitlines().index("def log(t, eps=1e-20):") + 1])
    assert why == "function `log` is never used on the path from the entry point"
    # a dotted string names its definition (instantiate("tinyformer.xval.XValWrapper")), an import by name too
    (root / "train_enwik8.py").write_text(ENWIK8 + 'print("tinyformer.xval.XValWrapper")\n')
    assert "tinyformer/xval.py::XValWrapper" in analyse(root, ["python", "train_enwik8.py"]).symbols
    (root / "train_enwik8.py").write_text(ENWIK8 + "from tinyformer.xval import log\nlog(torch.ones(1))\n")
    assert "tinyformer/xval.py::log" in analyse(root, ["python", "train_enwik8.py"]).symbols
