"""Acceptance on fixtures written the way real repos are: init from the training command alone, a dry run
that confirms the step regex, a baseline trial that is ``ok`` — and a job configured for 100,000 steps that
costs less than twice the same job configured for exactly the measured steps; then the doctor (witnessed
baselines, a profiler pass), which must stop the job after its measured steps as well.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infrarsi.contract.load import load_contract
from tests.support.repos import git_commit_tree

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BOT = [sys.executable, "-m", "bot"]

# fixture -> (prepare command or None, the command configured for 100k steps, the same for N steps)
CASES = {
    "globalsgpt": (["data/prepare.py"], "python train.py --max_iters=100000",
                   lambda n: ["train.py", f"--max_iters={n - 1}"]),  # iterations 0..max_iters
    "hftrainer": (None, "python run_clm.py --output_dir out --max_steps 100000 --per_device_train_batch_size 4 "
                        "--gradient_accumulation_steps 2 --report_to none --save_strategy no",
                  lambda n: ["run_clm.py", "--output_dir", "out", "--max_steps", str(n), "--per_device_train_batch_size",
                             "4", "--gradient_accumulation_steps", "2", "--report_to", "none", "--save_strategy", "no",
                             "--logging_steps", "1"]),
    "lightningjob": (None, "python train.py --max_steps 100000", lambda n: ["train.py", "--max_steps", str(n)]),
    "hydrajob": (None, "python train.py trainer.max_steps=100000", lambda n: ["train.py", f"trainer.max_steps={n}"]),
}


def _repo(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, ignore=shutil.ignore_patterns("__pycache__", "out", "outputs",
                                                                        "lightning_logs", "*.bin", "meta.json"))
    git_commit_tree(root, "x")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_from_its_command_alone(tmp_path: Path, name: str) -> None:
    prepare, command, exact = CASES[name]
    root = _repo(tmp_path, name)
    if prepare:
        subprocess.run([sys.executable, *prepare], cwd=root, check=True, capture_output=True)
    init = subprocess.run(BOT + ["init", str(root), "--command", command], capture_output=True, text=True)
    assert init.returncode == 0, init.stdout + init.stderr
    contract = load_contract(root)
    check = subprocess.run(BOT + ["check", str(root), "--run"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: the regex saw" in check.stdout

    trial = subprocess.run(BOT + ["trial", str(root), "--json"], capture_output=True, text=True)
    record = json.loads(trial.stdout)
    assert record["outcome"] == "ok", record["reason"] + trial.stderr[-2000:]
    stopped_s = record["cost_s"]

    total = contract.timing.total_steps * contract.timing.steps_per_line
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *exact(total)], cwd=root, capture_output=True, text=True)
    exact_s = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {"fixture": name, "measured_lines": total, "trial_100k_s": round(stopped_s, 1),
               "exact_s": round(exact_s, 1), "ratio": round(stopped_s / exact_s, 2),
               "knobs": [k.name for k in contract.knobs], "data": list(contract.data.paths)}
    print(json.dumps(figures))
    assert stopped_s < 2 * exact_s, figures

    # The doctor witnesses its baselines and profiles one pass: both must end with the measured steps too.
    doctor = subprocess.run(BOT + ["doctor", str(root), "--repeats", "2", "--run-id", "d"], capture_output=True,
                            text=True, timeout=900)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr[-2000:]
    report = json.loads((root / ".infrarsi" / "runs" / "d" / "doctor.json").read_text())
    assert report["work"] and report["loss_band"], report
