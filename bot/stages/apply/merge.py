"""``infrarsi promote --pr N``: merge a promotion only after a listed approver approved its current head.

In order, each step refusing with a message that says why:

1. the pull request is open and is a promotion (head ``infrarsi/promote/<run>``);
2. a listed approver's latest review approves the current head (a listed user, or
   a member of a listed team; a non-approver's approval does not count, nor one
   given to an older head);
3. the forge would merge it: its rules are read (:meth:`Forge.merge_rules`) and
   every one that blocks — a draft, a required check not green, too few
   approving reviews, a merge method the repository or a linear history
   refuses — is one clause of a refusal (:mod:`bot.stages.apply.gate`), checked
   before a re-verification is spent; what the forge would not show is said;
4. both branches are fetched with the forge's credentials (a failed fetch stops
   it: never a stale base); nobody but the bot committed on the branch (a human
   push stops it: the bot never rewrites human commits); where the base requires
   code-owner reviews, every changed file with owners has an owner's approval
   (:mod:`bot.stages.apply.codeowners`);
5. if the base moved, the single commit is re-created on the new base (the
   winner's tree diff merged onto it, knobs and lock written again), re-verified
   there, pushed, and review is requested again: it STOPS without merging, because
   nobody approved that tree. The next approval of the new head merges it;
6. otherwise the candidate is re-verified against the base it will land on
   (interleaved A/B, :func:`bot.stages.run.verify.verify_candidate`); anything but
   ``promoted`` refuses, and so does a base that moved during the re-verification;
7. the forge merges, checking the head is still the one approved and verified,
   with the first method of the plan it accepts (``[apply] merge_method``; a
   method refused at the merge is followed by the next, once each), and the
   landed commit's tree is checked to be the approved tree; or, where the base
   merges through a merge queue, the pull request is added to the queue.

So no commit reaches the base without an approval of its exact tree, verified
on the base it lands on. The bot never pushes to the base branch: the merge is the forge's.
Git is reached only through the :class:`~infrarsi.seams.workspace.Workspace` the caller gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.stages.apply.codeowners import code_owner_blocker
from bot.stages.apply.gate import MergePlan, blockers, plan_merge
from bot.stages.apply.open_pr import ApplyError, check_no_human_pushes, make_commit, place_branch
from bot.stages.doctor.baseline import load_doctor
from bot.workspace.naming import PROMOTE_PREFIX, VERIFY_CONTEXT
from bot.stages.apply.run_record import record_branch, restore_record
from bot.stages.report.build import ReportError, load_report
from bot.workspace.errors import GitLayerError
from infrarsi.contract import Contract, load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.errors import NOT_RIGHT, InfraRSIError
from infrarsi.seams.forge import Forge, ForgeError, MergeMethod, MergeMethodRefused, PullRequest, Review, approvals
from infrarsi.seams.workspace import Workspace
from infrarsi.doctor import windowed
from infrarsi.rundir import RunDir, read_json, write_json
from infrarsi.trial_record import Candidate
from infrarsi.verdict import Verdict, VerdictKind

__all__ = ["PromoteError", "PromoteResult", "Reverify", "promote", "real_reverify", "reverify_run_id"]

VERIFY_MARKER = "<!-- infrarsi:promote -->"
# (repo, run id, candidate, base commit) -> the verdict of the candidate against that base
Reverify = Callable[[Path, str, Candidate, str], Verdict]


class PromoteError(InfraRSIError):
    """The promotion was refused; the message is what the approver reads."""

    exit_code = NOT_RIGHT


@dataclass(frozen=True, kw_only=True, slots=True)
class PromoteResult:
    number: int
    merge_commit: str | None  # None: the base moved, the commit was re-created and awaits a new approval
    head_sha: str
    base_sha: str  # the base the re-verification ran on
    recreated: bool
    verdict: Verdict
    method: MergeMethod | None = None  # how the forge merged it (None: not merged)
    queued: bool = False  # added to the base's merge queue: the forge merges it later


def reverify_run_id(run_id: str) -> str:
    """The run the re-verification of run ``run_id``'s promotion journals its trials under."""
    return f"{run_id}.promote"


def _fetch_tips(forge: Forge, repo: Path, remote: str, pr: PullRequest) -> str:
    """Fetch base and head with the forge's credentials; the base's commit id. Loud on any failure."""
    try:
        tips = forge.fetch(repo, (pr.base, pr.head), remote=remote)
    except ForgeError as exc:
        raise PromoteError(f"#{pr.number}: cannot fetch {pr.base} and {pr.head}: {exc}; not merging on a stale "
                           "base") from exc
    if pr.base not in tips:
        raise PromoteError(f"#{pr.number}: the base branch {pr.base!r} is not on the forge")
    return tips[pr.base]


