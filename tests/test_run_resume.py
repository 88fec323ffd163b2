"""The run stage end to end on the tiny fixture, including a SIGKILL mid-trial and --resume."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infrarsi.journal import Journal
from infrarsi.trial_record import Outcome
from tests.support.tinygpt import NO_COMPILE, infrarsi
from tests.support.processes import wait_for_job
from tests.support.repos import commit_tree

pytestmark = pytest.mark.slow


@pytest.fixture
def small_run_repo(tiny_repo: Path) -> Path:
    contract = tiny_repo / "infrarsi.toml"
    contract.write_text(contract.read_text() + NO_COMPILE + "\n[verify]\ntop_k = 1\nmax_pairs = 4\n")
    assert infrarsi("lock", str(tiny_repo)).returncode == 0
    commit_tree(tiny_repo, "fixture")
    return tiny_repo


def _records(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM trials WHERE record IS NOT NULL").fetchone()[0]


def _doctor_trials(repo: Path, run_id: str) -> set[int] | None:
    """The doctor's own trials (its baselines and its lower-dtype calibration runs), once doctor.json exists."""
    path = repo / ".infrarsi" / "runs" / run_id / "doctor.json"
    if not path.is_file():
        return None
    doctor = json.loads(path.read_text())
    return set(doctor["trials"]) | set(doctor["calibration_trials"])


def test_a_killed_run_resumes_without_repeating_finished_trials(small_run_repo: Path) -> None:
    repo = small_run_repo
    db = repo / ".infrarsi" / "journal.sqlite"
    args = [sys.executable, "-m", "bot", "run", str(repo), "--run-id", "k", "--budget-trials", "5",
            "--initial", "4", "--repeats", "2", "--json"]
    bot = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    # Wait for the doctor's trials and two search trials, then for the next trial to start.
    while time.monotonic() < deadline and ((own := _doctor_trials(repo, "k")) is None or _records(db) < len(own) + 2):
        time.sleep(0.2)
    assert own is not None and _records(db) >= len(own) + 2, \
        "the run did not record two search trials in 10 minutes (a loaded machine?)"
    while time.monotonic() < deadline:
        with sqlite3.connect(db) as conn:
            if conn.execute("SELECT COUNT(*) FROM trials WHERE record IS NULL").fetchone()[0]:
                break
        time.sleep(0.05)
    wait_for_job(repo)  # the trial's job is running: the kill lands mid-trial
    bot.send_signal(signal.SIGKILL)
    bot.wait(timeout=60)
    with Journal(db) as journal:
        before = {r.trial_no: r for r in journal.trials("k")}
        (killed,) = journal.pending("k")
    assert len(before) >= len(own) + 2

    result = subprocess.run(args[:-1] + ["--resume", "--json"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert any(e["event"] == "resume" for e in events)
    with Journal(db) as journal:
        after = {r.trial_no: r for r in journal.trials("k")}
        assert journal.pending("k") == []
    for no, record in before.items():  # finished trials are untouched, none ran again under its number
        assert after[no].to_dict() == record.to_dict()
    assert after[killed.trial_no].outcome is Outcome.INTERRUPTED and after[killed.trial_no].cost_s > 0
    search_trials = [e for e in events if e["event"] == "trial"]
    baseline = before[min(own)].candidate.digest()  # a search's control runs the baseline again
    searched = [r for r in before.values() if r.trial_no not in own and r.candidate.digest() != baseline]
    assert search_trials and search_trials[0]["n"] == len(searched) + 2  # counting the interrupted one
    summary = json.loads((repo / ".infrarsi" / "runs" / "k" / "run.json").read_text())
    assert summary["verdicts"], "the resumed run still verifies its best candidate"
    assert len({t["trial_no"] for t in summary["trials"]}) == len(summary["trials"])


def test_parallel_trials_overlap_without_colliding(small_run_repo: Path) -> None:
    """--parallel 2: two trials at once, each in its own worktree, numbered once, no candidate run twice."""
    repo = small_run_repo
    result = infrarsi("run", str(repo), "--run-id", "p", "--budget-trials", "4", "--initial", "4",
                      "--repeats", "2", "--parallel", "2", "--no-bank", "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        records = journal.trials("p")
        assert journal.pending("p") == []
    summary = json.loads((repo / ".infrarsi" / "runs" / "p" / "run.json").read_text())
    # a trial measured again after the machine's speed changed (infrarsi/search/drift.py) counts once
    search = [t for t in summary["trials"] if not t["superseded"]]
    assert len(search) == 4
    assert len({t["trial_no"] for t in search}) == 4
    assert len({t["candidate"] for t in search}) == 4, "a candidate ran twice"
    assert len({t["commit"] for t in search if t["commit"]}) == len([t for t in search if t["commit"]])
    by_no = {r.trial_no: r for r in records}
    spans = sorted((by_no[t["trial_no"]].started_at, by_no[t["trial_no"]].ended_at) for t in search)
    overlaps = sum(1 for (s1, e1), (s2, _) in zip(spans, spans[1:]) if s2 < e1)
    assert overlaps >= 1, f"no two trials ran at the same time: {spans}"
