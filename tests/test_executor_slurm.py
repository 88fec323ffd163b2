"""The Slurm executor against a real local cluster (tests/conftest.py: munge, slurmctld, two slurmd).

Nothing of Slurm is mocked. The scheduler's own verdicts are provoked for real:
a job over its ``--mem`` (cgroup OOM), over its ``--time`` (Slurm counts whole
minutes and checks every 30 s, so that row takes 60–95 s and runs in the
background while the others do), a node set DOWN under a running trial, a job
cancelled by someone else, and the bot's own interrupt. Each row is started
once for the module and asserted by its own test.
"""

from __future__ import annotations

import hashlib

import json
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from bot.executors.slurm import SlurmExecutor
from bot.executors.slurm.records import BATCH_LOG, read_ranks
from infrarsi.contract.model import SlurmLaunch
from infrarsi.measure import classify, summarize
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.trial_record import Outcome
from infrarsi.witness import WitnessReport
from tests.support.slurm import SlurmCluster
from tests.support.tinygpt import REPO

# its checks time nothing: CI runs it beside other tests (./dev); the Slurm cluster's tests on one worker
pytestmark = [pytest.mark.slow, pytest.mark.side_by_side, pytest.mark.xdist_group("slurm")]

MiB = 2**20


def _executor(work: Path, **settings: object) -> SlurmExecutor:
    return SlurmExecutor(SlurmLaunch(**settings), workdir=work, poll_s=0.2)  # type: ignore[arg-type]


def _job(path: Path, body: str) -> tuple[str, ...]:
    path.write_text(textwrap.dedent(body))
    return (sys.executable, str(path))


def _waiting_job(tmp: Path, name: str) -> tuple[tuple[str, ...], Path]:
    """A job that says it runs (a marker file), then sleeps: the trial is under way when the marker exists."""
    marker = tmp / f"{name}.running"
    return _job(tmp / f"{name}.py", f"""
        import time
        open({str(marker)!r}, "w").write("x")
        time.sleep(600)
    """), marker


