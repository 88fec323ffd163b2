"""The README's first command: the offline demo runs to the end and prints what it measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_demo_runs_offline_and_prints_the_figures(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "bot.demo", "--workdir", str(tmp_path)], capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "[3/3] what the bot measured" in out
    assert "speedup of bf16 autocast over the baseline:" in out
    baseline = next(line for line in out.splitlines() if line.strip().startswith("baseline "))
    assert " ok " in baseline and " ms " in baseline
    branches = subprocess.run(["git", "-C", str(tmp_path / "tinygpt"), "branch", "--list", "infrarsi/*"],
                              capture_output=True, text=True).stdout.split()
    assert branches == ["infrarsi/demo/1", "infrarsi/demo/2"]
