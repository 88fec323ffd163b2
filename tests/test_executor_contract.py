"""The contract every Executor honours, run over each implementation.

Jobs here are small Python programs that behave badly on purpose (hang, fork,
leak secrets, eat memory); the real training job is exercised in test_trial_cli.
Under the torchrun executor every job runs as two ranks on loopback; under the
Slurm executor every job is a batch job on the local cluster (tests/conftest.py). Under the
Actions executor the job's directory is a git repository on a trial branch;
each job is committed, pushed to the local GitHub-shaped server and dispatched,
and a simulated self-hosted runner (tests.support.fake_github.TrialWorkflowRunner) clones
the branch and runs the workflow's real step, ``python -m bot.executors.actions``.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from bot.executors.local import LocalExecutor
from bot.executors.torchrun import TorchrunExecutor
from infrarsi.contract.model import Launch
from infrarsi.seams.executor import Execution, Executor, TrialSpec
from infrarsi.measure import classify, summarize
from infrarsi.invariants import build_reference, record_invariants, witnessed_report
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.witness import WitnessReport
from tests.support.probe_job import PROBE

# its checks time nothing: CI runs it beside other tests (./dev); the Slurm cluster's tests on one worker
pytestmark = [pytest.mark.side_by_side, pytest.mark.xdist_group("slurm")]

EXECUTORS = {
    "local": lambda: LocalExecutor(sample_interval_s=0.02),
    "torchrun": lambda: TorchrunExecutor(Launch(executor="torchrun", nproc_per_node=2), sample_interval_s=0.02),
    "actions": None,  # needs the local GitHub server and a git repository: built by _actions below
}
# Seconds before a job's own code runs: torchrun's agent imports torch and rendezvouses first
# (a few seconds on an idle machine, far more on a loaded 2-core one); a Slurm job is scheduled and
# its agent started on the node first (the agent's timer starts with the job's own code).
# Under Actions the timeout starts on the runner, after the checkout, so the job needs no slack either.
STARTUP_S = {"local": 0.0, "torchrun": 60.0, "slurm": 30.0, "actions": 0.0}
# Of that, what counts against the trial's timeout: torchrun's own start (two interpreters importing torch, 4-5 s
# here) is inside it, so the hanging job gets that much more time to write its pids before it is killed.
INSIDE_TIMEOUT_S = {"local": 0.0, "torchrun": 25.0, "slurm": 0.0, "actions": 0.0}

CANARIES = {
    "GITHUB_TOKEN": "canary-github", "ANTHROPIC_API_KEY": "canary-anthropic", "AWS_SECRET_ACCESS_KEY": "canary-aws",
    "AWS_ACCESS_KEY_ID": "canary-aws-id", "MY_SERVICE_TOKEN": "canary-token", "DB_PASSWORD": "canary-pw",
    "SOME_SECRET_THING": "canary-secret", "OPENAI_API_KEY": "canary-openai", "TORCH_TOKEN": "canary-torch",
}


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.slow) if name != "local" else name
                        for name in sorted([*EXECUTORS, "slurm"])])
def executor(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executor]:
    if request.param == "slurm":  # a real batch job on the session's local cluster (skipped without Slurm)
        from bot.executors.slurm import SlurmExecutor
        from infrarsi.contract.model import SlurmLaunch

        request.getfixturevalue("slurm_cluster")
        yield SlurmExecutor(SlurmLaunch(), workdir=tmp_path_factory.mktemp("slurm-jobs"), poll_s=0.2)
        return
    if request.param == "actions":
        yield from _actions(request.getfixturevalue("tmp_path"), request.getfixturevalue("tmp_path_factory"))
        return
    yield EXECUTORS[request.param]()


class _CommitPushDispatch(Executor):
    """The Actions executor as the bot drives it (bot.stages.run.candidate): the job's directory is a trial
    branch's worktree; what the test wrote is committed before ``execute`` pushes and dispatches it.

    Paths into the repository are made relative, so the runner runs the job from its own checkout of the
    pushed branch, not the bot's file; what the job writes to absolute paths lands where the test reads it.
    """

    name = "actions"

    def __init__(self, inner: Executor, repo: Path) -> None:
        self.inner, self.repo = inner, repo

    def execute(self, spec: TrialSpec) -> Execution:
        from bot.workspace.commits import is_dirty
        from tests.support.repos import commit_all

        if is_dirty(self.repo):
            commit_all(self.repo, "candidate")
        prefix = str(self.repo) + "/"
        argv = tuple(a.removeprefix(prefix) for a in spec.argv)
        return self.inner.execute(replace(spec, argv=argv))


def _actions(repo: Path, factory: pytest.TempPathFactory) -> Iterator[Executor]:
    import pygit2

    from bot.executors.actions import ActionsExecutor, ActionsSettings
    from bot.forges.github import GitHubForge
    from bot.forges.github_api import GitHubTarget
    from tests.support.repos import init_repo
    from tests.support.fake_github import TOKEN, FakeGitHub, TrialWorkflowRunner

    fake = FakeGitHub(factory.mktemp("github")).start()
    try:
        init_repo(repo, {".gitignore": "logs/\n"})
        git = pygit2.Repository(str(repo))
        git.branches.local.create("infrarsi/contract/1", git.head.peel(pygit2.Commit))
        git.set_head("refs/heads/infrarsi/contract/1")
        fake.plan_for = TrialWorkflowRunner(fake)
        forge = GitHubForge(GitHubTarget(owner=fake.owner, repo=fake.name, base_url=fake.url), TOKEN)
        inner = ActionsExecutor(forge.client, push=lambda root, branch: forge.push(root, branch, force=True),
                                settings=ActionsSettings(poll_interval_s=0.05))
        yield _CommitPushDispatch(inner, repo)
    finally:
        fake.stop()


def _script(tmp_path: Path, body: str) -> tuple[str, ...]:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return (sys.executable, str(path))


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_steps_are_stamped_by_the_executor(executor: Executor, tmp_path: Path) -> None:
    argv = _script(tmp_path, PROBE + """
