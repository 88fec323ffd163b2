"""``infrarsi run`` with ``[launch] executor = "actions"``: every trial of the run, the doctor's baselines and
the verification pairs included, is pushed, dispatched to the trial workflow on the local GitHub-shaped
server, run by a simulated self-hosted runner (a clone of the pushed branch and the workflow's real step,
``python -m bot.executors.actions``) and read back from its artifact; the run finishes with its verdicts. The bot's
own process never imports torch: the device probe and what the job's torch has are asked of the job's
interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from tests.support.repos import commit_tree
from infrarsi.journal import Journal
from infrarsi.trial_record import Outcome
from tests.support.tinygpt import NO_COMPILE, infrarsi
from tests.support.fake_github import TOKEN, FakeGitHub, TrialWorkflowRunner

pytestmark = pytest.mark.slow

#: ``python -m bot`` that says, last on stderr, whether its own process imported torch.
BOT_SAYING_IF_TORCH = ("import sys\nfrom bot.cli.main import main\ncode = main()\n"
                       "print('torch in the bot:', sorted(m for m in sys.modules if m.split('.')[0] == 'torch'), "
                       "file=sys.stderr)\nsys.exit(code)\n")

ACTIONS = """
[verify]
top_k = 1
max_pairs = 4

[launch]
executor = "actions"

[launch.actions]
poll_interval_s = 0.1
"""


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    server = FakeGitHub(tmp_path / "github").start()
    yield server
    server.stop()


def test_a_run_dispatches_every_trial_to_the_runners_and_finishes(tiny_repo: Path, fake: FakeGitHub) -> None:
    repo = tiny_repo
    contract = repo / "infrarsi.toml"
    contract.write_text(contract.read_text() + NO_COMPILE + ACTIONS)
    assert infrarsi("lock", str(repo)).returncode == 0
    (repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    commit_tree(repo, "the training repo")
    pygit2.Repository(str(repo)).remotes.create("origin", fake.clone_url)
    runner = TrialWorkflowRunner(fake)
    fake.plan_for = runner

    env = {**os.environ, "INFRARSI_GITHUB_TOKEN": TOKEN}
    result = subprocess.run([sys.executable, "-c", BOT_SAYING_IF_TORCH, "run", str(repo), "--run-id", "gh",
                             "--budget-trials", "4", "--initial", "4", "--repeats", "2", "--no-bank"],
                            capture_output=True, text=True, timeout=1800, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == "torch in the bot: []"
    ending, pruned, wrote = result.stdout.strip().splitlines()[-3:]
    assert pruned.startswith("trial branches of run gh: removed"), pruned
    assert ending.startswith(("verified speedup", "no candidate was verified faster than the baseline")), ending
    assert wrote.endswith("run.json") and "trial 4/4" in result.stderr

    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        records = journal.trials("gh")
        assert journal.pending("gh") == []
    summary = json.loads((repo / ".infrarsi" / "runs" / "gh" / "run.json").read_text())
    # the search, after the doctor's baselines: a trial measured again after the machine's speed changed counts once
    settled = [t for t in summary["trials"] if not t["superseded"]]
    assert len(settled) == 4, summary["trials"]
    assert len(records) >= 2 + 4
    assert {r.executor for r in records} == {"actions"}
    assert sum(r.outcome is Outcome.OK for r in records) >= 4, [(r.outcome, r.reason) for r in records]

    # Every trial ran on a runner, once, from the commit the bot made and pushed for it.
    dispatches = fake.calls("POST", "/repos/acme/trainer/actions/workflows/infrarsi-trial.yml/dispatches")
    assert len(dispatches) == len(records) == len(runner.checkouts)
    ran = dict(runner.checkouts)
    for r in records:
        branch = f"infrarsi/gh/{r.trial_no}"
        assert ran[branch] == r.commit == fake.branch(branch), branch
    ok = next(r for r in records if r.outcome is Outcome.OK)
    assert ok.metrics.step_time_s and ok.cost_s >= ok.metrics.step_time_s * 8  # the runner held, set up included
    assert (repo / ".infrarsi" / "logs" / "gh" / str(ok.trial_no) / "stdout.log").is_file()
