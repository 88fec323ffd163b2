"""The run's record on the forge: what ``promote`` needs travels with the pull request, not on the search's machine.

``apply`` pushes one branch, ``infrarsi/record/<run-id>``, holding one bot commit
whose tree is the run's record (``run.json``, ``doctor.json``, ``report.md``,
``report.json``, ``winner.diff`` and ``journal.json``, the run's trial records)
and whose parent is the winner's trial commit, so that commit travels too.
``promote`` in a fresh clone (the promote workflow's checkout has no
``.infrarsi/``) fetches that branch with the forge's credentials and restores the
run directory and the journal's records from it. The same branch is what the
pull-request body's links name: the full report and the diff are files on it.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.workspace.naming import record_branch
from infrarsi.journal import Journal
from infrarsi.rundir import RunDir, journal_path
from infrarsi.seams.forge import Forge
from infrarsi.seams.workspace import Workspace
from infrarsi.trial_record import TrialRecord

__all__ = ["record_branch", "push_record", "restore_record"]

JOURNAL_FILE = "journal.json"


def push_record(repo: Path, run_id: str, trial_commit: str, forge: Forge, *, workspace: Workspace) -> str:
    """Commit the run's record (kept as it is when unchanged) on its branch and push it; the commit id."""
    rundir = RunDir(repo, run_id)
    files = {path.name: path.read_bytes() for path in rundir.record_files() if path.is_file()}
    with Journal(journal_path(repo)) as journal:
        records = [r.to_dict() for r in journal.trials(run_id)]
    files[JOURNAL_FILE] = (json.dumps(records, indent=1, sort_keys=True, default=str) + "\n").encode()
    branch = record_branch(run_id)
    sha, tree = workspace.commit_files(tree=None, files=files, parents=[trial_commit],
                                       message=f"InfraRSI: the record of run {run_id}\n")
    tip = workspace.branch_tip(branch)
    if tip is not None:
        current = workspace.commit_info(tip)
        if current.tree == tree and list(current.parents) == [trial_commit]:
            sha = tip
    workspace.set_branch(branch, sha)
    forge.push(repo, branch, force=True)
    return sha


def restore_record(repo: Path, run_id: str, forge: Forge, *, workspace: Workspace, remote: str = "origin") -> bool:
    """Fill ``.infrarsi/runs/<run-id>/`` and the journal from the forge's record branch when this clone lacks
    the run (a fresh checkout); False when it already has it or the forge has no record of it."""
    rundir = RunDir(repo, run_id)
    if rundir.run_json.is_file():
        return False
    branch = record_branch(run_id)
    tips = forge.fetch(repo, (branch,), remote=remote)
    if branch not in tips:
        return False
    tree = workspace.list_files(tips[branch])
    rundir.path.mkdir(parents=True, exist_ok=True)
    for path in rundir.record_files():
        if path.name in tree:
            path.write_bytes(workspace.read_blob(tree[path.name]))
    records = json.loads(workspace.read_blob(tree[JOURNAL_FILE])) if JOURNAL_FILE in tree else []
    with Journal(journal_path(repo)) as journal:
        known = {r.trial_no for r in journal.trials(run_id)}
        for data in records:
            record = TrialRecord.from_dict(data)
            if record.trial_no not in known:
                journal.record_trial(record)
    return True