import time
for i in range(1, 7):
    time.sleep(0.1)
    step(i, loss=1.0 / i, tokens=64, t=i * 0.001)   # the job claims 1 ms steps
""")
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=30 + STARTUP_S[executor.name]))
    assert ex.returncode == 0
    assert [e.step for e in ex.events] == [1, 2, 3, 4, 5, 6]
    metrics = summarize(ex, warmup=1, measured=5)
    assert 0.08 < metrics.step_time_s < 0.5  # the bot's clock, not the job's
    assert metrics.child_step_time_s == pytest.approx(0.001)
    assert metrics.loss == pytest.approx([1 / 2, 1 / 3, 1 / 4, 1 / 5, 1 / 6])
    assert classify(ex, metrics, warmup=1, measured=5, tokens_per_step=64) == (Outcome.OK, "")


def test_secrets_never_reach_the_job(executor: Executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in CANARIES.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "env.json"
    argv = _script(tmp_path, f"""
import json, os
json.dump(dict(os.environ), open({str(out)!r}, "w"))
print("\\n".join(f"{{k}}={{v}}" for k, v in os.environ.items()))
""")
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=30 + STARTUP_S[executor.name],
                                    log_dir=str(tmp_path / "logs"),
                                    env=(("OMP_NUM_THREADS", "1"),)))
    assert ex.returncode == 0
    seen = json.loads(out.read_text())
    printed = (tmp_path / "logs" / "stdout.log").read_text()
    for name, value in CANARIES.items():
        assert name not in seen
        assert value not in printed
    assert seen["OMP_NUM_THREADS"] == "1"
    assert "PATH" in seen


def test_hang_with_a_forked_grandchild_times_out_and_leaves_nothing(executor: Executor, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    argv = _script(tmp_path, f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if os.fork() == 0:
    time.sleep(600)
    os._exit(0)
open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(600)
""")
    start = time.monotonic()
    slack = STARTUP_S[executor.name]
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=2.0 + INSIDE_TIMEOUT_S[executor.name]))
    assert time.monotonic() - start < 15 + slack
    metrics = summarize(ex, warmup=1, measured=2)
    assert classify(ex, metrics, warmup=1, measured=2, tokens_per_step=1)[0] is Outcome.TIMEOUT
    recorded = [int(p) for p in pids.read_text().split()]
    assert set(recorded) <= set(ex.pids)
    assert len(ex.pids) >= 3  # the job, its subprocess and its fork
    deadline = time.monotonic() + 5
    while _alive(list(ex.pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(list(ex.pids)) == []


def test_memory_limit_kills_the_tree_and_censors_the_peak(executor: Executor, tmp_path: Path) -> None:
    argv = _script(tmp_path, """
import subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
hog = []
for _ in range(400):
    hog.append(bytearray(8 * 2**20))  # 8 MiB at a time, touched
    time.sleep(0.01)
time.sleep(600)
""")
    limit = 300 * 2**20
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=60 + STARTUP_S[executor.name],
                                    memory_limit_bytes=limit))
    assert ex.killed_for == "memory"
    metrics = summarize(ex, warmup=1, measured=2, memory_limit_bytes=limit)
    outcome, reason = classify(ex, metrics, warmup=1, measured=2, tokens_per_step=1)
    assert outcome is Outcome.OOM
    assert metrics.peak_mem_censored and metrics.peak_mem_bytes >= limit
    deadline = time.monotonic() + 5
    while _alive(list(ex.pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(list(ex.pids)) == []


def test_the_memory_a_job_holds_across_steps_is_told_from_its_peak(executor: Executor, tmp_path: Path) -> None:
    # 80 MiB held for the whole run, 200 MiB more inside each step: the peak has both, the steady
    # footprint (what the memory model splits the peak by) only the first
    argv = _script(tmp_path, PROBE + """
import time
held = b"h" * (80 * 2**20)
for i in range(1, 9):
    transient = b"t" * (200 * 2**20)   # filled, so resident; freed (unmapped) at del
    time.sleep(0.15)
    del transient
    time.sleep(0.15)
    step(i)
""")
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=60 + STARTUP_S[executor.name]))
    assert ex.returncode == 0
    metrics = summarize(ex, warmup=1, measured=7)
    mib = 2**20
    assert metrics.peak_mem_bytes >= 280 * mib
    assert metrics.steady_mem_bytes is not None
    assert 80 * mib <= metrics.steady_mem_bytes <= metrics.peak_mem_bytes - 150 * mib
    assert metrics.device_peak_mem_bytes is None  # no GPU: the device memory reporter says nothing


