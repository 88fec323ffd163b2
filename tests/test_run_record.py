"""bot.stages.apply.run_record: the run's record committed on its own branch and pushed, and restored into a
clone that lacks the run. Git is a small pygit2 repository; the forge only notes pushes and hands back tips."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.stages.apply.run_record import JOURNAL_FILE, push_record, record_branch, restore_record
from bot.workspace import GitWorkspace
from infrarsi.journal import Journal
from infrarsi.rundir import RunDir, journal_path
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from tests.support.repos import init_repo


class _Forge:
    def __init__(self, ws: GitWorkspace, *, has: bool = True) -> None:
        self.ws, self.has, self.pushed = ws, has, []  # type: ignore[var-annotated]

    def push(self, repo: Path, branch: str, *, force: bool = False) -> None:
        self.pushed.append((branch, force))

    def fetch(self, repo: Path, branches: tuple[str, ...], *, remote: str = "origin") -> dict[str, str]:
        tips = {b: self.ws.branch_tip(b) for b in branches} if self.has else {}
        return {b: t for b, t in tips.items() if t}


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, GitWorkspace, str]:
    repo = tmp_path / "repo"
    trial = init_repo(repo, {"train.py": "print('step 1 loss 2.0')\n"})
    rundir = RunDir(repo, "r1")
    rundir.path.mkdir(parents=True)
    rundir.run_json.write_text('{"run_id": "r1"}\n')
    rundir.report_md.write_text("# report\n")
    with Journal(journal_path(repo)) as journal:
        journal.ensure_run("r1", kind="run")
        journal.record_trial(TrialRecord(run_id="r1", trial_no=1, candidate=Candidate.of({"dtype": "bf16"}),
                                         outcome=Outcome.REJECTED, reason="left the scope", cost_s=0.0))
    return repo, GitWorkspace(repo), trial


def test_the_record_is_one_bot_commit_on_the_trial_commit(run: tuple[Path, GitWorkspace, str]) -> None:
    repo, ws, trial = run
    forge = _Forge(ws)
    sha = push_record(repo, "r1", trial, forge, workspace=ws)  # type: ignore[arg-type]
    assert ws.branch_tip(record_branch("r1")) == sha == ws.branch_tip("infrarsi/record/r1")
    assert list(ws.commit_info(sha).parents) == [trial]
    files = ws.list_files(sha)
    assert sorted(files) == sorted([JOURNAL_FILE, "run.json", "report.md"])  # what exists of the record
    records = json.loads(ws.read_blob(files[JOURNAL_FILE]))
    assert [(r["trial_no"], r["outcome"]) for r in records] == [(1, "rejected")]
    assert forge.pushed == [("infrarsi/record/r1", True)]


def test_an_unchanged_record_keeps_its_commit(run: tuple[Path, GitWorkspace, str]) -> None:
    repo, ws, trial = run
    first = push_record(repo, "r1", trial, _Forge(ws), workspace=ws)  # type: ignore[arg-type]
    assert push_record(repo, "r1", trial, _Forge(ws), workspace=ws) == first  # type: ignore[arg-type]


def test_a_clone_without_the_run_gets_its_files_and_journal_back(run: tuple[Path, GitWorkspace, str]) -> None:
    repo, ws, trial = run
    push_record(repo, "r1", trial, _Forge(ws), workspace=ws)  # type: ignore[arg-type]
    rundir = RunDir(repo, "r1")
    for path in (rundir.run_json, rundir.report_md, journal_path(repo)):
        path.unlink()
    assert restore_record(repo, "r1", _Forge(ws), workspace=ws) is True  # type: ignore[arg-type]
    assert rundir.run_json.read_text() == '{"run_id": "r1"}\n'
    assert rundir.report_md.read_text() == "# report\n"
    assert not rundir.doctor_json.exists()
    with Journal(journal_path(repo)) as journal:
        assert [(r.trial_no, r.reason) for r in journal.trials("r1")] == [(1, "left the scope")]


def test_nothing_is_restored_over_a_run_present_or_from_a_forge_without_it(run: tuple[Path, GitWorkspace, str]
                                                                           ) -> None:
    repo, ws, trial = run
    assert restore_record(repo, "r1", _Forge(ws), workspace=ws) is False  # type: ignore[arg-type]
    RunDir(repo, "r1").run_json.unlink()
    assert restore_record(repo, "r1", _Forge(ws, has=False), workspace=ws) is False  # type: ignore[arg-type]
    assert not RunDir(repo, "r1").run_json.exists()
