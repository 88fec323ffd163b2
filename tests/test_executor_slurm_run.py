"""``infrarsi run`` with ``[launch] executor = "slurm"`` on the local cluster: every trial a batch job.

The real CLI in a fresh interpreter, the cluster of tests/conftest.py (nothing of
Slurm mocked): a full run with ``--parallel 2``, and a bot SIGKILLed while its jobs
run, then ``--resume``. The job is the one whose step time the test decides
(tests/support/variant_job.py: a torch model trained, each step a set sleep), so
that a candidate truly beats the baseline and the run verifies it however fast
this machine is at the moment (the tinygpt fixture's fastest configuration is
the machine's to decide, and on a slow hour none beat its baseline).
"""

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
from tests.support.slurm import SlurmCluster
from tests.support.repos import commit_tree
from tests.support.tinygpt import infrarsi
from tests.support.variant_job import TRUE, variant_repo

pytestmark = pytest.mark.slow

SLURM_CONTRACT = """
[launch]
executor = "slurm"

[launch.slurm]
nodes = 1
tasks_per_node = 1
memory = "1GiB"
poll_s = 0.2
"""


@pytest.fixture
def slurm_repo(tmp_path: Path, slurm_cluster: SlurmCluster) -> Path:
    repo = variant_repo(tmp_path, max_pairs=4)  # variants b, c, d step in 0.85, 0.7, 0.92 of the baseline's time
    contract = repo / "infrarsi.toml"
    contract.write_text(contract.read_text() + SLURM_CONTRACT)
    assert infrarsi("lock", str(repo)).returncode == 0
    commit_tree(repo, "on slurm")
    return repo


def _jobs_of(cluster: SlurmCluster, run_id: str) -> dict[str, list[tuple[str, str]]]:
    """This run's jobs as slurmctld lists them (finished ones included): job name -> [(id, state)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in cluster.run("squeue", "-h", "-t", "all", "-o", "%A %j %T").splitlines():
        job_id, name, state = line.split()
        if name.startswith(f"infrarsi-{run_id}-"):
            out.setdefault(name, []).append((job_id, state))
    return out


def test_a_run_on_slurm_with_parallel_2_completes_and_names_its_jobs(slurm_repo: Path,
                                                                     slurm_cluster: SlurmCluster) -> None:
    repo = slurm_repo
    result = infrarsi("run", str(repo), "--run-id", "s", "--budget-trials", "4", "--initial", "4",
                      "--repeats", "2", "--parallel", "2", "--no-bank", "--json", timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((repo / ".infrarsi" / "runs" / "s" / "run.json").read_text())
    assert len(summary["trials"]) >= 4  # the search's own trials (the doctor's and verification's come on top)
    assert summary["verdicts"], "the run verifies its best candidate"
    verified = summary["verdicts"][0]["candidate"].split()[0].removeprefix("variant=")
    assert TRUE[verified] < 1.0, summary["verdicts"]  # a variant that truly steps faster than the baseline's
    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        records = journal.trials("s")
    assert all(r.executor == "slurm" for r in records)
    jobs = _jobs_of(slurm_cluster, "s")
    for r in records:
        placement = dict(r.placement)
        (job,) = jobs[f"infrarsi-s-{r.trial_no}"]  # one job per trial, named after it
        assert placement["job_id"] == job[0] and placement["nodes"]
        assert placement["pending_s"] is not None and r.cost_s == pytest.approx(placement["elapsed_s"])
    assert sum(r.outcome is Outcome.OK for r in records) >= 2 + 4  # the doctor's two, the search's four
    assert not any(state in ("PENDING", "RUNNING") for js in jobs.values() for _, state in js)


def _count(db: Path, where: str) -> int:
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute(f"SELECT COUNT(*) FROM trials WHERE {where}").fetchone()[0]
    except sqlite3.OperationalError:  # the journal is being created
        return 0


def test_a_bot_killed_with_jobs_running_resumes_without_repeating_them(slurm_repo: Path,
                                                                        slurm_cluster: SlurmCluster) -> None:
    repo = slurm_repo
    db = repo / ".infrarsi" / "journal.sqlite"
    args = [sys.executable, "-m", "bot", "run", str(repo), "--run-id", "k", "--budget-trials", "4", "--initial", "4",
            "--repeats", "2", "--parallel", "2", "--no-bank", "--json"]
    bot = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    # the doctor's two baselines, then the first search batch: kill the bot while two jobs of it run
    while time.monotonic() < deadline and not (db.exists() and _count(db, "record IS NOT NULL") >= 2
                                               and _count(db, "record IS NULL") >= 2):
        time.sleep(0.1)
    _wait = time.monotonic() + 120
    while time.monotonic() < _wait and sum(state == "RUNNING" for js in _jobs_of(slurm_cluster, "k").values()
                                           for _, state in js) < 2:
        time.sleep(0.1)
    bot.send_signal(signal.SIGKILL)
    bot.wait(timeout=60)
    with Journal(db) as journal:
        before = {r.trial_no: r for r in journal.trials("k")}
        pending = journal.pending("k")
    assert len(pending) == 2, "two trials were running when the bot died"
    running = _jobs_of(slurm_cluster, "k")
    assert all(len(running[f"infrarsi-k-{p.trial_no}"]) == 1 for p in pending)

    result = subprocess.run(args[:-1] + ["--resume", "--json"], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert any(e["event"] == "resume" and "read back" in e["message"] for e in events)
    with Journal(db) as journal:
        after = {r.trial_no: r for r in journal.trials("k")}
        assert journal.pending("k") == []
    for no, record in before.items():
        assert after[no].to_dict() == record.to_dict()
    jobs = _jobs_of(slurm_cluster, "k")
    for p in pending:  # read back from the job that ran on without the bot: not interrupted, not repeated
        record = after[p.trial_no]
        assert record.outcome is Outcome.OK and dict(record.placement)["recovered_on_resume"] is True
        assert record.candidate.digest() == p.candidate_hash
        (job,) = jobs[f"infrarsi-k-{p.trial_no}"]
        assert dict(record.placement)["job_id"] == job[0]
    assert all(len(js) == 1 for js in jobs.values()), "no trial was submitted twice"
    assert not any(state in ("PENDING", "RUNNING", "COMPLETING") for js in jobs.values() for _, state in js)
    summary = json.loads((repo / ".infrarsi" / "runs" / "k" / "run.json").read_text())
    assert len({t["trial_no"] for t in summary["trials"]}) == len(summary["trials"]) >= 4