# A job whose torch.cuda answers as an 80 GiB GPU would (this machine has none): the allocator's peak reservation
# grows to 1,800 MiB, what it holds after a step falls to 500 MiB at step 5 (weights, gradients, optimizer state),
# and 700 MiB of the device are taken by the CUDA context and others, so the allocator could grow to 80 GiB - 700 MiB.
FAKE_GPU = """
import torch
MiB, TOTAL, OTHERS = 2**20, 80 * 2**30, 700 * 2**20
now = {"peak": 0, "held": 0}
cuda = torch.cuda
cuda.is_available = lambda: True
cuda.is_initialized = lambda: True
cuda.device_count = lambda: 1
cuda.memory_stats_as_nested_dict = lambda device=None: {  # the allocator's counters, as torch._C gives them
    "reserved_bytes": {"all": {"peak": now["peak"], "current": now["peak"]}},
    "allocated_bytes": {"all": {"current": now["held"], "peak": now["peak"]}}}
cuda.mem_get_info = lambda device=None: (TOTAL - OTHERS - now["peak"], TOTAL)
cuda.get_per_process_memory_fraction = lambda device=None: 1.0
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(1, 9):
    now["peak"] = max(now["peak"], (1000 + 100 * i) * MiB)
    now["held"] = (500 if i == 5 else 600 + 10 * i) * MiB
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    step(i)
"""


