"""Acceptance on fixtures laid out the way public repos are, each from its README's command alone:
``init`` -> ``check --run`` ok -> a baseline ``trial`` ok.

- chargpt (karpathy/minGPT's layout): ``cd projects/chargpt && python chargpt.py`` opens ``input.txt`` beside
  itself, an untracked download; the model is a package with its own ``tests/`` and a second project.
- makenames (karpathy/makemore): ``--max-steps -1`` trains forever, a line every 10 steps, and the sequence
  length is the longest line of ``names.txt`` + 1.
- pkgchat (karpathy/nanochat): ``bash runs/runcpu.sh`` whose last command is ``python -m scripts.base_train``;
  a package with ``tests/`` and several entry scripts, one of them imported by the trained one.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.contract.load import load_contract
from tests.support.repos import commit_tree

pytestmark = pytest.mark.side_by_side  # its checks time nothing: CI runs it beside other tests (./dev)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BOT = [sys.executable, "-m", "bot"]


def _repo(tmp_path: Path, name: str, prepare: list[str], cwd: str = ".") -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, ignore=shutil.ignore_patterns("__pycache__", "input.txt", "base_data",
                                                                        "out", "names", "checkpoints"))
    commit_tree(root)
    if prepare:
        subprocess.run([sys.executable, *prepare], cwd=root / cwd, check=True, capture_output=True)
    return root


def _init_check_trial(root: Path, command: str) -> tuple[str, str, dict]:
    init = subprocess.run(BOT + ["init", str(root), "--command", command], capture_output=True, text=True)
    assert init.returncode == 0, init.stdout + init.stderr
    check = subprocess.run(BOT + ["check", str(root), "--run"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: the regex saw" in check.stdout and "warning:" not in check.stdout, check.stdout
    trial = subprocess.run(BOT + ["trial", str(root), "--json"], capture_output=True, text=True)
    record = json.loads(trial.stdout)
    assert record["outcome"] == "ok", record["reason"] + trial.stderr[-2000:]
    return init.stdout, check.stdout, record


@pytest.mark.slow
def test_a_project_run_from_its_own_folder_with_untracked_data_beside_it(tmp_path: Path) -> None:
    root = _repo(tmp_path, "chargpt", ["download.py"], cwd="projects/chargpt")
    _init_check_trial(root, "cd projects/chargpt && python chargpt.py")
    contract = load_contract(root)
    assert contract.workload.workdir == "projects/chargpt" and contract.workload.command == ("python", "chargpt.py")
    assert contract.data.paths == ("projects/chargpt/input.txt",)  # untracked, not ignored: named by the code
    assert contract.timing.steps_per_line == 10 and contract.timing.measured_steps == 12  # max_iters = None
    assert contract.workload.tokens_per_step == 16 * 32
    assert set(contract.scope.editable) == {f"mingpt/model.py::{c}" for c in
                                            ("NewGELU", "CausalSelfAttention", "Block", "GPT")}

    # Without [data], check names the path and a trial says what its worktree lacks and how to add it.
    text = (root / "infrarsi.toml").read_text()
    (root / "infrarsi.toml").write_text(re.sub(r"\n\[data\]\n(#[^\n]*\n)*paths = \[[^\]]*\]\n", "\n", text))
    subprocess.run(BOT + ["lock", str(root)], check=True, capture_output=True)
    check = subprocess.run(BOT + ["check", str(root)], capture_output=True, text=True)
    assert check.returncode == 0 and "warning: projects/chargpt/input.txt: untracked by git and not in [data] " \
        "paths, but the job names it (projects/chargpt/chargpt.py line" in check.stdout, check.stdout
    trial = subprocess.run(BOT + ["trial", str(root), "--json"], capture_output=True, text=True)
    record = json.loads(trial.stdout)
    assert record["outcome"] == "crash" and "FileNotFoundError" in record["reason"], record
    assert "projects/chargpt/input.txt exists in the repo's tree but not in the trial's worktree" in record["reason"]
    assert "add it to [data] paths in infrarsi.toml and run `infrarsi lock`" in record["reason"]


@pytest.mark.slow
def test_a_forever_job_printing_every_ten_steps_with_a_data_derived_sequence_length(tmp_path: Path) -> None:
    root = _repo(tmp_path, "makenames", [])
    _init_check_trial(root, "python makemore.py -i names.txt -o names")
    contract = load_contract(root)
    longest = max(len(line.strip()) for line in (root / "names.txt").read_text().splitlines())
    assert contract.workload.tokens_per_step == 32 * (longest + 1)  # not the batch of 32 alone
    assert (contract.timing.warmup_steps, contract.timing.measured_steps, contract.timing.steps_per_line) == (2, 12, 10)
    assert contract.workload.args == ("--input-file", "names.txt", "--work-dir", "names")
    text = (root / "infrarsi.toml").read_text()
    assert "--max-steps is -1: no step count, read as training until stopped" in text
    for locked in ("makemore.py::create_datasets: builds or splits the dataset", "makemore.py::evaluate: evaluates"):
        assert locked in text


@pytest.mark.slow
def test_a_package_with_tests_and_several_entry_scripts_run_by_a_bash_script(tmp_path: Path) -> None:
    root = _repo(tmp_path, "pkgchat", ["-m", "tinychat.dataset", "-n", "4"])
    init_out, _, _ = _init_check_trial(root, "bash runs/runcpu.sh")
    assert "not kept: `python -m tinychat.dataset -n 4` (runs/runcpu.sh line 13)" in init_out
    contract = load_contract(root)
    assert contract.workload.command == ("python", "-m", "scripts.base_train")
    assert dict(contract.workload.env) == {"OMP_NUM_THREADS": "1"}
    assert contract.data.paths == ("base_data",)
    assert contract.workload.tokens_per_step == 1024 and [k.name for k in contract.knobs] == ["device_batch_size"]
    editable = set(contract.scope.editable)
    assert editable and all(e.startswith("tinychat/gpt.py::") for e in editable), editable  # not tests/, scripts/
    assert set(contract.scope.locked) == {"tinychat/checkpoint_manager.py", "tinychat/dataloader.py",
                                          "tinychat/loss_eval.py"}
    patches = subprocess.run(BOT + ["patches", str(root), "--json"], capture_output=True, text=True, check=True)
    for line in patches.stdout.splitlines():
        entry = json.loads(line)
        assert all(t.startswith("tinychat/gpt.py::") for t in entry["targets"]), entry
