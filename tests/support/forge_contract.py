"""The contract every :class:`infrarsi.seams.forge.Forge` must pass (Optuna's ``pytest_storages`` pattern).

Use it from a test module by importing the tests and providing one fixture::

    from tests.support.forge_contract import *  # noqa: F401,F403  (the test functions)

    @pytest.fixture
    def forge_harness(tmp_path) -> ForgeHarness:
        ...  # a forge plus the human side of it (reviews, closing) for this forge

The harness gives the suite what the bot's verbs deliberately cannot do: act as
a human (submit a review, close a pull request) and look at the server's state
directly (a branch on the remote, the comments, the statuses). ``repo`` is a
local, non-bare git repository whose ``main`` branch has been pushed to the
forge as the base every pull request targets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import pygit2
import pytest

from tests.support.repos import commit_on
from infrarsi.seams.forge import (
    Forge,
    ForgeError,
    MergeMethod,
    MergeMethodRefused,
    PullRequestDraft,
    ReviewState,
    StatusState,
    approvals,
)

__all__ = [
    "ForgeHarness",
    "commit_on",
    "test_push_returns_the_commit_and_is_idempotent",
    "test_push_refuses_a_non_fast_forward_unless_forced",
    "test_find_pr_of_an_unknown_branch_is_none",
    "test_get_pr_by_number",
    "test_record_path_is_none_or_a_file_naming_the_pull_request",
    "test_ensure_pr_opens_once_then_updates_then_leaves_alone",
    "test_ensure_pr_needs_a_pushed_head",
    "test_a_closed_pr_stays_closed_unless_reopen",
    "test_pr_head_follows_pushes",
    "test_ensure_comment_keeps_one_comment_per_marker",
    "test_request_review_is_idempotent",
    "test_reviews_and_approvals_of_the_current_head",
    "test_merge_needs_the_expected_head",
    "test_merge_lands_on_the_base",
    "test_set_status_keeps_the_latest_per_context",
    "test_every_merge_method_lands_the_head_tree",
    "test_a_refused_merge_method_merges_nothing_and_says_which",
    "test_required_approvals_are_read_and_enforced",
    "test_an_unprotected_base_has_no_rules",
    "test_enqueue_without_a_merge_queue_is_refused",
]


class ForgeHarness(Protocol):
    """A forge under test and the human/server side the suite needs around it."""

    forge: Forge
    repo: Path  # local repository, ``main`` pushed as the base

    def submit_review(self, number: int, login: str, state: ReviewState, commit_sha: str) -> None:
        """A reviewer's review of the pull request on ``commit_sha``."""
        ...

    def close_pr(self, number: int) -> None:
        """A human closes the pull request without merging."""
        ...

    def remote_branch(self, branch: str) -> str | None:
        """The commit id of ``branch`` on the forge, or None when it has no such branch."""
        ...

    def comments(self, number: int) -> list[str]:
        """The bodies of the pull request's issue comments, oldest first."""
        ...

    def statuses(self, sha: str) -> dict[str, StatusState]:
        """The latest state of each status context on ``sha``."""
        ...

    def allow_merge_methods(self, methods: tuple[MergeMethod, ...]) -> None:
        """The repository's settings allow only these merge methods (a human's setting)."""
        ...

    def require_approvals(self, branch: str, count: int) -> None:
        """Merging into ``branch`` needs ``count`` approving reviews (a human's branch protection)."""
        ...


def _draft(head: str, **changes: object) -> PullRequestDraft:
    fields: dict[str, object] = dict(head=head, base="main", title="InfraRSI: 1.20x faster step",
                                     body="<!-- infrarsi:run=r1 -->\n## Summary\nfaster\n",
                                     labels=("infrarsi", "performance"))
    fields.update(changes)
    return PullRequestDraft(**fields)  # type: ignore[arg-type]


def _pushed(h: ForgeHarness, branch: str, content: str = "v1\n") -> str:
    sha = commit_on(h.repo, branch, {"knobs.txt": content})
    assert h.forge.push(h.repo, branch) == sha
    return sha


