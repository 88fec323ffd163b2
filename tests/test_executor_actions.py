"""The GitHub Actions executor against the local GitHub API server.

The fake's "runner" runs the real runner side (``run_on_runner``: the local
executor) on the dispatched candidate and uploads its record, so the read-back
path is the one a self-hosted runner produces.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pygit2
import pytest

from bot.executors.actions import (
    ActionsExecutor,
    ActionsSettings,
    FifoSlots,
    execution_from_dict,
    execution_to_dict,
    executor_for_repo,
    run_on_runner,
    settings_for,
    spec_to_input,
)
from bot.forges.github import GitHubForge
from bot.workspace.commits import is_dirty
from tests.support.repos import commit_all, init_repo
from bot.forges.github_api import GitHubTarget, RetryPolicy
from infrarsi.seams.executor import TrialSpec
from infrarsi.seams.executor_codec import spec_to_dict
from infrarsi.contract.model import ActionsLaunch
from infrarsi.measure import classify, summarize
from infrarsi.trial_record import Outcome
from tests.support.fake_github import TOKEN, FakeGitHub, RunPlan, TrialWorkflowRunner
from tests.support.probe_job import PROBE  # the executor contract suite itself runs over "actions" too

TRIAL_BRANCH = "infrarsi/r1/1"


def _runner(checkout: Path) -> Callable[[dict[str, Any]], RunPlan]:
    """A self-hosted runner: runs the candidate for real, uploads what the workflow would."""
    def plan(inputs: dict[str, Any]) -> RunPlan:
        out = Path(tempfile.mkdtemp(prefix="runner-"))
        run_on_runner(inputs["candidate"], checkout=checkout, out=out)
        return RunPlan(artifact={p.name: p.read_bytes() for p in out.iterdir()})
    return plan


def _trial_repo(path: Path) -> Path:
    init_repo(path, {"README.md": "trial\n"})
    git = pygit2.Repository(str(path))
    git.branches.local.create(TRIAL_BRANCH, git.head.peel(pygit2.Commit))
    git.set_head(f"refs/heads/{TRIAL_BRANCH}")
    return path


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    server = FakeGitHub(tmp_path / "server").start()
    yield server
    server.stop()


def make_executor(fake: FakeGitHub, *, max_runners: int = 1, push: bool = True, **settings: Any) -> ActionsExecutor:
    forge = GitHubForge(GitHubTarget(owner="acme", repo="trainer", base_url=fake.url), TOKEN,
                        policy=RetryPolicy(sleep=lambda s: None))
    settings = {"poll_interval_s": 0.0, **settings}
    return ActionsExecutor(forge.client, push=(lambda root, branch: forge.push(root, branch, force=True))
                           if push else None, settings=ActionsSettings(max_runners=max_runners, **settings))


def _job(repo: Path, body: str) -> TrialSpec:
    (repo / "job.py").write_text(PROBE + body)
    commit_all(repo, "the candidate")
    return TrialSpec(argv=(sys.executable, "job.py"), cwd=str(repo), env=(("OMP_NUM_THREADS", "1"),), timeout_s=60)


def test_dispatch_poll_and_read_back_the_record(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = _runner(repo)
    spec = _job(repo, "for i in range(1, 5):\n    step(i, loss=1.0 / i, tokens=16)\n")
    spec = replace(spec, log_dir=str(tmp_path / "logs"))
    ex = make_executor(fake).execute(spec)

    (dispatch,) = fake.calls("POST", "/repos/acme/trainer/actions/workflows/infrarsi-trial.yml/dispatches")
    inputs = dispatch.body["inputs"]
    assert dispatch.body["ref"] == TRIAL_BRANCH and dispatch.body["return_run_details"] is True
    assert inputs["trial_branch"] == TRIAL_BRANCH and len(inputs["dispatch_id"]) == 16
    # the whole launch in the one codec, paths relative to the checkout, the runner's own interpreter
    sent = json.loads(inputs["candidate"])
    assert sent == spec_to_dict(replace(spec, argv=("python", "job.py"), cwd=".", root=".", log_dir=None))
    assert sent["spec"]["env"] == [["OMP_NUM_THREADS", "1"]] and sent["spec"]["timeout_s"] == 60.0
    assert fake.branch(TRIAL_BRANCH) == str(pygit2.Repository(str(repo)).head.target)  # pushed first
    assert len(fake.calls("GET", r"/repos/acme/trainer/actions/runs/\d+")) >= 2  # polled until completed

    metrics = summarize(ex, warmup=1, measured=3)
    assert classify(ex, metrics, warmup=1, measured=3, tokens_per_step=16) == (Outcome.OK, "")
    assert [e.step for e in ex.events] == [1, 2, 3, 4]
    info = dict(ex.info)
    assert info["actions_conclusion"] == "success" and info["actions_run_s"] == pytest.approx(30.0, abs=1)
    assert ex.wall_s * ex.devices == pytest.approx(30.0, abs=1)  # the cost: the runner held for the whole run
    assert (tmp_path / "logs" / "stdout.log").exists()


@pytest.mark.parametrize(("conclusion", "outcome", "words"), [
    ("cancelled", Outcome.CRASH, "concluded cancelled"),
    ("failure", Outcome.CRASH, "concluded failure"),
    ("timed_out", Outcome.TIMEOUT, "no exit after 42.0 s"),
])
def test_a_failed_run_is_a_failed_trial_with_its_cost(fake: FakeGitHub, tmp_path: Path, conclusion: str,
                                                      outcome: Outcome, words: str) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = lambda inputs: RunPlan(conclusion=conclusion, duration_s=42.0)
    ex = make_executor(fake).execute(_job(repo, "step(1)\n"))
    metrics = summarize(ex, warmup=1, measured=2)
    got, reason = classify(ex, metrics, warmup=1, measured=2, tokens_per_step=1)
    assert got is outcome and words in reason
    assert ex.wall_s * ex.devices == pytest.approx(42.0, abs=1)
    if conclusion != "timed_out":
        assert "workflow run" in ex.stderr_tail and conclusion in ex.stderr_tail


def test_a_run_no_runner_picks_up_is_cancelled_and_times_out(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = lambda inputs: RunPlan(queued_polls=10**6)
    ex = make_executor(fake, queue_timeout_s=0.0).execute(_job(repo, "step(1)\n"))
    assert ex.killed_for == "timeout" and "no runner picked it up" in ex.stderr_tail
    assert len(fake.calls("POST", r"/repos/acme/trainer/actions/runs/\d+/cancel")) == 1


def test_without_run_details_the_run_is_found_by_its_dispatch_id(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.run_details = False
    fake.plan_for = _runner(repo)
    ex = make_executor(fake).execute(_job(repo, "for i in range(1, 4):\n    step(i, tokens=2)\n"))
    assert [e.step for e in ex.events] == [1, 2, 3]
    (listing, *_) = fake.calls("GET", "/repos/acme/trainer/actions/workflows/infrarsi-trial.yml/runs")
    assert listing.query["branch"] == [TRIAL_BRANCH] and listing.query["event"] == ["workflow_dispatch"]


def test_fan_out_is_bounded_and_the_queue_is_the_bots(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = lambda inputs: RunPlan(queued_polls=2, running_polls=10,
                                           artifact={"execution.json": json.dumps({"execution": {
                                               "events": [], "returncode": 0, "wall_s": 1.0,
                                               "peak_rss_bytes": 1}}).encode()})
    spec = _job(repo, "step(1)\n")
    make_executor(fake).push(repo, TRIAL_BRANCH)  # type: ignore[misc]
    executor = make_executor(fake, max_runners=2, push=False, poll_interval_s=0.02)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(executor.execute(spec))) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 5 and all(r.returncode == 0 for r in results), [r.stderr_tail for r in results]
    assert fake.state.max_running == 2  # two runners busy at once, never more
    assert len(fake.state.runs) == 5  # every trial dispatched once, none dropped


def test_fifo_slots_serve_in_arrival_order() -> None:
    slots, order = FifoSlots(1), []
    gate = threading.Event()

    def take(i: int) -> None:
        with slots:
            order.append(i)
            gate.wait(5)

    first = threading.Thread(target=take, args=(0,))
    first.start()
    while not order:
        pass
    rest = []
    for i in range(1, 4):
        t = threading.Thread(target=take, args=(i,))
        t.start()
        rest.append(t)
        while slots._next_ticket != i + 1:  # queued in this order
            pass
    gate.set()
    for t in [first, *rest]:
        t.join(5)
    assert order == [0, 1, 2, 3]


def test_the_record_round_trips(tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    spec = _job(repo, "step(1, loss=0.5, tokens=3)\n")
    ex = run_on_runner(spec_to_input(spec, root=repo), checkout=repo, out=tmp_path / "out")
    again = execution_from_dict(json.loads((tmp_path / "out" / "execution.json").read_text()))
    assert again == ex and again.events[0].loss == 0.5
    with pytest.raises(ValueError, match="newer"):
        execution_from_dict({**execution_to_dict(ex), "schema_version": 99})


def test_the_registry_factory_reads_the_remote_the_contract_and_the_environment(fake: FakeGitHub,
                                                                               tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    pygit2.Repository(str(repo)).remotes.create("upstream", fake.clone_url)
    launch = ActionsLaunch(runners=2, devices=4, workflow="trial.yml", remote="upstream")
    executor = executor_for_repo(repo, launch, environ={"INFRARSI_GITHUB_TOKEN": TOKEN,
                                                       "INFRARSI_ACTIONS_RUNNERS": "3",
                                                       "INFRARSI_ACTIONS_DEVICES": "8"})
    assert (executor.settings.max_runners, executor.settings.devices) == (3, 8)  # the environment wins
    assert executor.settings.workflow == "trial.yml"  # the contract's, no variable set
    assert executor.client.repo_url == fake.api + "/repos/acme/trainer"
    assert executor.settings.poll_interval_s == 15.0
    executor.settings = replace(executor.settings, poll_interval_s=0.0, workflow="infrarsi-trial.yml")
    fake.plan_for = lambda inputs: RunPlan(conclusion="failure", duration_s=10.0)
    ex = executor.execute(_job(repo, "step(1)\n"))
    assert fake.branch(TRIAL_BRANCH) is not None and ex.wall_s * ex.devices == pytest.approx(80.0, abs=8)


def test_only_trial_branches_are_pushed_and_only_committed_trees_run(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    spec = _job(repo, "step(1)\n")
    (repo / "job.py").write_text("changed after the commit\n")
    ex = make_executor(fake).execute(spec)
    assert ex.returncode is None and "uncommitted changes" in ex.stderr_tail
    commit_all(repo, "again")
    git = pygit2.Repository(str(repo))
    git.set_head("refs/heads/main")
    git.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
    ex = make_executor(fake).execute(_job(repo, "step(1)\n"))
    assert "pushes only trial branches" in ex.stderr_tail
    assert fake.branch("main") is None and fake.calls("POST", r".*/dispatches") == []


def test_settings_come_from_the_contract_and_each_variable_overrides_its_key() -> None:
    launch = ActionsLaunch(workflow="gpu.yml", runners=2, devices=8, poll_interval_s=1.5)
    got = settings_for(launch, {})
    assert (got.workflow, got.max_runners, got.devices, got.poll_interval_s) == ("gpu.yml", 2, 8, 1.5)
    got = settings_for(launch, {"INFRARSI_ACTIONS_WORKFLOW": "other.yml", "INFRARSI_ACTIONS_RUNNERS": "4"})
    assert (got.workflow, got.max_runners, got.devices) == ("other.yml", 4, 8)
    with pytest.raises(ValueError, match="INFRARSI_ACTIONS_DEVICES: expected an integer >= 1, got 'two'"):
        settings_for(launch, {"INFRARSI_ACTIONS_DEVICES": "two"})


def test_a_real_runner_checks_out_the_pushed_branch_and_runs_the_workflow_step(fake: FakeGitHub,
                                                                               tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    runner = TrialWorkflowRunner(fake)
    fake.plan_for = runner
    where = tmp_path / "cwd.txt"
    spec = _job(repo, f"import os\nopen({str(where)!r}, 'w').write(os.getcwd())\n"
                      "for i in range(1, 4):\n    step(i, tokens=2)\n")
    ex = make_executor(fake, poll_interval_s=0.02).execute(spec)
    head = str(pygit2.Repository(str(repo)).head.target)
    assert runner.checkouts == [(TRIAL_BRANCH, head)]  # the runner ran the commit the bot pushed
    assert [e.step for e in ex.events] == [1, 2, 3] and dict(ex.info)["actions_conclusion"] == "success"
    assert Path(where.read_text()).name == "checkout" != repo.name  # ... in its own checkout, not the bot's tree
    assert ex.pids and ex.wall_s >= dict(ex.info)["runner_wall_s"]


def test_an_interrupt_cancels_the_run_in_flight(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = lambda inputs: RunPlan(queued_polls=10**6)
    executor = make_executor(fake, poll_interval_s=0.01)
    threading.Timer(0.2, executor.interrupt).start()
    ex = executor.execute(_job(repo, "step(1)\n"))
    assert ex.killed_for == "interrupt" and "interrupted" in ex.stderr_tail
    assert len(fake.calls("POST", r"/repos/acme/trainer/actions/runs/\d+/cancel")) == 1
    metrics = summarize(ex, warmup=1, measured=1)
    assert classify(ex, metrics, warmup=1, measured=1, tokens_per_step=1)[0] is Outcome.INTERRUPTED
    again = executor.execute(_job(repo, "step(2)\n"))
    assert again.killed_for == "interrupt" and len(fake.state.runs) == 1  # nothing more is dispatched


def test_a_runner_witness_other_than_the_bots_is_not_checked_not_blamed() -> None:
    from bot.executors.actions import same_witness
    from bot.executors.witness import payload_sha256
    from infrarsi.seams.executor import Execution

    ours = Execution(events=(), returncode=0, wall_s=1.0, peak_rss_bytes=0,
                     witness={"source_sha256": payload_sha256(), "flops": 1})
    assert same_witness(ours) == ours
    theirs = replace(ours, witness={"source_sha256": "0" * 64, "flops": 1})
    judged = same_witness(theirs)
    assert judged.witness is None and judged.witness_error is None
    assert judged.witness_skipped is not None and "install the bot's InfraRSI version" in judged.witness_skipped


# A job that logs its steps the way logging and tqdm do (stderr), and one that prints every 10 optimizer steps
STDERR_LINES = """
import sys, time
for i in range(1, 9):
    time.sleep(0.08)
    print(f"step {i} loss {1.0 / i:.4f}", file=sys.stderr, flush=True)