@pytest.mark.parametrize("witnessed", [False, True], ids=["plain", "witnessed"])
def test_a_jobs_gpu_memory_reaches_the_bot_from_inside_its_interpreter(executor: Executor, tmp_path: Path,
                                                                        witnessed: bool) -> None:
    # The bot cannot see GPU memory from outside; every trial's interpreter carries the reporter (with the
    # witness or without it), and it speaks on the probe channel whatever the executor
    argv = _script(tmp_path, PROBE + FAKE_GPU)
    spec = TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=60 + STARTUP_S[executor.name],
                     witness=3 if witnessed else None, expected_steps=8 if witnessed else None)
    ex = executor.execute(spec)
    assert ex.returncode == 0 or ex.stopped_after_steps, ex.stderr_tail  # a slow exit is ended after step 8
    assert ex.witness_error is None and (ex.witness is not None) is witnessed
    metrics = summarize(ex, warmup=1, measured=7)
    mib = 2**20
    assert metrics.device_peak_mem_bytes == 1800 * mib
    assert metrics.device_steady_mem_bytes == 500 * mib
    assert metrics.device_capacity_bytes == 80 * 2**30 - 700 * mib
    assert not metrics.device_peak_censored


def test_crash_reports_the_stderr_tail(executor: Executor, tmp_path: Path) -> None:
    argv = _script(tmp_path, """
raise SystemExit("boom: the model diverged")
""")
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=30 + STARTUP_S[executor.name]))
    metrics = summarize(ex, warmup=1, measured=2)
    outcome, reason = classify(ex, metrics, warmup=1, measured=2, tokens_per_step=1)
    assert outcome is Outcome.CRASH
    if executor.name == "torchrun":  # both ranks fail; the agent names the first it saw
        assert ex.failed_rank in (0, 1)
        assert reason == f"exit status 1 on rank {ex.failed_rank}: boom: the model diverged"
    else:
        assert reason == "exit status 1: boom: the model diverged"


def test_stdout_regex_source(executor: Executor, tmp_path: Path) -> None:
    argv = _script(tmp_path, """
import time
for i in range(1, 5):
    time.sleep(0.05)
    print(f"step {i} | loss {2.0 / i:.4f} | tokens 32", flush=True)
""")
    regex = r"^step (?P<step>\d+) \| loss (?P<loss>\S+) \| tokens (?P<tokens>\d+)"
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=30 + STARTUP_S[executor.name],
                                    source="stdout", stdout_regex=regex))
    assert [(e.step, e.loss, e.tokens) for e in ex.events] == [(1, 2.0, 32), (2, 1.0, 32), (3, 0.6667, 32),
                                                                (4, 0.5, 32)]
    assert all(b.stamp > a.stamp for a, b in zip(ex.events, ex.events[1:]))


def test_a_command_that_cannot_start_is_a_crash(executor: Executor, tmp_path: Path) -> None:
    ex = executor.execute(TrialSpec(argv=(str(tmp_path / "missing"),), cwd=str(tmp_path), timeout_s=5))
    metrics = summarize(ex, warmup=1, measured=2)
    outcome, reason = classify(ex, metrics, warmup=1, measured=2, tokens_per_step=1)
    assert outcome is Outcome.CRASH and "could not start" in reason


def test_too_few_steps_is_invalid(executor: Executor, tmp_path: Path) -> None:
    argv = _script(tmp_path, PROBE + "\nstep(1, loss=1.0, tokens=8)\nstep(2, loss=1.0, tokens=8)\n")
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=30 + STARTUP_S[executor.name]))
    metrics = summarize(ex, warmup=1, measured=3)
    assert classify(ex, metrics, warmup=1, measured=3, tokens_per_step=8) == (
        Outcome.INVALID, "expected 4 step events, saw 2")


