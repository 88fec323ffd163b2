"""Shared test fixtures: copies of the tinygpt training repo with a contract for its tiny config."""

from __future__ import annotations

import os

# Small matrix products in the engine's models crawl when multi-threaded OpenBLAS
# competes with trials for two cores; set before numpy is imported anywhere.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Runs started by tests write their findings here, never to the user's own bank.
os.environ.setdefault("INFRARSI_BANK", os.path.join(__import__("tempfile").mkdtemp(prefix="infrarsi-test-bank-"),
                                                    "bank.sqlite"))

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINYGPT = REPO / "fixtures" / "tinygpt"
# A config of the fixture that trains for real in milliseconds per step.
TINY_ARGS = "--n-layer 1 --n-head 2 --d-model 64 --vocab-size 256 --seq-len 32 --global-batch 4 --steps 8"
TINY_TOKENS = 4 * 32


def copy_fixture(dest: Path) -> Path:
    shutil.copytree(TINYGPT, dest, ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.*"))
    return dest


def infrarsi(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A copy of tinygpt with a contract (tiny config) and its lock, written by `infrarsi init`."""
    repo = copy_fixture(tmp_path / "tinygpt")
    result = infrarsi("init", str(repo), "--command", f"python train.py {TINY_ARGS}")
    assert result.returncode == 0, result.stderr
    return repo
