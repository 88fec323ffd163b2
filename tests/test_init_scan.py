"""bot.stages.init.scan: a repo read statically with libcst — argparse flags, and what each file defines."""
from __future__ import annotations

from pathlib import Path

from bot.stages.init.scan import python_files, scan_flags, scan_repo

FLAGS = '''import argparse
p = argparse.ArgumentParser()
p.add_argument("--batch-size", "-b", type=int, default=32, help="rows per step")
p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
p.add_argument("--lr", dest="learning_rate", type=float, default=-3e-4)
p.add_argument("--fast", action="store_true")
p.add_argument("data")  # positional: not a flag
'''

MODEL = '''import torch.nn as nn
from torch import nn as tnn
from transformers import GPT2LMHeadModel, TrainingArguments

class Block(nn.Module):
    pass

class GPT(Block):
    pass

class Wrapped(GPT2LMHeadModel):
    pass

class Args(TrainingArguments):
    pass

class Plain:
    pass

def train(model, loader):
    opt = torch.optim.AdamW(model.parameters())
    loss.backward()

def helper():
    return 1
'''


def test_every_flag_is_read_with_its_dest_type_default_choices_and_aliases() -> None:
    flags = {f.flag: f for f in scan_flags(FLAGS)}
    assert list(flags) == ["--batch-size", "--dtype", "--lr", "--fast"]
    b = flags["--batch-size"]
    assert (b.dest, b.type, b.default, b.has_default, b.help, b.aliases, b.line) == (
        "batch_size", "int", 32, True, "rows per step", ("-b",), 3)
    assert flags["--dtype"].choices == ("fp32", "bf16")
    assert (flags["--lr"].dest, flags["--lr"].default) == ("learning_rate", -3e-4)
    assert (flags["--fast"].action, flags["--fast"].has_default) == ("store_true", False)


def test_model_classes_are_judged_by_where_their_base_comes_from(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(FLAGS + "args = p.parse_args()\n")
    summary = scan_repo(tmp_path, "train.py")
    model = summary.file("model.py")
    assert model is not None
    assert model.modules == ("Block", "GPT", "Wrapped")  # GPT derives from the repo's own Block
    assert model.classes == ("Block", "GPT", "Wrapped", "Args", "Plain")
    assert (model.functions, model.trains) == (("train", "helper"), ("train",))
    assert model.is_script is False
    train = summary.file("train.py")
    assert train is not None and train.is_script
    assert [f.flag for f in summary.flags] == ["--batch-size", "--dtype", "--lr", "--fast"]


def test_vendored_and_state_folders_are_skipped_and_bad_files_dropped(tmp_path: Path) -> None:
    for rel in ("a.py", "pkg/b.py", ".venv/lib/c.py", "node_modules/d.py", ".infrarsi/e.py", "broken.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    assert [p.relative_to(tmp_path).as_posix() for p in python_files(tmp_path)] == ["a.py", "broken.py", "pkg/b.py"]
    summary = scan_repo(tmp_path, None)
    assert [f.path for f in summary.files] == ["a.py", "pkg/b.py"]
    assert summary.flags == ()


def test_an_entry_that_does_not_parse_or_exist_has_no_flags(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("def (:\n")
    assert scan_repo(tmp_path, "train.py").flags == ()
    assert scan_repo(tmp_path, "missing.py").flags == ()


def test_the_probe_and_timing_are_noticed(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("import time\nfrom infrarsi import probe\nt = time.perf_counter()\n")
    f = scan_repo(tmp_path, None).files[0]
    assert (f.uses_timing, f.uses_probe, f.lines) == (True, True, 4)
