"""bot.stages.apply.merge: whose approval lets promote merge, and how a merge method the forge refuses is followed
by the next — decided here with a forge stub, nothing re-verified (promote end to end: tests/test_merge_promote.py
and tests/test_merge_promote_github.py, both slow)."""
from __future__ import annotations

import pytest

from bot.stages.apply.gate import MergePlan
from bot.stages.apply.merge import PromoteError, _approved, _merge, _refuse_if
from infrarsi.seams.forge import ForgeError, MergeMethodRefused, PullRequest, Review

HEAD = "a" * 40
OLD = "b" * 40


class _Forge:
    def __init__(self, *, members: dict[str, set[str]] | None = None, refuses: dict[str, Exception] | None = None
                 ) -> None:
        self.members, self.refuses, self.merges = members or {}, refuses or {}, []  # type: ignore[var-annotated]

    def team_member(self, team: str, login: str) -> bool:
        return login in self.members.get(team, set())

    def merge(self, number: int, *, expected_head_sha: str, message: str, method: str) -> str:
        self.merges.append(method)
        if method in self.refuses:
            raise self.refuses[method]
        return "m" * 40


PR = PullRequest(number=5, head="infrarsi/promote/r1", base="main", title="t", body="b", state="open",
                 head_sha=HEAD, url="u")


def _review(login: str, sha: str = HEAD, state: str = "APPROVED", at: float = 1.0) -> Review:
    return Review(login=login, state=state, commit_sha=sha, submitted_at=at)  # type: ignore[arg-type]


def _refusal(reviews: tuple[Review, ...], users: tuple[str, ...] = ("lead",), teams: tuple[str, ...] = (),
             forge: _Forge | None = None) -> str:
    with pytest.raises(PromoteError) as caught:
        _approved(forge or _Forge(), PR, reviews, users, teams)  # type: ignore[arg-type]
    return str(caught.value)


def test_a_listed_approvers_approval_of_the_head_counts_whatever_the_case() -> None:
    assert _approved(_Forge(), PR, (_review("Lead"),), ("lead",)) == "Lead"  # type: ignore[arg-type]


def test_a_team_members_approval_counts_and_a_strangers_does_not() -> None:
    forge = _Forge(members={"org/leads": {"ann"}})
    assert _approved(forge, PR, (_review("ann"),), ("lead",), ("org/leads",)) == "ann"  # type: ignore[arg-type]
    assert _refusal((_review("bob"),), teams=("org/leads",), forge=forge) == (
        "pull request #5: approved by bob, who is not a listed approver (lead); a listed approver must approve")


def test_an_approval_of_an_older_head_is_stale() -> None:
    assert _refusal((_review("lead", sha=OLD),)) == (
        f"pull request #5: the approval by lead is for an older head; the head is now {HEAD[:10]}: approve the "
        "current head")


def test_a_later_request_for_changes_withdraws_the_approval() -> None:
    reviews = (_review("lead", at=1.0), _review("lead", state="CHANGES_REQUESTED", at=2.0))
    assert _refusal(reviews) == f"pull request #5 has no approval; one of lead must approve head {HEAD[:10]}"


def test_no_listed_approvers_means_nobody_can_approve() -> None:
    assert _refusal((_review("lead"),), users=()) == (
        "the contract lists no approvers ([approvers] users or teams); nobody can approve a promotion")


def test_blocking_rules_are_one_line_before_anything_is_reverified() -> None:
    _refuse_if(5, [])
    with pytest.raises(PromoteError) as caught:
        _refuse_if(5, ["draft: mark it ready", "required status check 'ci': pending"])
    assert str(caught.value) == ("pull request #5 cannot be merged yet (nothing was re-verified): draft: mark it "
                                 "ready; required status check 'ci': pending")


def test_a_refused_method_is_followed_by_the_next_once() -> None:
    said: list[str] = []
    forge = _Forge(refuses={"merge": MergeMethodRefused("merge", "Merge commits are not allowed")})
    plan = MergePlan(methods=("merge", "squash", "rebase"))
    assert _merge(forge, PR, plan, HEAD, "msg", said.append) == ("m" * 40, "squash")  # type: ignore[arg-type]
    assert forge.merges == ["merge", "squash"]
    assert said == ["#5: the forge refused merge (Merge commits are not allowed); trying squash"]


def test_every_method_refused_or_another_forge_error_stops_promote() -> None:
    refused = _Forge(refuses={m: MergeMethodRefused(m, "no") for m in ("merge", "squash")})  # type: ignore[arg-type]
    plan = MergePlan(methods=("merge", "squash"))
    with pytest.raises(PromoteError) as caught:
        _merge(refused, PR, plan, HEAD, "msg", lambda _: None)  # type: ignore[arg-type]
    assert str(caught.value) == ("#5: the forge refused every merge method promote may use (merge: no; squash: no); "
                                 "set [apply] merge_method to one the repository allows")
    broken = _Forge(refuses={"merge": ForgeError("head moved")})
    with pytest.raises(PromoteError, match=r"^#5: the forge refused the merge: head moved$"):
        _merge(broken, PR, plan, HEAD, "msg", lambda _: None)  # type: ignore[arg-type]
    assert broken.merges == ["merge"]