def test_fewer_tokens_is_invalid(executor: Executor, tmp_path: Path) -> None:
    argv = _script(tmp_path, PROBE + "\nfor i in range(1, 5):\n    step(i, loss=1.0, tokens=8 if i < 3 else 4)\n")
    ex = executor.execute(TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=30 + STARTUP_S[executor.name]))
    metrics = summarize(ex, warmup=1, measured=3)
    assert classify(ex, metrics, warmup=1, measured=3, tokens_per_step=8) == (
        Outcome.INVALID, "step 3 processed 4 tokens; the contract fixes 8 per step")


# A real (tiny) training job: token ids through an embedding, four blocks, a loss over the targets, AdamW.
# SKIP names the ranks that run only half the blocks (the block-skipping candidate of issue 16).
TRAIN = """
import os, torch
torch.manual_seed(0)
rank = int(os.environ.get("RANK", "0"))
skip = rank in {int(r) for r in os.environ.get("SKIP", "").split(",") if r}
emb = torch.nn.Embedding(64, 16)
blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))
head = torch.nn.Linear(16, 64)
params = [*emb.parameters(), *blocks.parameters(), *head.parameters()]
opt = torch.optim.AdamW(params, lr=1e-2)
data = torch.Generator().manual_seed(1)
for i in range(1, 7):
    x = torch.randint(0, 64, (4, 8), generator=data)
    y = torch.randint(0, 64, (4, 8), generator=data)
    h = emb(x)
    for b in (blocks[:2] if skip else blocks):
        h = torch.relu(b(h))
    loss = torch.nn.functional.cross_entropy(head(h).view(-1, 64), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    step(i, loss=float(loss), tokens=32)
"""


def _witnessed_record(executor: Executor, tmp_path: Path, no: int, *, skip: str = "") -> TrialRecord:
    argv = _script(tmp_path, PROBE + TRAIN)
    spec = TrialSpec(argv=argv, cwd=str(tmp_path), timeout_s=120 + STARTUP_S[executor.name], witness=2,
                     expected_steps=6, env=(("SKIP", skip),) if skip else ())
    ex = executor.execute(spec)
    metrics = summarize(ex, warmup=1, measured=5)
    outcome, reason = classify(ex, metrics, warmup=1, measured=5, tokens_per_step=32)
    return TrialRecord(run_id="w", trial_no=no, candidate=Candidate(), outcome=outcome, reason=reason,
                       metrics=metrics, executor=executor.name, stderr_tail=ex.stderr_tail)


def test_every_executor_runs_the_witness_and_a_block_skipping_candidate_is_invalid_with_the_work_named(
        executor: Executor, tmp_path: Path) -> None:
    base = [_witnessed_record(executor, tmp_path, n) for n in (1, 2)]
    for r in base:
        assert r.outcome is Outcome.OK, (r.reason, r.stderr_tail[-1500:])
        report = witnessed_report(r)
        assert report is not None and report.optimizer_steps >= 5 and report.flops
        assert report.tokens == 32  # the ids that reached the embedding in the counted step
    ranks = 2 if executor.name == "torchrun" else 1
    if ranks > 1:  # every rank witnessed, each under its own key
        assert sorted(WitnessReport.from_dict(d).rank for d in base[0].metrics.witness_ranks) == [0, 1]
    reference = build_reference(base, allowed_dtypes=("float32",))
    assert reference is not None
    same = _witnessed_record(executor, tmp_path, 3)
    assert not [c for c in record_invariants(same, reference) if not c.ok], record_invariants(same, reference)

    skipping = _witnessed_record(executor, tmp_path, 4, skip=",".join(str(r) for r in range(ranks)))
    assert skipping.outcome is Outcome.OK, skipping.reason
    rows = {c.name: c for c in record_invariants(skipping, reference)}
    assert rows["work"].broken and "less work than the baseline" in rows["work"].detail
    assert "aten.addmm" in rows["work"].detail  # the operator whose count fell is named
    if ranks > 1:  # one rank alone skipping: that rank is named, and the job's total falls too
        one = _witnessed_record(executor, tmp_path, 5, skip="1")
        rows = {c.name: c for c in record_invariants(one, reference)}
        assert rows["work"].broken and "rank 1" in rows["work"].detail, rows["work"].detail
        assert rows["work_total"].broken