def _wait_for(predicate: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _resume(cluster: SlurmCluster, node: str) -> bool:
    try:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    except subprocess.CalledProcessError:
        pass
    return cluster.run("sinfo", "-h", "-n", node, "-o", "%T").strip() in ("idle", "mixed", "allocated")


def _outcome(ex: Execution) -> tuple[Outcome, str]:
    metrics = summarize(ex, warmup=1, measured=2)
    return classify(ex, metrics, warmup=1, measured=2, tokens_per_step=1)


def _in_background(fn: Callable[[], object]) -> Future:
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:  # noqa: BLE001  (re-raised by the test that asks)
            future.set_exception(e)
    threading.Thread(target=run, daemon=True).start()
    return future


@pytest.fixture(scope="module")
def rows(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future]]:
    """Every scheduler-state scenario, started at once; each test waits for its own."""
    tmp = tmp_path_factory.mktemp("slurm-rows")
    cluster = slurm_cluster
    out: dict[str, Future] = {}

    # over --time: a one-minute limit, a job that never ends, the agent's own timeout far away
    argv, _ = _waiting_job(tmp, "timeout")
    timeout_ex = _executor(tmp / "w-timeout", time_limit_min=1, sbatch_args=("--nodelist=n1",))
    out["timeout"] = _in_background(lambda: timeout_ex.execute(TrialSpec(argv=argv, cwd=str(tmp), timeout_s=900)))

    # over --mem: 200 MiB asked for, 1 GiB touched; the agent has no limit of its own here
    hog = _job(tmp / "hog.py", """
        hog = []
        for _ in range(128):
            hog.append(bytearray(8 * 2**20))
        import time; time.sleep(600)
    """)
    oom_ex = _executor(tmp / "w-oom", memory_bytes=200 * MiB, sbatch_args=("--nodelist=n1",))
    out["oom"] = _in_background(lambda: oom_ex.execute(TrialSpec(argv=hog, cwd=str(tmp), timeout_s=120)))

    # scancel by someone else
    argv_c, marker_c = _waiting_job(tmp, "cancel")
    cancel_ex = _executor(tmp / "w-cancel", sbatch_args=("--nodelist=n1",))
    out["cancelled"] = _in_background(lambda: cancel_ex.execute(TrialSpec(argv=argv_c, cwd=str(tmp), timeout_s=120)))

    def cancel_from_outside() -> None:
        _wait_for(marker_c.exists)
        (job_id,) = cancel_ex.submitted()
        cluster.run("scancel", job_id)
    out["cancel_thread"] = _in_background(cancel_from_outside)

    # the bot interrupted with two jobs of its own in the queue
    bot_ex = _executor(tmp / "w-bot", sbatch_args=("--nodelist=n1",))
    argv_b1, marker_b1 = _waiting_job(tmp, "bot1")
    argv_b2, _ = _waiting_job(tmp, "bot2")
    first = _in_background(lambda: bot_ex.execute(TrialSpec(argv=argv_b1, cwd=str(tmp), timeout_s=120)))
    second = _in_background(lambda: bot_ex.execute(TrialSpec(argv=argv_b2, cwd=str(tmp), timeout_s=120)))

    def interrupt() -> list[str]:
        _wait_for(lambda: marker_b1.exists() and len(bot_ex.submitted()) == 2)
        submitted = bot_ex.submitted()
        bot_ex.interrupt()
        return submitted
    out["bot_submitted"] = _in_background(interrupt)
    out["bot_first"], out["bot_second"] = first, second

    # a node set DOWN under a running trial: once as it is, once with a retry elsewhere allowed
    def node_fail(retry: bool) -> Execution:
        argv_n, marker = _waiting_job(tmp, f"node-{retry}")
        # the retry's first attempt avoids n1 (so it lands on n2); the bot's --exclude=n2 comes after
        ex = _executor(tmp / f"w-node-{retry}", retry_node_fail=retry,
                       sbatch_args=("--exclude=n1",) if retry else ("--nodelist=n2",))
        if retry:
            argv_n = _job(tmp / "node-retry.py", f"""
                import os, time
                if not os.path.exists({str(marker)!r}):
                    open({str(marker)!r}, "w").write("x")
                    time.sleep(600)
                print("second attempt ran")
            """)
        result = _in_background(lambda: ex.execute(TrialSpec(argv=argv_n, cwd=str(tmp), timeout_s=120)))
        _wait_for(marker.exists)
        cluster.run("scontrol", "update", "NodeName=n2", "State=DOWN", "Reason=infrarsi-test")
        try:
            return result.result(timeout=120)
        finally:
            _wait_for(lambda: _resume(cluster, "n2"), 60)  # refused while the killed job is still completing

    out["node_fail"] = _in_background(lambda: (node_fail(False), node_fail(True)))
    yield out
    for ex in (timeout_ex, oom_ex, cancel_ex, bot_ex):
        ex.interrupt()


def test_a_job_over_its_memory_is_oom_censored_at_what_it_asked_for(rows: dict[str, Future]) -> None:
    ex = rows["oom"].result(timeout=180)
    placement = dict(ex.placement)
    assert placement["state"] in ("OUT_OF_MEMORY", "FAILED")  # FAILED: a cluster without cgroups (OverMemoryKill)
    outcome, reason = _outcome(ex)
    assert outcome is Outcome.OOM, reason
    metrics = summarize(ex, warmup=1, measured=2)
    assert metrics.peak_mem_censored and metrics.peak_mem_bytes >= 200 * MiB
    assert ex.killed_for == "memory"


def test_scancel_from_outside_is_interrupted_and_says_so(rows: dict[str, Future]) -> None:
    rows["cancel_thread"].result(timeout=120)
    ex = rows["cancelled"].result(timeout=120)
    placement = dict(ex.placement)
    assert placement["state"] == "CANCELLED" and placement["cancelled_by"] == "someone else"
    assert _outcome(ex)[0] is Outcome.INTERRUPTED
    assert "CANCELLED by someone else" in ex.stderr_tail
    assert "infrarsi agent, rank 0 on n1: SIGTERM while the trial ran" in ex.stderr_tail  # who stopped it


