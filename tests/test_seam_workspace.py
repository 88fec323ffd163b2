"""infrarsi/seams/workspace.py: the stages' only way to git, as its one implementation declares it (the behaviour
is the contract suite's, tests/test_git_workspace_contract.py)."""

from __future__ import annotations

from pathlib import Path

from bot.workspace import GitWorkspace
from infrarsi.seams.workspace import Workspace
from tests.support.repos import init_repo
from tests.support.seams import mismatches, protocol_members


def test_git_workspace_takes_every_call_the_seam_declares() -> None:
    assert "create_worktree" in protocol_members(Workspace) and "read_blob" in protocol_members(Workspace)
    assert mismatches(GitWorkspace, Workspace) == []


def test_a_git_workspace_is_a_workspace_at_run_time(tmp_path: Path) -> None:
    init_repo(tmp_path / "repo", {"a.txt": "a\n"})
    assert isinstance(GitWorkspace(tmp_path / "repo"), Workspace)


def test_the_check_names_what_an_implementation_lacks() -> None:
    class Partial:
        def create_worktree(self, *, base: str) -> None: ...

    found = mismatches(Partial, Workspace)
    assert "create_worktree(): no parameter 'run_id'" in found and "read_blob(): missing" in found