def test_push_returns_the_commit_and_is_idempotent(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    sha = commit_on(h.repo, "infrarsi/promote/r1", {"a.txt": "a\n"})
    assert h.forge.push(h.repo, "infrarsi/promote/r1") == sha
    assert h.remote_branch("infrarsi/promote/r1") == sha
    assert h.forge.push(h.repo, "infrarsi/promote/r1") == sha
    assert h.remote_branch("infrarsi/promote/r1") == sha


def test_push_refuses_a_non_fast_forward_unless_forced(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    first = _pushed(h, "infrarsi/promote/r1")
    git = pygit2.Repository(str(h.repo))
    git.references.delete("refs/heads/infrarsi/promote/r1")
    other = commit_on(h.repo, "infrarsi/promote/r1", {"a.txt": "rewritten\n"})
    with pytest.raises(ForgeError, match="infrarsi/promote/r1"):
        h.forge.push(h.repo, "infrarsi/promote/r1")
    assert h.remote_branch("infrarsi/promote/r1") == first
    assert h.forge.push(h.repo, "infrarsi/promote/r1", force=True) == other
    assert h.remote_branch("infrarsi/promote/r1") == other


def test_record_path_is_none_or_a_file_naming_the_pull_request(forge_harness: ForgeHarness) -> None:
    """The optional capability is declared on every forge: a local file with the record, or None (hosted)."""
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    path = h.forge.record_path(pr.number)
    if path is not None:
        assert path.is_file() and "infrarsi/promote/r1" in path.read_text(encoding="utf-8")


def test_find_pr_of_an_unknown_branch_is_none(forge_harness: ForgeHarness) -> None:
    assert forge_harness.forge.find_pr("infrarsi/promote/nothing") is None


def test_get_pr_by_number(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    got = h.forge.get_pr(pr.number)
    assert (got.number, got.head, got.head_sha, got.state) == (pr.number, "infrarsi/promote/r1", sha, "open")
    with pytest.raises(ForgeError):
        h.forge.get_pr(pr.number + 1000)


def test_ensure_pr_opens_once_then_updates_then_leaves_alone(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    assert action == "created"
    assert (pr.head, pr.base, pr.state, pr.head_sha) == ("infrarsi/promote/r1", "main", "open", sha)
    assert set(pr.labels) == {"infrarsi", "performance"}
    assert pr.number > 0 and pr.url

    same, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    assert (same.number, action) == (pr.number, "unchanged")

    new_body = "<!-- infrarsi:run=r1 -->\n## Summary\nfaster still\n"
    updated, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1", body=new_body))
    assert (updated.number, action, updated.body) == (pr.number, "updated", new_body)
    retitled, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1", body=new_body, title="InfraRSI: 1.3x"))
    assert (retitled.number, action, retitled.title) == (pr.number, "updated", "InfraRSI: 1.3x")

    found = h.forge.find_pr("infrarsi/promote/r1")
    assert found is not None and found.number == pr.number and found.body == new_body
    other = _pushed(h, "infrarsi/promote/r2")
    second, action = h.forge.ensure_pr(_draft("infrarsi/promote/r2"))
    assert action == "created" and second.number != pr.number and second.head_sha == other


def test_ensure_pr_needs_a_pushed_head(forge_harness: ForgeHarness) -> None:
    with pytest.raises(ForgeError):
        forge_harness.forge.ensure_pr(_draft("infrarsi/promote/never-pushed"))
    assert forge_harness.forge.find_pr("infrarsi/promote/never-pushed") is None


def test_a_closed_pr_stays_closed_unless_reopen(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    h.close_pr(pr.number)
    closed, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1", body="changed\n"))
    assert (closed.number, closed.state, action) == (pr.number, "closed", "closed")
    found = h.forge.find_pr("infrarsi/promote/r1")
    assert found is not None and found.state == "closed" and found.number == pr.number
    reopened, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1", body="changed\n"), reopen=True)
    assert (reopened.number, reopened.state, action, reopened.body) == (pr.number, "open", "updated", "changed\n")


def test_pr_head_follows_pushes(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    newer = _pushed(h, "infrarsi/promote/r1", "v2\n")
    found = h.forge.find_pr("infrarsi/promote/r1")
    assert found is not None and found.number == pr.number and found.head_sha == newer


def test_ensure_comment_keeps_one_comment_per_marker(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    h.forge.ensure_comment(pr.number, "<!-- infrarsi:verify -->", "<!-- infrarsi:verify -->\nre-verifying")
    h.forge.ensure_comment(pr.number, "<!-- infrarsi:verify -->", "<!-- infrarsi:verify -->\nverified 1.2x")
    h.forge.ensure_comment(pr.number, "<!-- infrarsi:verify -->", "<!-- infrarsi:verify -->\nverified 1.2x")
    h.forge.ensure_comment(pr.number, "<!-- infrarsi:other -->", "<!-- infrarsi:other -->\nsecond")
    assert h.comments(pr.number) == ["<!-- infrarsi:verify -->\nverified 1.2x", "<!-- infrarsi:other -->\nsecond"]


def test_request_review_is_idempotent(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    h.forge.request_review(pr.number, ("alice", "bob"), ("acme/perf",))
    h.forge.request_review(pr.number, ("alice", "bob"), ("acme/perf",))
    found = h.forge.find_pr("infrarsi/promote/r1")
    assert found is not None
    assert sorted(found.requested_reviewers) == ["acme/perf", "alice", "bob"]


def test_reviews_and_approvals_of_the_current_head(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    first = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    assert h.forge.reviews(pr.number) == ()
    h.submit_review(pr.number, "mallory", "APPROVED", first)
    time.sleep(0.01)
    h.submit_review(pr.number, "alice", "APPROVED", first)
    reviews = h.forge.reviews(pr.number)
    assert [(r.login, r.state, r.commit_sha) for r in reviews] == [("mallory", "APPROVED", first),
                                                                   ("alice", "APPROVED", first)]
    assert reviews[0].submitted_at <= reviews[1].submitted_at
    counted = approvals(reviews, first, frozenset({"alice"}))
    assert [r.login for r in counted] == ["alice"]
    second = _pushed(h, "infrarsi/promote/r1", "v2\n")
    assert approvals(h.forge.reviews(pr.number), second, frozenset({"alice"})) == ()


def test_merge_needs_the_expected_head(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    base_before = h.remote_branch("main")
    with pytest.raises(ForgeError):
        h.forge.merge(pr.number, expected_head_sha="0" * 40, message="merge")
    assert h.remote_branch("main") == base_before
    found = h.forge.find_pr("infrarsi/promote/r1")
    assert found is not None and found.state == "open"


def test_merge_lands_on_the_base(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    merged = h.forge.merge(pr.number, expected_head_sha=sha, message="InfraRSI: promote r1")
    assert h.remote_branch("main") == merged
    found = h.forge.find_pr("infrarsi/promote/r1")
    assert found is not None and found.state == "merged"
    _, action = h.forge.ensure_pr(_draft("infrarsi/promote/r1", body="later\n"))
    assert action == "closed"  # a merged pull request is not reopened or edited


def test_set_status_keeps_the_latest_per_context(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    sha = _pushed(h, "infrarsi/promote/r1")
    h.forge.set_status(sha, context="infrarsi/verify", state="pending", description="re-verifying")
    h.forge.set_status(sha, context="infrarsi/verify", state="success", description="1.2x verified")
    h.forge.set_status(sha, context="infrarsi/lock", state="failure", description="lock changed")
    assert h.statuses(sha) == {"infrarsi/verify": "success", "infrarsi/lock": "failure"}


@pytest.mark.parametrize(("method", "parents"), [("merge", 2), ("squash", 1), ("rebase", 1)])
def test_every_merge_method_lands_the_head_tree(forge_harness: ForgeHarness, method: MergeMethod,
                                                parents: int) -> None:
    h = forge_harness
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    base = h.remote_branch("main")
    merged = h.forge.merge(pr.number, expected_head_sha=sha, message="InfraRSI: promote r1", method=method)
    assert h.remote_branch("main") == merged
    h.forge.fetch(h.repo, ("main",))
    git = pygit2.Repository(str(h.repo))
    landed = git.get(merged)
    assert landed.tree_id == git.get(sha).tree_id and len(landed.parent_ids) == parents
    assert str(landed.parent_ids[0]) == base


def test_a_refused_merge_method_merges_nothing_and_says_which(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    h.allow_merge_methods(("squash",))
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    assert {m for m, _ in h.forge.merge_rules(pr).refused_methods} == {"merge", "rebase"}
    base = h.remote_branch("main")
    with pytest.raises(MergeMethodRefused) as refused:
        h.forge.merge(pr.number, expected_head_sha=sha, message="m", method="merge")
    assert refused.value.method == "merge" and h.remote_branch("main") == base
    assert h.forge.merge(pr.number, expected_head_sha=sha, message="m", method="squash") == h.remote_branch("main")


def test_required_approvals_are_read_and_enforced(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    h.require_approvals("main", 2)
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    rules = h.forge.merge_rules(pr)
    assert rules.protected and rules.required_approvals == 2 and rules.base == "main"
    h.submit_review(pr.number, "alice", "APPROVED", sha)
    base = h.remote_branch("main")
    with pytest.raises(ForgeError) as refused:
        h.forge.merge(pr.number, expected_head_sha=sha, message="m")
    assert not isinstance(refused.value, MergeMethodRefused) and h.remote_branch("main") == base
    h.submit_review(pr.number, "bob", "APPROVED", sha)
    assert h.forge.merge(pr.number, expected_head_sha=sha, message="m") == h.remote_branch("main")


def test_an_unprotected_base_has_no_rules(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    rules = h.forge.merge_rules(pr)
    assert (rules.protected, rules.required_checks, rules.required_approvals, rules.code_owner_reviews,
            rules.linear_history, rules.merge_queue, rules.refused_methods) == (False, (), 0, False, False, False, ())


def test_enqueue_without_a_merge_queue_is_refused(forge_harness: ForgeHarness) -> None:
    h = forge_harness
    sha = _pushed(h, "infrarsi/promote/r1")
    pr, _ = h.forge.ensure_pr(_draft("infrarsi/promote/r1"))
    with pytest.raises(ForgeError):
        h.forge.enqueue(pr, expected_head_sha=sha)
    assert h.forge.get_pr(pr.number).state == "open"
