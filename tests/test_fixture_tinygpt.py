"""The tinygpt fixture trains for real and reports one parseable line per step.

Each test runs ``fixtures/tinygpt/train.py`` in a subprocess with a tiny
workload (a few ms per step), so the whole file stays well under 20 s.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tinygpt"
STEP_RE = re.compile(r"^step (?P<step>\d+) \| loss (?P<loss>\S+) \| tokens (?P<tokens>\d+)")

GLOBAL_BATCH, SEQ_LEN, STEPS = 4, 32, 5
TINY = [
    "--n-layer", "1", "--n-head", "2", "--d-model", "64", "--vocab-size", "256",
    "--seq-len", str(SEQ_LEN), "--global-batch", str(GLOBAL_BATCH), "--steps", str(STEPS),
    "--threads", "1",
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_PROBE")}
    env.update(extra)
    return env


def _start(*flags: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "train.py", *TINY, *flags],
        cwd=FIXTURE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or _env(),
    )


def _finish(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def steps(proc: subprocess.CompletedProcess[str]) -> list[dict[str, float]]:
    assert proc.returncode == 0, proc.stderr
    rows = []
    for line in proc.stdout.splitlines():
        m = STEP_RE.match(line)
        if m:
            rows.append({"step": int(m["step"]), "loss": float(m["loss"]), "tokens": int(m["tokens"])})
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess[str]]:
    """All the training runs of this file, started together (each is 1 thread) and awaited."""
    probe_file = tmp_path_factory.mktemp("probe") / "probe.jsonl"
    procs = {
        "baseline": _start(),
        "again": _start(),
        "mb1": _start("--micro-batch", "1"),
        "bf16": _start("--dtype", "bf16", "--micro-batch", "4", "--optimizer", "adamw_foreach",
                       env=_env(INFRARSI_PROBE_FILE=str(probe_file))),
        "bad_mb": _start("--micro-batch", "3"),
    }
    done = {name: _finish(p) for name, p in procs.items()}
    done["probe_file"] = probe_file  # type: ignore[assignment]
    return done


@pytest.fixture(scope="module")
def baseline(runs) -> list[dict[str, float]]:
    return steps(runs["baseline"])


def test_one_parseable_line_per_step(baseline):
    assert [r["step"] for r in baseline] == list(range(1, STEPS + 1))
    assert all(r["tokens"] == GLOBAL_BATCH * SEQ_LEN for r in baseline)
    assert all(math.isfinite(r["loss"]) for r in baseline)
    # Starts near ln(vocab) and learns something within a few steps.
    assert abs(baseline[0]["loss"] - math.log(256)) < 0.5
    assert baseline[-1]["loss"] < baseline[0]["loss"]


def test_fp32_is_deterministic(runs, baseline):
    again = steps(runs["again"])
    assert [r["loss"] for r in again] == [r["loss"] for r in baseline]


def test_micro_batch_keeps_tokens_and_loss(runs, baseline):
    one = steps(runs["mb1"])
    assert [r["tokens"] for r in one] == [r["tokens"] for r in baseline]
    # Gradient accumulation computes the same step up to float rounding.
    for a, b in zip(one, baseline):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)


def test_bf16_runs_and_reports_to_probe(runs, baseline):
    probe_file = runs["probe_file"]
    rows = steps(runs["bf16"])
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["tokens"] == GLOBAL_BATCH * SEQ_LEN for r in rows)
    for a, b in zip(rows, baseline):
        assert a["loss"] == pytest.approx(b["loss"], rel=2e-2)
    events = [json.loads(line) for line in probe_file.read_text().splitlines()]
    step_events = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in step_events] == list(range(1, STEPS + 1))
    assert [e["tokens"] for e in step_events] == [r["tokens"] for r in rows]
    assert [round(e["loss"], 6) for e in step_events] == [r["loss"] for r in rows]


def test_micro_batch_must_divide_global_batch(runs):
    proc = runs["bad_mb"]
    assert proc.returncode != 0
    assert "--micro-batch 3" in proc.stderr and "divide" in proc.stderr
    assert not any(STEP_RE.match(line) for line in proc.stdout.splitlines())