def real_reverify(repo: Path, run_id: str, candidate: Candidate, base_sha: str, *, workspace: Workspace,
                  pairs: int | None = None, say: Callable[[str], None] = print, contract: Contract | None = None,
                  executor: str | None = None) -> Verdict:
    """Interleaved A/B of ``candidate`` against ``base_sha``, with the run's doctor calibration, on the
    contract's executor (or ``executor``, the ``--executor`` override)."""
    from bot.stages.run.candidate import trial_context
    from bot.executors.registry import ExecutorSetupError, build_executor, select_executor
    from infrarsi.rundir import journal_path
    from bot.stages.run.verify import verify_candidate
    from infrarsi.journal import Journal

    contract = contract if contract is not None else load_contract(repo)
    doctor = load_doctor(repo, run_id)
    if doctor is None:
        raise PromoteError(f"run {run_id} has no doctor report to re-verify against")
    with Journal(journal_path(repo)) as journal:
        contract = select_executor(windowed(contract, doctor), executor)  # the measured window the doctor sized
        try:
            chosen = build_executor(contract)
        except ExecutorSetupError as e:
            raise PromoteError(str(e)) from None
        ctx = trial_context(contract, read_lock(repo), workspace=workspace, executor=chosen, journal=journal)
        from dataclasses import replace

        ctx = replace(ctx, base=base_sha)
        # an inconclusive re-verification on this same base (the machine would not sit still) is resumed
        promote_run = reverify_run_id(run_id)
        saved = RunDir(repo, promote_run).verify_json(f"{candidate.digest()}-{base_sha[:12]}")
        earlier = read_json(saved)
        resume = Verdict.from_dict(earlier) if earlier and earlier.get("verdict") == "inconclusive" else None
        verdict = verify_candidate(ctx, run_id=promote_run, candidate=candidate, doctor=doctor, pairs=pairs,
                                   progress=lambda m: say(f"  re-verify: {m}"), resume=resume)
        write_json(saved, verdict.to_dict())
        return verdict


def _approved(forge: Forge, pr: PullRequest, reviews: tuple[Review, ...], users: tuple[str, ...],
              teams: tuple[str, ...] = ()) -> str:
    """The approving login, or PromoteError saying why there is none that counts."""
    if not users and not teams:
        raise PromoteError("the contract lists no approvers ([approvers] users or teams); nobody can approve a "
                           "promotion")
    # Members of a listed team count: asked of the forge only for logins whose latest review approves the head.
    unlisted = {r.login for r in approvals(reviews, pr.head_sha, frozenset(r.login for r in reviews))
                if r.login.lower() not in {u.lower() for u in users} and not r.login.startswith("(")}
    members = {login for login in unlisted for team in teams if forge.team_member(team, login)}
    counted = approvals(reviews, pr.head_sha, frozenset(users) | members)
    if counted:
        return counted[-1].login
    listed = {u.lower() for u in users} | {m.lower() for m in members}
    others = sorted({r.login for r in reviews if r.state == "APPROVED" and r.login.lower() not in listed})
    stale = sorted({r.login for r in reviews if r.state == "APPROVED" and r.login.lower() in listed
                    and r.commit_sha != pr.head_sha})
    if stale:
        raise PromoteError(f"pull request #{pr.number}: the approval by {', '.join(stale)} is for an older head; "
                           f"the head is now {pr.head_sha[:10]}: approve the current head")
    if others:
        raise PromoteError(f"pull request #{pr.number}: approved by {', '.join(others)}, who is not a listed "
                           f"approver ({', '.join(users)}); a listed approver must approve")
    raise PromoteError(f"pull request #{pr.number} has no approval; one of {', '.join(users)} must approve "
                       f"head {pr.head_sha[:10]}")


def _post(forge: Forge, pr: PullRequest, sha: str, base_sha: str, verdict: Verdict) -> str:
    """The verification's one comment and its status on ``sha``; returns the summary line."""
    summary = (f"re-verification of {sha[:10]} on {pr.base} {base_sha[:10]}: {verdict.kind.value}"
               + (f", {verdict.speedup:.2f}x" if verdict.speedup else "") + f" — {verdict.reason}")
    forge.ensure_comment(pr.number, VERIFY_MARKER, f"{VERIFY_MARKER}\n{summary}\n")
    forge.set_status(sha, context=VERIFY_CONTEXT, state="success" if verdict.promoted else "failure",
                     description=summary[:140])
    return summary


