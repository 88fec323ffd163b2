"""The witness counts what a step consumes; the doctor compares it with the contract's ``tokens_per_step``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infrarsi.doctor import tokens_note
from tests.support.tinygpt import infrarsi
from tests.support.witnessed import work_reference

# A job that prints its steps and says nothing about tokens: 4 x 8 token ids reach the embedding each step.
JOB = """import torch
torch.manual_seed(0)
emb, head = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50)
opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)
for step in range(1, 9):
    x = torch.randint(0, 50, (4, 8))
    loss = torch.nn.functional.cross_entropy(head(emb(x)).view(-1, 50), x.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
"""


def test_the_note_names_both_figures_only_when_they_differ() -> None:
    assert tokens_note(128, work_reference()) is None  # the synthetic report counted 128
    note = tokens_note(4, work_reference())
    assert note is not None and "the witness counted 128" in note and "the contract says 4" in note
    assert tokens_note(4, None) is None
    assert tokens_note(4, work_reference(tokens_in=None)) is None  # nothing counted: nothing to say


@pytest.mark.slow
def test_the_doctor_reports_tokens_the_witness_counted_that_the_contract_does_not_say(tmp_path: Path) -> None:
    repo = tmp_path / "job"
    repo.mkdir()
    (repo / "train.py").write_text(JOB)
    drafted = infrarsi("init", str(repo), "--command", "python train.py", "--tokens-per-step", "4")
    assert drafted.returncode == 0, drafted.stderr
    done = infrarsi("doctor", str(repo), "--repeats", "2", "--run-id", "t", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    doctor = json.loads((repo / ".infrarsi" / "runs" / "t" / "doctor.json").read_text())
    notes = " ".join(doctor["notes"])
    assert "the witness counted 32 consumed in one optimizer step" in notes and "the contract says 4" in notes


@pytest.mark.slow
def test_init_measures_the_tokens_it_cannot_read_from_the_code(tmp_path: Path) -> None:
    repo = tmp_path / "job"
    repo.mkdir()
    (repo / "train.py").write_text(JOB)  # no batch-size or sequence-length setting anywhere
    drafted = infrarsi("init", str(repo), "--command", "python train.py", timeout=600)
    assert drafted.returncode == 0, drafted.stderr
    assert "measuring them with one short run of the baseline" in drafted.stderr
    toml = (repo / "infrarsi.toml").read_text()
    assert "tokens_per_step = 32" in toml
    assert "measured: one short run of the baseline, the witness counted the token ids reaching an embedding" in toml
    assert infrarsi("check", str(repo)).returncode == 0


@pytest.mark.slow
def test_init_asks_for_the_tokens_when_a_short_run_cannot_count_them_either(tmp_path: Path) -> None:
    repo = tmp_path / "job"
    repo.mkdir()
    (repo / "train.py").write_text("import sys\nsys.exit('no data here')\n")
    drafted = infrarsi("init", str(repo), "--command", "python train.py", timeout=600)
    assert drafted.returncode == 2 and not (repo / "infrarsi.toml").exists()
    (line,) = drafted.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: cannot infer the tokens processed per step") and "pass --tokens-per-step N" in line
    assert "no data here" in line