"""
EVERY_TEN = """
import time
for i in range(1, 81):
    time.sleep(0.01)
    if i % 10 == 0:
        print(f"step {i} loss {1.0 / i:.4f}", flush=True)
"""


@pytest.mark.parametrize(("body", "stream", "per_line", "step_s"), [(STDERR_LINES, "stderr", 1, 0.08),
                                                                    (EVERY_TEN, "stdout", 10, 0.01)],
                         ids=["stderr", "every-10-steps"])
def test_a_runner_counts_and_times_steps_as_the_local_executor_does(fake: FakeGitHub, tmp_path: Path, body: str,
                                                                   stream: str, per_line: int, step_s: float) -> None:
    from bot.executors.local import LocalExecutor

    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = TrialWorkflowRunner(fake)
    spec = replace(_job(repo, body), source="stdout", stdout_regex=r"^step (?P<step>\d+) loss (?P<loss>\S+)",
                   step_stream=stream, steps_per_line=per_line)
    remote = make_executor(fake, poll_interval_s=0.02).execute(spec)
    local = LocalExecutor().execute(spec)
    counted = {}
    for name, ex in (("actions", remote), ("local", local)):
        metrics = summarize(ex, warmup=1, measured=7, steps_per_line=per_line)
        counted[name] = (len(ex.events), metrics.step_time_s)
        assert classify(ex, metrics, warmup=1, measured=7, tokens_per_step=1,
                        steps_per_line=per_line)[0] is Outcome.OK, ex.stderr_tail
    assert counted["actions"][0] == counted["local"][0] == 8
    assert counted["actions"][1] == pytest.approx(counted["local"][1], rel=0.5)  # one clock, the same job
    assert step_s * 0.9 < counted["local"][1] < step_s * 3  # per optimizer step, not per line


def test_a_dropped_connection_while_polling_is_retried(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = lambda inputs: RunPlan(queued_polls=2, running_polls=2, artifact=None)
    fake.inject("GET", r"/repos/acme/trainer/actions/runs/\d+", 0, times=2)  # two drops in a row
    ex = make_executor(fake).execute(_job(repo, "step(1)\n"))
    assert "succeeded but uploaded no trial record" in ex.stderr_tail  # the run was followed to its end
    assert not fake.calls("POST", r"/repos/acme/trainer/actions/runs/\d+/cancel")


def test_polling_that_fails_for_good_cancels_the_run_and_records_a_crash(fake: FakeGitHub, tmp_path: Path) -> None:
    repo = _trial_repo(tmp_path / "repo")
    fake.plan_for = lambda inputs: RunPlan(queued_polls=10**6)
    fake.inject("GET", r"/repos/acme/trainer/actions/runs/\d+", 502, body={"message": "Server Error"}, times=10**6)
    ex = make_executor(fake).execute(_job(repo, "step(1)\n"))
    (cancel,) = fake.calls("POST", r"/repos/acme/trainer/actions/runs/\d+/cancel")
    run_id = int(cancel.path.split("/")[-2])
    assert fake.state.runs[run_id].status == "completed" and fake.state.runs[run_id].conclusion == "cancelled"
    # reading the dispatched run, then one poll: each sent 5 times (4 retries after a 502), then given up
    assert len(fake.calls("GET", rf"/repos/acme/trainer/actions/runs/{run_id}")) == 10
    outcome, reason = classify(ex, summarize(ex, warmup=1, measured=2), warmup=1, measured=2, tokens_per_step=1)
    assert outcome is Outcome.CRASH
    assert f"polling workflow run {run_id}" in reason and "502 Server Error" in reason
    assert "cancelled it on GitHub" in reason


def test_a_dispatch_that_fails_with_a_5xx_is_not_sent_again(fake: FakeGitHub, tmp_path: Path) -> None:
    """A POST may have reached GitHub before its 5xx: repeating it could start a second run of the trial."""
    repo = _trial_repo(tmp_path / "repo")
    fake.inject("POST", r"/repos/acme/trainer/actions/workflows/infrarsi-trial.yml/dispatches", 502,
                body={"message": "Server Error"})
    ex = make_executor(fake).execute(_job(repo, "step(1)\n"))
    assert len(fake.calls("POST", r"/repos/acme/trainer/actions/workflows/infrarsi-trial.yml/dispatches")) == 1
    assert not fake.state.runs
    assert "could not dispatch the trial" in ex.stderr_tail and "502" in ex.stderr_tail
