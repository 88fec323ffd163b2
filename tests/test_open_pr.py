"""bot.stages.apply.open_pr: the base, the promotion branch placed once, human pushes refused, the commit message.
Git is a small pygit2 repository; no forge, no trial (``infrarsi apply`` end to end is tests/test_apply.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pygit2
import pytest

from bot.stages.apply.open_pr import ApplyError, base_branch, check_no_human_pushes, place_branch, promotion_message
from bot.stages.apply.promotion_commit import PromotionCommit
from bot.workspace import GitWorkspace
from infrarsi.seams.forge import PullRequest
from tests.support.repos import commit_on, init_repo

BRANCH = "infrarsi/promote/r1"


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, GitWorkspace, str]:
    base = init_repo(tmp_path / "repo", {"train.py": "print('step 1 loss 2.0')\n"})
    return tmp_path / "repo", GitWorkspace(tmp_path / "repo"), base


def _bot_commit(ws: GitWorkspace, base: str, text: str) -> PromotionCommit:
    sha, tree = ws.commit_files(tree=ws.commit_info(base).tree, files={"train.py": text.encode()}, parents=[base],
                                message="InfraRSI: promote run r1\n")
    return PromotionCommit(sha=sha, base=base, tree=tree, written=(), unwritten=())


def _pr(head_sha: str, state: str = "open") -> PullRequest:
    return PullRequest(number=3, head=BRANCH, base="main", title="t", body="b", state=state,  # type: ignore[arg-type]
                       head_sha=head_sha, url="u")


def test_the_base_is_the_branch_head_is_on(repo: tuple[Path, GitWorkspace, str]) -> None:
    path, ws, base = repo
    assert base_branch(ws, path) == "main"
    pygit2.Repository(str(path)).set_head(pygit2.Oid(hex=base))  # detached
    with pytest.raises(ApplyError, match=r": HEAD is not on a branch; pass --base BRANCH$"):
        base_branch(ws, path)


def test_the_same_change_on_the_same_base_keeps_the_branch_where_it_is(repo: tuple[Path, GitWorkspace, str]) -> None:
    _, ws, base = repo
    first = _bot_commit(ws, base, "fast\n")
    assert place_branch(ws, BRANCH, first) == first.sha
    again = _bot_commit(ws, base, "fast\n")  # the same tree on the same base, made again (another time stamp)
    assert place_branch(ws, BRANCH, again) == ws.branch_tip(BRANCH)
    other = _bot_commit(ws, base, "faster\n")
    assert place_branch(ws, BRANCH, other) == other.sha == ws.branch_tip(BRANCH)


def test_a_closed_or_missing_pull_request_is_not_checked(repo: tuple[Path, GitWorkspace, str]) -> None:
    _, ws, base = repo
    check_no_human_pushes(ws, None, base)
    check_no_human_pushes(ws, _pr("f" * 40, state="closed"), base)


def test_the_bots_own_commits_pass(repo: tuple[Path, GitWorkspace, str]) -> None:
    _, ws, base = repo
    check_no_human_pushes(ws, _pr(_bot_commit(ws, base, "fast\n").sha), base)


def test_a_human_commit_on_the_branch_stops_apply(repo: tuple[Path, GitWorkspace, str]) -> None:
    path, ws, base = repo
    ws.set_branch(BRANCH, _bot_commit(ws, base, "fast\n").sha)
    human = commit_on(path, BRANCH, {"notes.md": "mine"})
    with pytest.raises(ApplyError) as caught:
        check_no_human_pushes(ws, _pr(human), base)
    assert str(caught.value) == (f"pull request #3: {BRANCH} has commits by someone else ({human[:10]} Contract Test "
                                 "<contract@example.com>). Stopping: the bot does not rewrite human commits")


def test_a_head_the_bot_does_not_have_stops_apply(repo: tuple[Path, GitWorkspace, str]) -> None:
    _, ws, base = repo
    with pytest.raises(ApplyError, match=rf"^pull request #3: its head 1234567890 is not a commit InfraRSI made here "
                                         rf"and cannot be fetched; someone may have pushed to {BRANCH}\."):
        check_no_human_pushes(ws, _pr("1234567890" * 4), base)


def test_the_message_names_the_run_the_speedup_and_the_winner_in_trailers() -> None:
    report = SimpleNamespace(run_id="r1", speedup=1.234, winner="dtype=bf16", winner_digest="d1g",
                             winner_commit="abc123")
    title, trailers = promotion_message(SimpleNamespace(report=report))  # type: ignore[arg-type]
    assert title == "InfraRSI: promote run r1 (1.23x faster step)\n\ndtype=bf16\n"
    assert trailers == {"InfraRSI-Run": "r1", "InfraRSI-Candidate": "d1g", "InfraRSI-Trial-Commit": "abc123"}
