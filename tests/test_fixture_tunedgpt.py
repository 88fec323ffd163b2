"""tunedgpt, the corpus's control: a job already written the tuned way, where the catalog must find
(almost) nothing, and what it does find is reported with a reason rather than silently skipped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.repos import git_commit_tree

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tunedgpt"
BOT = [sys.executable, "-m", "bot"]
COMMAND = "python train.py --seq-len 128 --global-batch 8 --micro-batch 8 --steps 6"
# What a tuned job already does: each of these must decline, naming what it looked for.
ALREADY_DONE = ("sdpa_causal_attention", "fused_gelu", "optimizer_fused", "optimizer_foreach",
                "zero_grad_set_to_none", "autocast_bf16", "torch_compile_model")


def test_the_catalog_declines_what_the_tuned_job_already_does(tmp_path: Path) -> None:
    repo = tmp_path / "tunedgpt"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git_commit_tree(repo, "x")
    init = subprocess.run(BOT + ["init", str(repo), "--command", COMMAND], capture_output=True, text=True)
    assert init.returncode == 0, init.stdout + init.stderr
    listed = subprocess.run(BOT + ["patches", str(repo), "--json"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    entries = {e["id"]: e for e in map(json.loads, listed.stdout.splitlines())}
    for name in ALREADY_DONE:
        assert not entries[name]["applies"], (name, entries[name])
        assert entries[name]["why_not"], name
    # torch.compile is already called where a GPU runs the job: compiling again is left alone.
    assert any("already calls torch.compile" in reason for reason in entries["torch_compile_model"]["why_not"])
