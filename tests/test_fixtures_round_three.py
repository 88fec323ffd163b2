"""Acceptance on three more public-repo conventions (issue 47), each from its README's command alone:
``init`` -> ``check --run`` ok, naming the clock it times the steps with.

- evalgpt (tutorial single-file GPTs): hard-coded globals, a line only every ``eval_interval`` iterations after an
  evaluation: timed by the bot's own step clock, never by those lines.
- wordlm (PyTorch's word-language-model example): no torch.optim, a hand-written SGD update; its line every
  ``--log-interval`` batches is made one a step on the command.
- widepkg (lucidrains-style packages): ``__init__`` imports every module; the scope holds only what the enwik8
  script reaches.

The whole loop (doctor, ``run --budget-trials 6``, verification) on each is measured in docs/CORPUS.md.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.contract.load import load_contract
from tests.support.repos import commit_tree

pytestmark = [pytest.mark.slow, pytest.mark.side_by_side]  # its checks time nothing: CI runs it beside other tests (./dev)
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BOT = [sys.executable, "-m", "bot"]


def _init_and_check(tmp_path: Path, name: str, command: str, prepare: list[str] | None = None) -> tuple[Path, str]:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, ignore=shutil.ignore_patterns("__pycache__", "input.txt", "*.gz"))
    commit_tree(root)
    if prepare:
        subprocess.run([sys.executable, *prepare], cwd=root, check=True, capture_output=True)
    init = subprocess.run(BOT + ["init", str(root), "--command", command], capture_output=True, text=True)
    assert init.returncode == 0, init.stdout + init.stderr
    commit_tree(root)
    check = subprocess.run(BOT + ["check", str(root), "--run"], capture_output=True, text=True)
    assert check.returncode == 0 and "warning:" not in check.stdout, check.stdout + check.stderr
    return root, check.stdout


def test_a_gpt_that_prints_only_with_its_evaluations_is_timed_by_the_bots_own_clock(tmp_path: Path) -> None:
    root, out = _init_and_check(tmp_path, "evalgpt", "python gpt.py", ["prepare.py"])
    contract = load_contract(root)
    timing = contract.timing
    assert (timing.source, timing.warmup_steps, timing.measured_steps) == ("optimizer", 2, 12)
    assert contract.workload.tokens_per_step == 16 * 32 and not contract.knobs
    assert "clock: the bot's own step clock" in out and "every 500 optimizer steps (eval_interval), after " \
        "estimate_loss()" in out
    assert "ok: the bot's own step clock saw" in out and "(then stopped it)" in out  # not 5,000 iterations


def test_a_hand_written_sgd_update_and_a_package_that_imports_every_module(tmp_path: Path) -> None:
    root, out = _init_and_check(tmp_path, "wordlm", "python main.py --epochs 6")
    contract = load_contract(root)
    assert contract.timing.source == "stdout" and "--log-interval" in contract.workload.args
    assert contract.workload.tokens_per_step == 20 * 35 and set(contract.scope.editable) == {
        "main.py::train_epoch", "model.py::RNNModel"}
    assert out.startswith("ok: contract valid") and "clock: the job's printed lines" in out, out

    root, out = _init_and_check(tmp_path, "widepkg", "python train_enwik8.py", ["data/prepare.py"])
    editable = set(load_contract(root).scope.editable)
    files = {e.split("::")[0] for e in editable}
    assert files == {"tinyformers/tinyformers.py", "tinyformers/autoregressive_wrapper.py"}, editable
    assert {"tinyformers/tinyformers.py::TransformerWrapper", "tinyformers/tinyformers.py::Decoder",
            "tinyformers/autoregressive_wrapper.py::AutoregressiveWrapper"} <= editable
    assert not {"tinyformers/tinyformers.py::Encoder", "tinyformers/tinyformers.py::log"} & editable
    assert "clock: the job's printed lines" in out and "ok: the regex saw" in out