def test_an_interrupted_bot_cancels_every_job_it_submitted(rows: dict[str, Future],
                                                           slurm_cluster: SlurmCluster) -> None:
    submitted = rows["bot_submitted"].result(timeout=120)
    for key in ("bot_first", "bot_second"):
        ex = rows[key].result(timeout=120)
        assert dict(ex.placement)["cancelled_by"] == "bot"
        assert _outcome(ex)[0] is Outcome.INTERRUPTED
    for job_id in submitted:
        line = slurm_cluster.run("scontrol", "show", "job", "-o", job_id)
        assert "JobState=CANCELLED" in line, line
    assert slurm_cluster.run("squeue", "-h", "-o", "%A", "-j", ",".join(submitted)).split() == []


def test_a_node_set_down_under_a_trial_is_a_crash_naming_the_node(rows: dict[str, Future]) -> None:
    failed, _ = rows["node_fail"].result(timeout=300)
    placement = dict(failed.placement)
    assert placement["state"] == "NODE_FAIL"
    outcome, reason = _outcome(failed)
    assert outcome is Outcome.CRASH
    assert "NODE_FAIL on node n2" in reason


def test_with_retry_node_fail_the_trial_reruns_once_elsewhere(rows: dict[str, Future]) -> None:
    _, retried = rows["node_fail"].result(timeout=300)
    placement = dict(retried.placement)
    assert len(placement["attempts"]) == 2 and placement["job_id"] == placement["attempts"][1]
    assert placement["state"] == "COMPLETED" and placement["nodes"] == ["n1"]
    assert retried.returncode == 0


