"""benchmarks/gpu_check.sh: its CPU part (everything up to the first CUDA step) runs here as in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tinygpt import REPO, TINY_ARGS


@pytest.mark.slow  # init's dry run trains the tiny config once
def test_the_cpu_part_of_the_gpu_check_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--cpu-only", str(tmp_path / "w"),
                             "--", "--job-args", TINY_ARGS], capture_output=True, text=True, env=env, timeout=300)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    for n in (1, 2, 3):
        assert f"[{n}/7]" in out
    assert "[4/7]" not in out and "CPU part ok" in out
    assert "cuda_backend_flags: applies" in out and "dataloader_gpu_settings: " in out
    train = (tmp_path / "w" / "tinygpt" / "train.py").read_text()
    assert "set_per_process_memory_fraction" in train  # the OOM hook the GPU part uses
    assert (tmp_path / "w" / "tinygpt" / "infrarsi.lock").is_file()


@pytest.mark.slow  # two fresh interpreters import torch
def test_without_cuda_the_full_check_refuses_clearly(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        return  # the GPU part is the check itself
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), str(tmp_path / "w"), "--",
                             "--job-args", TINY_ARGS], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1 and "FAILED: a CUDA device is visible (rerun with --cpu-only" in result.stdout
    assert "[2/7]" not in result.stdout  # it says so before spending a minute on the fixture