def promote(repo: Path, number: int, *, workspace: Workspace, forge: Forge, remote: str = "origin",
            reverify: Reverify | None = None, say: Callable[[str], None] = print, pairs: int | None = None,
            executor: str | None = None) -> PromoteResult:
    """Merge promotion ``number`` of ``repo`` (its git: ``workspace``) once approved and re-verified."""
    repo = repo.resolve()
    contract = load_contract(repo)
    pr = forge.get_pr(number)
    if pr.state != "open":
        raise PromoteError(f"pull request #{number} is {pr.state}; only an open one is promoted")
    if not pr.head.startswith(PROMOTE_PREFIX):
        raise PromoteError(f"pull request #{number} ({pr.head}) is not an InfraRSI promotion")
    run_id = pr.head.removeprefix(PROMOTE_PREFIX)
    reviews = forge.reviews(number)
    approver = _approved(forge, pr, reviews, contract.approvers.users, contract.approvers.teams)
    say(f"#{number}: approved by {approver} at head {pr.head_sha[:10]}")
    rules = forge.merge_rules(pr)
    for note in rules.unread:
        say(f"#{number}: cannot read {note}")
    plan = plan_merge(contract.apply.merge_method, rules)
    _refuse_if(number, list(blockers(pr, rules, reviews)) + ([plan] if isinstance(plan, str) else []))
    assert isinstance(plan, MergePlan)
    base_sha = _fetch_tips(forge, repo, remote, pr)
    try:
        check_no_human_pushes(workspace, pr, base_sha)
    except ApplyError as exc:
        raise PromoteError(str(exc)) from exc
    if rules.code_owner_reviews:
        owners = code_owner_blocker(workspace, base_sha, pr.head_sha, reviews, forge.team_member)
        _refuse_if(number, [owners] if owners else [])
    head = workspace.commit_info(pr.head_sha)
    try:
        if restore_record(repo, run_id, forge, workspace=workspace, remote=remote):
            say(f"#{number}: run {run_id} restored from {record_branch(run_id)} on the forge (a fresh clone)")
    except ForgeError as exc:
        raise PromoteError(f"#{number}: cannot fetch the record of run {run_id}: {exc}") from exc
    try:
        files = load_report(repo, run_id, workspace=workspace, contract=contract)
    except ReportError as exc:
        raise PromoteError(str(exc)) from exc
    report = files.report
    if not report.promoted:
        raise PromoteError(f"run {run_id} has no verified winner")
    candidate = Candidate.of(dict(report.winner_knobs), report.winner_patches)
    check = reverify or (lambda r, i, c, b: real_reverify(r, i, c, b, workspace=workspace, say=say, pairs=pairs,
                                                              contract=contract, executor=executor))
    if list(head.parents) != [base_sha]:
        say(f"#{number}: {pr.base} moved to {base_sha[:10]}; re-creating the promotion commit on it")
        try:
            commit = make_commit(workspace, contract, files, base_sha)
        except ApplyError as exc:
            raise PromoteError(f"#{number}: cannot re-create the commit on {pr.base}: {exc}") from exc
        verdict = check(repo, run_id, candidate, base_sha)
        if not verdict.promoted:
            summary = _post(forge, pr, pr.head_sha, base_sha, verdict)
            raise PromoteError(f"#{number}: the re-verification of the re-created commit failed, not pushing it: "
                               f"{summary}")
        try:
            head_sha = place_branch(workspace, pr.head, commit)
            forge.push(repo, pr.head, force=True)
        except ForgeError as exc:
            raise PromoteError(f"#{number}: cannot push the re-created commit: {exc}") from exc
        summary = _post(forge, pr, head_sha, base_sha, verdict)
        approvers = contract.approvers
        forge.request_review(number, approvers.users, approvers.teams)
        say(f"#{number}: re-created on {pr.base} {base_sha[:10]} as {head_sha[:10]} ({summary}); not merged: "
            f"the approval of {approver} was for {pr.head_sha[:10]}, so review was requested again. Approve "
            f"{head_sha[:10]} to merge it")
        return PromoteResult(number=number, merge_commit=None, head_sha=head_sha, base_sha=base_sha,
                             recreated=True, verdict=verdict)
    head_sha = pr.head_sha
    forge.set_status(head_sha, context=VERIFY_CONTEXT, state="pending",
                     description=f"re-verifying against {pr.base} {base_sha[:10]}")
    verdict = check(repo, run_id, candidate, base_sha)
    summary = _post(forge, pr, head_sha, base_sha, verdict)
    if not verdict.promoted:
        if verdict.kind is VerdictKind.INCONCLUSIVE:
            raise PromoteError(f"#{number}: the re-verification was inconclusive, not merging: {summary}; run "
                               "promote again when the machine is quiet (it resumes the re-verification)")
        raise PromoteError(f"#{number}: the re-verification failed, not merging: {summary}")
    moved = _fetch_tips(forge, repo, remote, pr)
    if moved != base_sha:
        raise PromoteError(f"#{number}: {pr.base} moved to {moved[:10]} during the re-verification on "
                           f"{base_sha[:10]}; not merging. Run promote again: it re-creates the commit on the new "
                           "base and asks for a new approval")
    if plan.queue:
        try:
            entry = forge.enqueue(pr, expected_head_sha=head_sha)
        except ForgeError as exc:
            raise PromoteError(f"#{number}: {pr.base} merges through a merge queue, and adding the pull request to "
                               f"it failed: {exc}") from exc
        say(f"#{number} is in {pr.base}'s merge queue (position {entry.position}, {entry.state.lower()}; {summary}): "
            f"the forge merges it {plan.describe()} once the queue's required checks pass; the tree that lands is "
            "the approved one only if nothing is merged ahead of it")
        return PromoteResult(number=number, merge_commit=None, head_sha=head_sha, base_sha=base_sha,
                             recreated=False, verdict=verdict, queued=True)
    message = f"InfraRSI: promote run {run_id} ({verdict.speedup:.2f}x, approved by {approver})"
    merged, method = _merge(forge, pr, plan, head_sha, message, say)
    _check_landed_tree(forge, repo, workspace, remote, pr, merged, method, head_sha)
    say(f"#{number} merged into {pr.base} by {method}: {merged[:10]}, the approved tree ({summary})")
    return PromoteResult(number=number, merge_commit=merged, head_sha=head_sha, base_sha=base_sha, recreated=False,
                         verdict=verdict, method=method)


