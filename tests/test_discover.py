"""bot.stages.init.discover: each config convention's readers, and how ``discover`` merges them.

The conventions table over whole scripts is in tests/test_init_conventions.py; these are the readers' own rules."""
from __future__ import annotations

from pathlib import Path

import libcst as cst

from bot.stages.init.discover import (TRAINING_ARGUMENTS, discover, read_argparse, read_code_constants, read_env,
                                      read_globals, read_hf)


def test_argparse_switches_default_to_the_opposite_of_their_action() -> None:
    src = ('p.add_argument("--fast", action="store_true")\n'
           'p.add_argument("--no-pin", dest="pin", action="store_false")\n'
           'p.add_argument("--workers", type=int, default=2)\n')
    got = {s.key: (s.passing, s.token, s.default, s.has_default, s.type) for s in read_argparse(src)}
    assert got == {"fast": ("switch", "--fast", False, True, "bool"), "pin": ("switch", "--no-pin", True, True, "bool"),
                   "workers": ("flag-space", "--workers", 2, True, "int")}


def test_environment_variables_skip_the_launchers_and_secrets_and_cast_their_defaults() -> None:
    src = ('import os\nthreads = int(os.environ.get("OMP_NUM_THREADS", "4"))\nrank = os.environ["LOCAL_RANK"]\n'
           'key = os.getenv("WANDB_API_KEY")\ntok = os.getenv("MY_TOKEN", "x")\nmode = os.getenv("MODE")\n'
           'again = os.getenv("OMP_NUM_THREADS", "8")\n')
    got = {s.key: (s.default, s.has_default, s.type) for s in read_env(src)}
    assert got == {"OMP_NUM_THREADS": (4, True, "int"), "MODE": (None, False, None)}


def test_only_globals_before_the_configurator_can_be_overridden() -> None:
    src = ("batch_size = 12\nlearning_rate = 6e-4\ndevice = get_device()\n_private = 1\n"
           "exec(open('configurator.py').read())\nafter = 3\n")
    got = {s.key: (s.token, s.default, s.has_default) for s in read_globals(src, cst.parse_module(src))}
    assert got == {"batch_size": ("--batch_size", 12, True), "learning_rate": ("--learning_rate", 6e-4, True),
                   "device": ("--device", "get_device()", False)}
    assert read_globals("batch_size = 12\n", cst.parse_module("batch_size = 12\n")) == []


def test_hf_dataclass_fields_and_the_training_arguments_are_read() -> None:
    src = ("from dataclasses import dataclass, field\nfrom transformers import HfArgumentParser, TrainingArguments\n"
           "@dataclass\nclass ModelArgs:\n    block_size: int = 128\n"
           "    model_name: str = field(default='gpt2')\n"
           "parser = HfArgumentParser((ModelArgs, TrainingArguments))\n")
    got = {s.key: s.default for s in read_hf(src, cst.parse_module(src))}
    assert got["block_size"] == 128 and got["model_name"] == "gpt2"
    assert {k: got[k] for k in TRAINING_ARGUMENTS} == TRAINING_ARGUMENTS
    assert read_hf("x = 1\n", cst.parse_module("x = 1\n")) == []


def test_a_script_with_no_settings_offers_its_constants_as_code() -> None:
    src = "B = 64\ntotal_batch_size = 524288 # 2**19, in number of tokens\n_hidden = 1\nmodel = GPT()\n"
    got = {s.key: (s.default, s.passing, s.help) for s in read_code_constants(cst.parse_module(src))}
    assert got == {"B": (64, "code", ""), "total_batch_size": (524288, "code", "2**19, in number of tokens")}


def test_discover_puts_argparse_first_and_drops_a_key_read_twice(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text('import os, argparse\np = argparse.ArgumentParser()\n'
                                       'p.add_argument("--MODE", default="a")\n'
                                       'workers = os.getenv("WORKERS", 2)\nm = os.getenv("MODE")\n')
    got = [(s.key, s.convention) for s in discover(tmp_path, "train.py")]
    assert got == [("MODE", "argparse"), ("WORKERS", "env")]


def test_discover_without_an_entry_or_with_one_that_does_not_parse_is_empty(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def (:\n")
    assert discover(tmp_path, None) == []
    assert discover(tmp_path, "missing.py") == []
    assert discover(tmp_path, "bad.py") == []


def test_discover_falls_back_to_code_constants(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("B = 64\nT = 1024\n")
    assert [(s.key, s.convention) for s in discover(tmp_path, "train.py")] == [("B", "code"), ("T", "code")]
