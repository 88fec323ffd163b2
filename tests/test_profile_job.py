"""The doctor's profiler pass ends after the steps a trial measures, not with a job configured for days."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.side_by_side]  # its checks time nothing: CI runs it beside other tests (./dev)

FOREVER = """
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10**9):
    loss = model(torch.ones(8, 64)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


# pytorch/examples' word_language_model updates its weights by hand: no optimizer step ever comes
BY_HAND = """
import torch
model = torch.nn.Linear(64, 64)
for step in range(10**9):
    loss = model(torch.ones(8, 64)).square().mean()
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
"""


@pytest.mark.parametrize(("job", "phases_wanted"), [(FOREVER, {"forward", "backward", "optimizer"}),
                                                    (BY_HAND, {"forward", "backward"})])
def test_the_profiler_pass_stops_after_the_measured_steps(tmp_path: Path, job: str, phases_wanted: set[str]) -> None:
    (tmp_path / "job.py").write_text(job)
    out = tmp_path / "phases.json"
    result = subprocess.run([sys.executable, "-m", "bot.stages.doctor.profile_job", str(out), "--steps", "5",
                             "job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    phases = json.loads(out.read_text())["phases_s"]
    assert phases_wanted <= set(phases) and all(v >= 0 for v in phases.values())
