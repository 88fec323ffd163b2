"""The local forge passes the Forge contract suite, plus what only it has (records on disk, remotes by path)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from bot.forges import open_forge
from bot.forges.local import LocalForge, local_remote_path
from tests.support.repos import init_repo
from infrarsi.seams.forge import ForgeError, MergeMethod, ReviewState, StatusState
from tests.support.forge_contract import *  # noqa: F401,F403  (the contract suite's tests)
from tests.support.repos import commit_on


@dataclass
class LocalHarness:
    forge: LocalForge
    repo: Path

    def submit_review(self, number: int, login: str, state: ReviewState, commit_sha: str) -> None:
        self.forge.submit_review(number, login, state, commit_sha)

    def close_pr(self, number: int) -> None:
        self.forge.close(number)

    def remote_branch(self, branch: str) -> str | None:
        ref = pygit2.Repository(str(self.forge.remote)).references.get(f"refs/heads/{branch}")
        return str(ref.target) if ref is not None else None

    def comments(self, number: int) -> list[str]:
        return self.forge.comments(number)

    def statuses(self, sha: str) -> dict[str, StatusState]:
        return self.forge.statuses(sha)

    def allow_merge_methods(self, methods: tuple[MergeMethod, ...]) -> None:
        self.forge.configure(merge_methods=methods)

    def require_approvals(self, branch: str, count: int) -> None:
        self.forge.protect(branch, required_approvals=count)


def make_local(tmp_path: Path) -> tuple[Path, Path]:
    """A repository on ``main`` with a bare ``origin`` holding ``main``."""
    remote = tmp_path / "remote.git"
    pygit2.init_repository(str(remote), bare=True, initial_head="main")
    repo = tmp_path / "repo"
    init_repo(repo, {"README.md": "# r\n", "knobs.txt": "v0\n"})
    pygit2.Repository(str(repo)).remotes.create("origin", str(remote))
    return repo, remote


@pytest.fixture
def forge_harness(tmp_path: Path) -> LocalHarness:
    repo, remote = make_local(tmp_path)
    forge = LocalForge(remote)
    forge.push(repo, "main")
    return LocalHarness(forge=forge, repo=repo)


def test_records_are_json_and_markdown_beside_the_remote(forge_harness: LocalHarness) -> None:
    h = forge_harness
    commit_on(h.repo, "infrarsi/promote/r1", {"a.txt": "a\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    from infrarsi.seams.forge import PullRequestDraft
    pr, _ = h.forge.ensure_pr(PullRequestDraft(head="infrarsi/promote/r1", base="main", title="t",
                                               body="## Summary\nbody\n"))
    record = json.loads(h.forge.record_path(pr.number).read_text())
    assert record["number"] == pr.number and record["body"] == "## Summary\nbody\n"
    assert "## Summary" in h.forge.record_path(pr.number).with_suffix(".md").read_text()
    assert pr.url.startswith("file://") and pr.url.endswith(f"{pr.number}.md")


def test_open_forge_finds_the_bare_remote_by_path(tmp_path: Path) -> None:
    repo, remote = make_local(tmp_path)
    assert local_remote_path(repo) == remote.resolve()
    forge = open_forge("local", repo)
    assert isinstance(forge, LocalForge) and forge.remote == remote.resolve()
    with pytest.raises(ForgeError, match="no git remote 'upstream'"):
        open_forge("local", repo, "upstream")
    with pytest.raises(ForgeError, match="unknown forge 'gitea'"):
        open_forge("gitea", repo)
    pygit2.Repository(str(repo)).remotes.create("hosted", "https://github.com/acme/train.git")
    with pytest.raises(ForgeError, match="not a repository on disk"):
        open_forge("local", repo, "hosted")


def test_merge_conflict_is_refused_with_the_paths(forge_harness: LocalHarness) -> None:
    h = forge_harness
    sha = commit_on(h.repo, "infrarsi/promote/r1", {"knobs.txt": "bot\n"})
    h.forge.push(h.repo, "infrarsi/promote/r1")
    from infrarsi.seams.forge import PullRequestDraft
    pr, _ = h.forge.ensure_pr(PullRequestDraft(head="infrarsi/promote/r1", base="main", title="t", body="b"))
    commit_on(h.repo, "main", {"knobs.txt": "human\n"})
    h.forge.push(h.repo, "main")
    with pytest.raises(ForgeError, match="knobs.txt"):
        h.forge.merge(pr.number, expected_head_sha=sha, message="m")
