"""What stands between an approved promotion and the merge: the forge's rules, read before any device time.

``promote`` asks the forge for its :class:`~infrarsi.seams.forge.MergeRules`
and decides here, as pure functions, (1) how it will land the pull request —
the merge methods to try, in order, each once, or the base's merge queue — and
(2) what blocks it now. Each blocking rule is one clause naming the rule and
what is missing; promote refuses with all of them on one line before it
re-verifies anything. Nothing here bypasses a rule: what the forge would refuse,
promote refuses first, and what the forge would not show is said, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from infrarsi.seams.forge import MERGE_METHODS, MergeMethod, MergeRules, PullRequest, Review, standing_reviews

__all__ = ["MergePlan", "blockers", "plan_merge"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MergePlan:
    """How promote lands the pull request once it is re-verified."""

    methods: tuple[MergeMethod, ...] = ()  # tried in order, each once; the next only after a refusal of the method
    queue: bool = False  # the base merges through a merge queue: add it there instead of merging
    queue_method: MergeMethod | None = None

    def describe(self) -> str:
        if self.queue:
            return f"through the merge queue ({self.queue_method or 'its own method'})"
        return ", else ".join(self.methods)


def plan_merge(setting: str, rules: MergeRules) -> MergePlan | str:
    """The plan for ``[apply] merge_method = setting`` under ``rules``, or the clause that refuses it.

    ``auto`` keeps the bot's order (merge, squash, rebase) less every method the forge says it refuses and, on
    a base that requires a linear history, the merge commit; methods the forge did not mention stay in, to be
    tried. A named method is the only one; a merge queue decides its own method."""
    refused = dict(rules.refused_methods)
    if rules.linear_history:
        refused.setdefault("merge", f"{rules.base} requires a linear history")
    if rules.merge_queue:
        if setting != "auto" and rules.queue_method and rules.queue_method != setting:
            return (f"merge queue: {rules.base} merges through a merge queue that lands with {rules.queue_method}; "
                    f"[apply] merge_method = {setting!r} cannot be honoured: set it to 'auto' or "
                    f"{rules.queue_method!r}")
        return MergePlan(queue=True, queue_method=rules.queue_method)
    wanted: tuple[MergeMethod, ...] = MERGE_METHODS if setting == "auto" else (setting,)  # type: ignore[assignment]
    usable = tuple(m for m in wanted if m not in refused)
    if usable:
        return MergePlan(methods=usable)
    if setting == "auto":
        return "merge method: none is allowed (" + "; ".join(f"{m}: {refused[m]}" for m in wanted) + ")"
    return (f"merge method: [apply] merge_method = {setting!r} is not allowed ({refused[setting]}); set it to "
            f"'auto' or a method {rules.base} allows")


def blockers(pr: PullRequest, rules: MergeRules, reviews: tuple[Review, ...]) -> tuple[str, ...]:
    """Every rule that would make the forge refuse the merge now, one clause each (empty: none).

    The bot's own ``infrarsi/verify`` is not among the required checks: promote posts it after re-verifying.
    Approvals count as the forge counts them toward a required number (each reviewer's latest deciding review);
    a listed approver's approval of the current head is checked separately, before this."""
    out = ["draft: the pull request is a draft; mark it ready for review"] if pr.draft else []
    out += [f"required status check {c.context!r}: {c.state} on head {pr.head_sha[:10]}"
            for c in rules.required_checks if c.state != "success"]
    if rules.required_approvals:
        approving, changes = standing_reviews(reviews)
        if len(approving) < rules.required_approvals:
            out.append(f"required approving reviews: {rules.required_approvals} needed, {len(approving)} given"
                       + (f" ({', '.join(approving)})" if approving else ""))
        if changes:
            out.append(f"required reviews: changes requested by {', '.join(changes)}")
    return tuple(out)