def test_no_secret_of_the_bot_reaches_the_job_or_slurmctld(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    canaries = {"GITHUB_TOKEN": "canary-gh-7f3a", "ANTHROPIC_API_KEY": "canary-anthropic-7f3a",
                "AWS_SECRET_ACCESS_KEY": "canary-aws-7f3a", "MY_SERVICE_TOKEN": "canary-token-7f3a",
                "SBATCH_DB_PASSWORD": "canary-pw-7f3a"}
    import os

    environ = {**os.environ, **canaries}
    ex = SlurmExecutor(SlurmLaunch(), workdir=tmp_path / "work", environ=environ, poll_s=0.2)
    go, seen = tmp_path / "go", tmp_path / "env.json"
    argv = _job(tmp_path / "job.py", f"""
        import json, os, time
        json.dump(dict(os.environ), open({str(seen)!r}, "w"))
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
    """)
    result = _in_background(lambda: ex.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=60,
                                                         log_dir=str(tmp_path / "logs"))))
    _wait_for(seen.exists)
    time.sleep(0.2)
    (job_id,) = ex.submitted()
    # while the job runs, slurmctld keeps its script and environment under StateSaveLocation
    saved = [p for p in (slurm_cluster.state / "ctld").rglob(f"job.{job_id}/*") if p.is_file()]
    assert {p.name for p in saved} >= {"script", "environment"}
    everything = [p for p in [*slurm_cluster.state.rglob("*"), *(tmp_path / "work").rglob("*")] if p.is_file()]
    go.write_text("x")
    assert result.result(timeout=60).returncode == 0
    everything += [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    job_env = json.loads(seen.read_text())
    for name, value in canaries.items():
        assert name not in job_env
        for path in everything:
            try:
                assert value.encode() not in path.read_bytes(), f"{name}'s value found in {path}"
            except OSError:
                pass  # a socket or a file gone meanwhile
    assert job_env["SLURM_JOB_ID"] == job_id and "PATH" in job_env


def test_a_two_node_ddp_trial_is_ok_with_the_peak_over_ranks(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    repo = tmp_path / "ddp"
    shutil.copytree(REPO / "fixtures" / "ddp", repo, ignore=shutil.ignore_patterns("__pycache__", ".infrarsi"))
    args = ("--n-layer", "1", "--n-head", "2", "--d-model", "32", "--vocab-size", "128", "--seq-len", "16",
            "--global-batch", "4", "--steps", "5", "--seed", "1", "--micro-batch", "2", "--threads", "1")
    ex = SlurmExecutor(SlurmLaunch(nodes=2, tasks_per_node=1), workdir=tmp_path / "work", poll_s=0.2)
    harness = hashlib.sha256((repo / "harness.py").read_bytes()).hexdigest()
    execution = ex.execute(TrialSpec(argv=(sys.executable, "train.py", *args), cwd=str(repo), timeout_s=240,
                                     log_dir=str(tmp_path / "logs"), witness=2, expected_steps=5,
                                     root=str(repo), lock=(("harness.py", harness),)))
    metrics = summarize(execution, warmup=1, measured=4)
    outcome, reason = classify(execution, metrics, warmup=1, measured=4, tokens_per_step=4 * 16)
    job_dir = next((tmp_path / "work").iterdir())
    ranks = read_ranks(job_dir)
    # Once in a full CI run this trial came back interrupted with an empty tail: say what each rank recorded.
    per_rank = {r: (e.returncode, e.killed_for, e.stderr_tail[-300:]) for r, (e, _) in ranks.items()}
    assert outcome is Outcome.OK, (reason, execution.stderr_tail, execution.placement, per_rank)
    placement = dict(execution.placement)
    assert placement["nodes"] == ["n1", "n2"], placement
    # The job runs exactly its 5 steps: it usually exits on its own (COMPLETED), but now and then (in CI, beside
    # other tests) rank 0's agent sees the 5th step first and ends the job as it would a job configured for days;
    # it then exits non-zero on purpose so that srun stops the peers, and the job reads FAILED. Either way the
    # agents' records stand (the executor's rule); say everything the scheduler said if it ever reads otherwise.
    said = (placement, per_rank, (job_dir / BATCH_LOG).read_text(errors="replace")[-2000:])
    ended_by_the_bot = ranks[0][0].stopped_after_steps and ranks[0][0].killed_for is None
    assert placement["state"] == "COMPLETED" or (placement["state"] == "FAILED" and ended_by_the_bot), said
    assert sorted(ranks) == [0, 1] and {f["node"] for _, f in ranks.values()} == {"n1", "n2"}
    peaks = [ex_.peak_rss_bytes for ex_, _ in ranks.values()]
    assert min(peaks) > 50 * MiB  # each rank is a real torch process, measured on its own node
    assert execution.peak_rss_bytes == max(peaks)
    assert execution.devices == 2 and len(execution.events) == 5
    assert (tmp_path / "logs" / "rank1.stderr.log").exists()
    # each rank's agent witnessed its own rank and checked the lock on its own node
    assert execution.witness_error is None and execution.lock_changed == ()
    reports = {r["rank"]: WitnessReport.from_dict(r) for r in execution.witness_ranks}
    assert sorted(reports) == [0, 1] and execution.witness is not None and execution.witness["rank"] == 0
    assert all(r.optimizer_steps >= 4 and r.flops for r in reports.values())
    # gradients are read after DDP's all-reduce: the two replicas hold the same ones
    assert reports[0].grad_norms == pytest.approx(reports[1].grad_norms, rel=1e-5)


def test_a_job_over_its_time_limit_is_a_timeout(rows: dict[str, Future]) -> None:
    ex = rows["timeout"].result(timeout=240)
    placement = dict(ex.placement)
    assert placement["state"] == "TIMEOUT"
    assert _outcome(ex)[0] is Outcome.TIMEOUT
    assert placement["elapsed_s"] >= 60  # Slurm's limit is whole minutes
    assert ex.wall_s == placement["elapsed_s"]
