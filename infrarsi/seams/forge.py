"""The forge seam: where promotion branches are pushed and pull requests live.

Every verb is idempotent, so a bot that is killed and rerun converges on the
same state instead of doubling it: ``ensure_pr`` finds the pull request of a
head branch before it opens one, ``ensure_comment`` edits the comment carrying
its marker instead of posting another. Two implementations pass one contract
test suite (``tests/support/forge_contract.py``): the local forge (a bare git remote
plus pull-request records on disk, the offline default) and the GitHub forge
(github3.py plus pushes through the bot's workspace).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from infrarsi.errors import BAD_INPUT, TRANSIENT, InfraRSIError

PRState = Literal["open", "closed", "merged"]
MergeMethod = Literal["merge", "squash", "rebase"]
# The bot's order of preference: a merge commit keeps the approved commit itself in the base's history; a squash
# or a rebase of the one promotion commit on an unmoved base lands the same tree.
MERGE_METHODS: tuple[MergeMethod, ...] = ("merge", "squash", "rebase")
ReviewState = Literal["APPROVED", "CHANGES_REQUESTED", "COMMENTED", "DISMISSED", "PENDING"]
StatusState = Literal["pending", "success", "failure", "error"]
EnsureAction = Literal["created", "updated", "unchanged", "closed"]


class ForgeError(InfraRSIError):
    """A forge refused or failed a request; the message says what and why."""

    exit_code = BAD_INPUT


class ForgeUnavailable(ForgeError):
    """The forge failed in a way that may pass on retry (a 5xx, a dropped connection, after the client's own
    retries): exit status 3, so a workflow can tell "retry later" from a refusal."""

    exit_code = TRANSIENT


class MergeMethodRefused(ForgeError):
    """The forge refused this merge method for this pull request (GitHub: 405 "Merge commits are not allowed
    on this repository"); nothing was merged, and another method may still be allowed."""

    def __init__(self, method: MergeMethod, reason: str) -> None:
        self.method = method
        self.reason = reason
        super().__init__(f"{method}: {reason}")


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckState:
    """A required status check and its state on a head: success, pending, failure, error, or missing."""

    context: str
    state: str


@dataclass(frozen=True, kw_only=True, slots=True)
class MergeRules:
    """What the forge says about merging into a pull request's base, as read: never guessed.

    A setting the forge would not show (a token without the permission, an endpoint the server lacks) is
    named in ``unread`` with the reason, not taken to be off. ``refused_methods`` holds only methods the
    forge said it refuses, each with where it said so; a method it did not mention may still be refused at
    the merge. ``required_checks`` leaves out the bot's own ``infrarsi/verify``, which promote posts itself.
    """

    base: str
    protected: bool = False
    refused_methods: tuple[tuple[MergeMethod, str], ...] = ()
    required_checks: tuple[CheckState, ...] = ()
    required_approvals: int = 0
    code_owner_reviews: bool = False
    linear_history: bool = False
    merge_queue: bool = False
    queue_method: MergeMethod | None = None  # the method the merge queue lands with, when it says
    unread: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueEntry:
    """A pull request's place in its base's merge queue; the forge merges it when its turn and checks come."""

    number: int
    position: int | None
    state: str  # GitHub's MergeQueueEntryState: QUEUED, AWAITING_CHECKS, MERGEABLE, UNMERGEABLE, LOCKED


@dataclass(frozen=True, kw_only=True, slots=True)
class PullRequest:
    number: int
    head: str  # branch name, without refs/heads/
    base: str
    title: str
    body: str
    state: PRState
    head_sha: str
    url: str
    draft: bool = False
    labels: tuple[str, ...] = ()
    requested_reviewers: tuple[str, ...] = ()  # logins, and teams as "org/team-slug"


@dataclass(frozen=True, kw_only=True, slots=True)
class PullRequestDraft:
    """What the bot wants a pull request to be; ``ensure_pr`` makes it so."""

    head: str
    base: str
    title: str
    body: str
    labels: tuple[str, ...] = ()
    draft: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Review:
    login: str
    state: ReviewState
    commit_sha: str  # the head the review was given on: an approval of an older head is stale
    submitted_at: float  # unix seconds


class Forge(Protocol):
    """Where a promotion becomes a pull request a team lead approves, and where it is merged.

    Call order (``infrarsi apply``, then ``infrarsi promote``): ``push`` the
    promotion branch, ``find_pr``/``ensure_pr``, ``request_review``; later
    ``get_pr``, ``reviews``, ``merge_rules``, ``set_status``, ``ensure_comment``,
    then ``merge`` (or ``enqueue`` where the base merges through a merge queue).
    Ownership: the forge owns pull requests, reviews and statuses; the caller
    owns the local repository it pushes from. Records returned are frozen
    snapshots; read again for fresh state. Thread safety: the local forge
    serialises record updates with a file lock; the GitHub forge is one HTTP
    session and is not shared between threads. Every failure raises
    :class:`ForgeError` with a message that says what to do.
    """

    name: str

    def record_path(self, number: int) -> Path | None:
        """A file on this machine that holds pull request ``number``'s record for a human to open (the
        local forge); None where the pull request lives on a server."""
        ...

    def push(self, repo: Path, branch: str, *, force: bool = False) -> str:
        """Push ``refs/heads/<branch>`` of the local repo to the forge; returns the pushed commit id.
        A ref the server rejected raises :class:`ForgeError` naming the ref and the server's reason."""
        ...

    def find_pr(self, head: str) -> PullRequest | None:
        """The pull request whose head is ``head`` (newest first: open, then closed or merged), or None."""
        ...

    def get_pr(self, number: int) -> PullRequest:
        """Pull request ``number``; ForgeError if there is none."""
        ...

    def ensure_pr(self, draft: PullRequestDraft, *, reopen: bool = False) -> tuple[PullRequest, EnsureAction]:
        """Exactly one pull request for ``draft.head``: opened if none, updated if title, body or labels
        differ, left alone if equal. A closed one stays closed (action ``closed``) unless ``reopen``
        (then reopened and updated: action ``updated``); a merged one is never edited (``closed``).
        Labels are added, never removed. A head branch that is not on the forge raises ForgeError."""
        ...

    def ensure_comment(self, number: int, marker: str, body: str) -> None:
        """One comment containing ``marker`` on the pull request, with this body."""
        ...

    def request_review(self, number: int, users: tuple[str, ...], teams: tuple[str, ...] = ()) -> None: ...

    def reviews(self, number: int) -> tuple[Review, ...]:
        """Every review of the pull request, oldest first."""
        ...

    def merge(self, number: int, *, expected_head_sha: str, message: str, method: MergeMethod = "merge") -> str:
        """Merge with ``method`` if the head is still ``expected_head_sha``; returns the commit the base moved to.
        A method the forge refuses raises :class:`MergeMethodRefused` (nothing merged); any other refusal
        (a required review or check, a conflict, another head) raises :class:`ForgeError`."""
        ...

    def enqueue(self, pr: PullRequest, *, expected_head_sha: str) -> QueueEntry:
        """Add ``pr`` to its base's merge queue if the head is still ``expected_head_sha`` (already queued: its
        entry, unchanged). A base without a merge queue, or a forge without merge queues, raises ForgeError."""
        ...

    def set_status(self, sha: str, *, context: str, state: StatusState, description: str) -> None: ...

    def fetch(self, repo: Path, branches: tuple[str, ...], *, remote: str = "origin") -> dict[str, str]:
        """Bring ``branches`` from the forge into ``refs/remotes/<remote>/`` of ``repo`` with the forge's own
        credentials; returns each fetched branch's commit id (a branch the forge lacks is left out). A failed
        fetch raises ForgeError naming the remote and the reason: never a silent fall back to a stale ref."""
        ...

    def blob_url(self, ref: str, path: str) -> str:
        """Where a reader of the pull request opens ``path`` at ``ref`` (a pushed branch or commit) on this forge."""
        ...

    def team_member(self, team: str, login: str) -> bool:
        """Whether ``login`` is an active member of ``team`` (``org/team-slug``): team approvals count."""
        ...

    def merge_rules(self, pr: PullRequest) -> MergeRules:
        """What the forge says about merging ``pr`` into its base now: the merge methods it refuses, the base's
        protection (required checks with their state on ``pr``'s head, required and code-owner reviews, linear
        history, a merge queue), and what it would not show. Read before any re-verification is spent."""
        ...


def _latest(reviews: tuple[Review, ...]) -> dict[str, Review]:
    """Each reviewer's latest deciding review (a comment decides nothing), by lower-cased login."""
    latest: dict[str, Review] = {}
    for review in sorted(reviews, key=lambda r: r.submitted_at):
        if review.state in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            latest[review.login.lower()] = review
    return latest


def approvals(reviews: tuple[Review, ...], head_sha: str, approvers: frozenset[str]) -> tuple[Review, ...]:
    """The approvals that count for promote: the latest review of each listed approver, if it approves
    ``head_sha``."""
    return tuple(r for login, r in _latest(reviews).items()
                 if login in {a.lower() for a in approvers} and r.state == "APPROVED" and r.commit_sha == head_sha)


def standing_reviews(reviews: tuple[Review, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(who approves, who requests changes), as a forge counts toward a required number of approving reviews:
    each reviewer's latest deciding review, on any head (a forge that dismisses stale approvals marks them
    DISMISSED). A deleted account (a login in parentheses) is nobody."""
    latest = [r for r in _latest(reviews).values() if not r.login.startswith("(")]
    return (tuple(r.login for r in latest if r.state == "APPROVED"),
            tuple(r.login for r in latest if r.state == "CHANGES_REQUESTED"))