def _refuse_if(number: int, found: list[str]) -> None:
    """One line naming every blocking rule and what it misses, before anything was re-verified."""
    if found:
        raise PromoteError(f"pull request #{number} cannot be merged yet (nothing was re-verified): "
                           + "; ".join(found))


def _merge(forge: Forge, pr: PullRequest, plan: MergePlan, head_sha: str, message: str,
           say: Callable[[str], None]) -> tuple[str, MergeMethod]:
    """Merge with the plan's first method the forge accepts; a refused method is followed by the next, once."""
    refusals = []
    for method in plan.methods:
        try:
            return forge.merge(pr.number, expected_head_sha=head_sha, message=message, method=method), method
        except MergeMethodRefused as exc:
            refusals.append(str(exc))
            say(f"#{pr.number}: the forge refused {method} ({exc.reason})" + (
                f"; trying {plan.methods[plan.methods.index(method) + 1]}" if method != plan.methods[-1] else ""))
        except ForgeError as exc:
            raise PromoteError(f"#{pr.number}: the forge refused the merge: {exc}") from exc
    raise PromoteError(f"#{pr.number}: the forge refused every merge method promote may use ({'; '.join(refusals)});"
                       " set [apply] merge_method to one the repository allows")


def _check_landed_tree(forge: Forge, repo: Path, workspace: Workspace, remote: str, pr: PullRequest, merged: str,
                       method: MergeMethod, head_sha: str) -> None:
    """The approval binds a tree: the commit the base moved to must hold exactly the approved head's tree."""
    try:
        forge.fetch(repo, (pr.base,), remote=remote)
        landed, approved = workspace.commit_info(merged).tree, workspace.commit_info(head_sha).tree
    except (ForgeError, GitLayerError) as exc:
        raise PromoteError(f"#{pr.number}: merged as {merged[:10]} by {method}, but its tree could not be checked: "
                           f"{exc}") from exc
    if landed != approved:
        raise PromoteError(f"#{pr.number}: merged as {merged[:10]} by {method}, but the tree that landed "
                           f"({landed[:10]}) is not the approved tree ({approved[:10]} of {head_sha[:10]}): "
                           f"{pr.base} moved between the last fetch and the merge; review {merged[:10]} on "
                           f"{pr.base} and revert it if it is wrong")
