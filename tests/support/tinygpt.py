"""The tinygpt fixture in its tiny config, and the real CLI run as a user would (shared by tests and conftest)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.repos import commit_tree

REPO = Path(__file__).resolve().parents[2]
TINYGPT = REPO / "fixtures" / "tinygpt"
INJECTION = REPO / "fixtures" / "injection"
# A config of the fixture that trains for real in milliseconds per step.
TINY_ARGS = "--n-layer 1 --n-head 2 --d-model 64 --vocab-size 256 --seq-len 32 --global-batch 4 --steps 8"
TINY_TOKENS = 4 * 32
# For the tests of a whole run (resume, parallel trials, the executors' runs): a torch.compile trial costs 3-5x an
# eager one on a CPU, and those tests are about the loop, not the search's choices.
NO_COMPILE = """
[[constraints]]
kind = "forbid"
when = { compile = true }
reason = "keeps the test short"
"""


def copy_fixture(dest: Path) -> Path:
    shutil.copytree(TINYGPT, dest, ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.*"))
    return dest


def infrarsi(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def committed_tinygpt(dest: Path, *, injected: bool = False) -> Path:
    """tinygpt (tiny config) with its contract, written by ``infrarsi init`` in this process, committed on ``main``;
    ``injected`` plants the prompt-injection fixture's README and model comment first."""
    from bot.cli.main import main

    repo = copy_fixture(dest)
    if injected:
        (repo / "README.md").write_text((INJECTION / "README.md").read_text())
        model = repo / "model.py"
        model.write_text((INJECTION / "model_comment.txt").read_text() + model.read_text())
    assert main(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]) == 0
    (repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    commit_tree(repo, "fixture")
    return repo
