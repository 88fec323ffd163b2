"""bot.stages.apply.gate: how promote lands a pull request under the forge's rules, and what blocks it now."""
from __future__ import annotations

from bot.stages.apply.gate import MergePlan, blockers, plan_merge
from infrarsi.seams.forge import CheckState, MergeRules, PullRequest, Review


def _pr(**kw: object) -> PullRequest:
    return PullRequest(number=7, head="infrarsi/promote/r1", base="main", title="t", body="b", state="open",
                       head_sha="0123456789abcdef", url="u", **kw)  # type: ignore[arg-type]


def test_auto_tries_every_method_less_those_refused_and_merge_on_a_linear_history() -> None:
    assert plan_merge("auto", MergeRules(base="main")) == MergePlan(methods=("merge", "squash", "rebase"))
    rules = MergeRules(base="main", linear_history=True, refused_methods=(("rebase", "repo settings"),))
    plan = plan_merge("auto", rules)
    assert plan == MergePlan(methods=("squash",))
    assert isinstance(plan, MergePlan) and plan.describe() == "squash"
    assert MergePlan(methods=("merge", "squash")).describe() == "merge, else squash"


def test_a_named_method_is_the_only_one_and_its_refusal_is_one_clause() -> None:
    assert plan_merge("rebase", MergeRules(base="main")) == MergePlan(methods=("rebase",))
    refusal = plan_merge("merge", MergeRules(base="main", linear_history=True))
    assert refusal == ("merge method: [apply] merge_method = 'merge' is not allowed (main requires a linear history); "
                       "set it to 'auto' or a method main allows")


def test_auto_with_every_method_refused_names_each_reason() -> None:
    rules = MergeRules(base="dev", refused_methods=(("merge", "a"), ("squash", "b"), ("rebase", "c")))
    assert plan_merge("auto", rules) == "merge method: none is allowed (merge: a; squash: b; rebase: c)"


def test_a_merge_queue_decides_its_own_method() -> None:
    queue = MergeRules(base="main", merge_queue=True, queue_method="squash")
    plan = plan_merge("auto", queue)
    assert plan == MergePlan(queue=True, queue_method="squash")
    assert isinstance(plan, MergePlan) and plan.describe() == "through the merge queue (squash)"
    assert plan_merge("squash", queue) == MergePlan(queue=True, queue_method="squash")
    assert plan_merge("rebase", queue) == (
        "merge queue: main merges through a merge queue that lands with squash; [apply] merge_method = 'rebase' "
        "cannot be honoured: set it to 'auto' or 'squash'")
    assert MergePlan(queue=True).describe() == "through the merge queue (its own method)"


def test_nothing_blocks_a_ready_pull_request_under_no_rules() -> None:
    assert blockers(_pr(), MergeRules(base="main"), ()) == ()


def test_every_blocking_rule_is_one_clause() -> None:
    rules = MergeRules(base="main", required_approvals=2,
                       required_checks=(CheckState(context="ci", state="pending"),
                                        CheckState(context="lint", state="success")))
    reviews = (Review(login="ann", state="APPROVED", commit_sha="x", submitted_at=1.0),
               Review(login="bob", state="APPROVED", commit_sha="x", submitted_at=1.0),
               Review(login="bob", state="CHANGES_REQUESTED", commit_sha="x", submitted_at=2.0))
    assert blockers(_pr(draft=True), rules, reviews) == (
        "draft: the pull request is a draft; mark it ready for review",
        "required status check 'ci': pending on head 0123456789",
        "required approving reviews: 2 needed, 1 given (ann)",
        "required reviews: changes requested by bob")


def test_enough_approvals_block_nothing() -> None:
    rules = MergeRules(base="main", required_approvals=1)
    assert blockers(_pr(), rules, (Review(login="ann", state="APPROVED", commit_sha="x", submitted_at=1.0),)) == ()
    assert blockers(_pr(), rules, ()) == ("required approving reviews: 1 needed, 0 given",)
