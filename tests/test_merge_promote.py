"""``infrarsi promote``: merge only after a listed approver approved the current head and re-verification passed."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from bot.forges.local import LocalForge
from bot.stages.apply.merge import PromoteError, promote
from bot.workspace import GitWorkspace
from tests.support.tinygpt import infrarsi
from tests.support.repos import commit_on
from tests.support.promotion import RUN_ID, clone_template, promoted_template, reverify_passes  # noqa: F401

pytestmark = pytest.mark.slow
BRANCH = f"infrarsi/promote/{RUN_ID}"


@pytest.fixture
def applied(promoted_template: Path, tmp_path: Path) -> Path:  # noqa: F811
    repo = clone_template(promoted_template, tmp_path / "copy")
    result = infrarsi("apply", str(repo))
    assert result.returncode == 0, result.stderr
    return repo


def _forge(repo: Path) -> LocalForge:
    return LocalForge(repo.parent / "remote.git")


def _refused(repo: Path, *extra: str) -> str:
    result = infrarsi("promote", str(repo), "--pr", "1", "--pairs", "1", *extra, timeout=1500)
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stderr


def _human_push_to_main(repo: Path, tmp: Path, files: dict[str, str]) -> str:
    """Someone else merges a change into main on the forge, from their own clone."""
    other = tmp / "other"
    pygit2.clone_repository(str(repo.parent / "remote.git"), str(other), checkout_branch="main")
    sha = commit_on(other, "main", files, message="a human change")
    pygit2.Repository(str(other)).remotes["origin"].push(["refs/heads/main:refs/heads/main"])
    return sha


def test_refuses_without_an_approval(applied: Path) -> None:
    assert "pull request #1 has no approval; one of alice must approve" in _refused(applied)
    assert _forge(applied).get_pr(1).state == "open"


def test_refuses_a_non_approvers_approval(applied: Path) -> None:
    approve = infrarsi("approve", str(applied), "1", "--as", "mallory")  # refused at once (issue 45)
    assert approve.returncode == 2 and "mallory is not an approver of this repo (the contract's approvers: alice, " \
        "team acme/perf)" in approve.stderr
    _forge(applied).submit_review(1, "mallory", "APPROVED")  # on a forge where anyone may review
    assert "approved by mallory, who is not a listed approver (alice)" in _refused(applied)


def test_refuses_a_stale_approval(applied: Path) -> None:
    main = str(pygit2.Repository(str(applied)).revparse_single("main").id)
    _forge(applied).submit_review(1, "alice", "APPROVED", main)
    assert "the approval by alice is for an older head" in _refused(applied)


def test_stops_when_a_human_pushed_to_the_branch(applied: Path) -> None:
    commit_on(applied, BRANCH, {"NOTES.md": "mine\n"}, message="human fixup", start=BRANCH)
    _forge(applied).push(applied, BRANCH)
    infrarsi("approve", str(applied), "1", "--as", "alice")
    message = _refused(applied)
    assert "has commits by someone else" in message and "Contract Test" in message


def test_refuses_when_the_re_verification_fails(applied: Path, tmp_path: Path) -> None:
    """The base moved: the commit is re-created on it, and the candidate now crashes there (for real)."""
    train = (applied / "train.py").read_text()
    crash = train.replace("import argparse\n", "import argparse\nimport sys\nif 'bf16' in sys.argv:\n"
                          "    raise SystemExit('bf16 is broken on this base')\n", 1)
    assert crash != train
    _human_push_to_main(applied, tmp_path, {"train.py": crash})
    infrarsi("approve", str(applied), "1", "--as", "alice")
    message = _refused(applied)
    assert "the re-verification of the re-created commit failed, not pushing it" in message and "invalid" in message
    forge = _forge(applied)
    assert forge.get_pr(1).state == "open"
    assert "re-verification of" in forge.comments(1)[0] and " on main " in forge.comments(1)[0]


def test_a_moved_base_re_creates_the_commit_and_merges_only_after_its_own_approval(applied: Path,
                                                                                 tmp_path: Path) -> None:
    forge = _forge(applied)
    human = _human_push_to_main(applied, tmp_path, {"CHANGELOG.md": "a human change\n"})
    approved = forge.submit_review(1, "alice", "APPROVED").commit_sha
    said: list[str] = []
    asked = promote(applied, 1, workspace=GitWorkspace(applied), forge=forge, reverify=reverify_passes, say=said.append)
    # nobody approved the re-created tree: it is verified and pushed, review is asked again, nothing merges
    assert asked.recreated and asked.merge_commit is None and asked.head_sha != approved
    assert forge.get_pr(1).state == "open" and forge.get_pr(1).head_sha == asked.head_sha
    forge.submit_review(1, "alice", "APPROVED")
    result = promote(applied, 1, workspace=GitWorkspace(applied), forge=forge, reverify=reverify_passes, say=said.append)
    assert not result.recreated and result.verdict.promoted and result.head_sha == asked.head_sha
    remote = pygit2.Repository(str(applied.parent / "remote.git"))
    merge = remote.revparse_single("main")
    assert str(merge.id) == result.merge_commit and merge.committer.name == "infrarsi-local-forge"
    promoted_commit = remote.get(merge.parent_ids[1])
    assert [str(p) for p in promoted_commit.parent_ids] == [human]  # one commit, re-created on the new base
    assert b'default="bf16"' in merge.tree["train.py"].data and "CHANGELOG.md" in merge.tree
    assert forge.get_pr(1).state == "merged"
    assert forge.statuses(result.head_sha) == {"infrarsi/verify": "success"}
    with pytest.raises(PromoteError, match="is merged"):
        promote(applied, 1, workspace=GitWorkspace(applied), forge=forge, reverify=reverify_passes, say=said.append)


def test_the_local_forge_s_rules_take_promote_s_path(applied: Path) -> None:
    """Squash-only with two approvals required, offline: one line before re-verifying, then a squash that lands
    the approved tree."""
    forge = _forge(applied)
    forge.configure(merge_methods=("squash",))
    forge.protect("main", required_approvals=2)
    infrarsi("approve", str(applied), "1", "--as", "alice")
    *progress, line = _refused(applied).strip().splitlines()  # promote's progress is on stderr, before the error
    assert [p.split(" at head ")[0] for p in progress] == ["#1: approved by alice"]
    assert line == ("error: pull request #1 cannot be merged yet (nothing was re-verified): required approving "
                    "reviews: 2 needed, 1 given (alice)")
    assert forge.statuses(forge.get_pr(1).head_sha) == {}  # nothing posted: no re-verification started
    forge.submit_review(1, "bob", "APPROVED")
    said: list[str] = []
    result = promote(applied, 1, workspace=GitWorkspace(applied), forge=forge, reverify=reverify_passes, say=said.append)
    remote = pygit2.Repository(str(applied.parent / "remote.git"))
    landed = remote.revparse_single("main")
    assert result.method == "squash" and str(landed.id) == result.merge_commit
    assert landed.tree_id == remote.get(result.head_sha).tree_id
    assert [str(p) for p in landed.parent_ids] == [result.base_sha]
    assert any("merged into main by squash" in line for line in said)
