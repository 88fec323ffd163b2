"""The step clock on a real job that holds its step events back and pours them out: the step time is not shrunk,
and the clock row names the attempt (a dup2 relay of stdout, which replaces no Python object)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.executors.local import LocalExecutor
from infrarsi.measure import summarize
from infrarsi.seams.executor import TrialSpec
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.verdict import clock_row

pytestmark = pytest.mark.slow

JOB = """
import os, sys, threading, time
import torch
torch.manual_seed(0)
if "--relay" in sys.argv:  # stdout through a pipe of the job's own: lines held, then poured out at once
    real = os.dup(1)
    r, w = os.pipe()
    os.dup2(w, 1)
    def relay():
        held = []
        with os.fdopen(r, "rb", 0) as f:
            for line in iter(f.readline, b""):
                held.append(line)
                if len(held) == 7 or len(held) > 7:
                    for h in held:
                        os.write(real, h)
                    held = []
    threading.Thread(target=relay, daemon=True).start()
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 512)
for step in range(1, 13):
    for _ in range(6):
        loss = model(x).pow(2).mean()
        loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.5f}", flush=True)
sys.stdout.flush()
time.sleep(0.2)
"""


def _trial(tmp_path: Path, *args: str) -> TrialRecord:
    (tmp_path / "job.py").write_text(JOB)
    spec = TrialSpec(argv=(sys.executable, "job.py", *args), cwd=str(tmp_path), timeout_s=120, source="stdout",
                     stdout_regex=r"step (?P<step>\d+) loss (?P<loss>[\d.]+)", expected_steps=8, witness=5)
    execution = LocalExecutor().execute(spec)
    metrics = summarize(execution, warmup=2, measured=6)
    return TrialRecord(run_id="r", trial_no=1, candidate=Candidate(), outcome=Outcome.OK, metrics=metrics)


def test_events_held_back_and_poured_out_read_no_faster_and_are_named(tmp_path: Path) -> None:
    honest = _trial(tmp_path)
    held = _trial(tmp_path, "--relay")
    h, c = honest.metrics, held.metrics
    assert h.clock == c.clock == "anchored", (h.clock, c.clock)
    assert h.step_time_s and c.step_time_s
    # the bot's own span of the window saw the held lines arrive together: a median would read it far faster
    assert c.span_s is not None and c.witness_span_s is not None and c.span_s < 0.5 * c.witness_span_s
    assert c.step_time_s > 0.75 * h.step_time_s, (c.step_time_s, h.step_time_s)
    row = clock_row(held)
    assert row.broken and "held back" in row.detail, row.detail
    assert clock_row(honest).ok, clock_row(honest).detail
