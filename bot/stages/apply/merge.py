"""``infrarsi promote --pr N``: merge a promotion only after a listed approver approved its current head.

In order, each step refusing with a message that says why:

1. the pull request is open and is a promotion (head ``infrarsi/promote/<run>``);
2. a listed approver's latest review approves the current head (a non-approver's
   approval does not count, nor one given to an older head);
3. nobody but the bot committed on the branch (a human push stops it: the bot
   never rewrites human commits);
4. if the base moved, the single commit is re-created on the new base (the
   winner's tree diff merged onto it, knobs and lock written again) and pushed;
5. the candidate is re-verified against the base it will land on (interleaved
   A/B, :func:`bot.stages.run.verify.verify_candidate`); anything but ``promoted`` refuses;
6. the forge merges, checking the head is still the one verified.

The bot never pushes to the base branch: the merge is the forge's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.stages.apply.open_pr import ApplyError, check_no_human_pushes, make_commit, place_branch
from bot.stages.doctor.baseline import load_doctor
from bot.stages.apply.promotion_commit import PROMOTE_PREFIX
from bot.stages.report.build import ReportError, load_report
from bot.workspace.refs import commit_info, ref_tip
from bot.workspace.remotes import fetch_branches as _fetch
from infrarsi.contract import Contract, load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.errors import NOT_RIGHT, InfraRSIError
from infrarsi.seams.forge import Forge, ForgeError, PullRequest, approvals
from infrarsi.trial import Candidate
from infrarsi.verify import Verdict

__all__ = ["PromoteError", "PromoteResult", "Reverify", "promote", "real_reverify"]

VERIFY_MARKER = "<!-- infrarsi:promote -->"
# (repo, run id, candidate, base commit) -> the verdict of the candidate against that base
Reverify = Callable[[Path, str, Candidate, str], Verdict]


class PromoteError(InfraRSIError):
    """The promotion was refused; the message is what the approver reads."""

    exit_code = NOT_RIGHT


@dataclass(frozen=True, kw_only=True, slots=True)
class PromoteResult:
    number: int
    merge_commit: str
    head_sha: str
    recreated: bool
    verdict: Verdict


def _base_tip(repo: Path, remote: str, base: str) -> str:
    for ref in (f"refs/remotes/{remote}/{base}", f"refs/heads/{base}"):
        found = ref_tip(repo, ref)
        if found is not None:
            return found
    raise PromoteError(f"cannot find the base branch {base!r} on {remote} or locally")


def real_reverify(repo: Path, run_id: str, candidate: Candidate, base_sha: str, *, pairs: int | None = None,
                  say: Callable[[str], None] = print, contract: Contract | None = None,
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
        contract = select_executor(contract, executor)
        try:
            chosen = build_executor(contract)
        except ExecutorSetupError as e:
            raise PromoteError(str(e)) from None
        ctx = trial_context(contract, read_lock(repo), executor=chosen, journal=journal)
        from dataclasses import replace

        ctx = replace(ctx, base=base_sha)
        return verify_candidate(ctx, run_id=f"{run_id}.promote", candidate=candidate, doctor=doctor, pairs=pairs,
                                progress=lambda m: say(f"  re-verify: {m}"))


def _approved(forge: Forge, pr: PullRequest, users: tuple[str, ...]) -> str:
    """The approving login, or PromoteError saying why there is none that counts."""
    if not users:
        raise PromoteError("the contract lists no approvers ([approvers] users); nobody can approve a promotion")
    reviews = forge.reviews(pr.number)
    counted = approvals(reviews, pr.head_sha, frozenset(users))
    if counted:
        return counted[-1].login
    listed = {u.lower() for u in users}
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


def promote(repo: Path, number: int, *, forge: Forge, remote: str = "origin", reverify: Reverify | None = None,
            say: Callable[[str], None] = print, pairs: int | None = None,
            executor: str | None = None) -> PromoteResult:
    repo = repo.resolve()
    contract = load_contract(repo)
    pr = forge.get_pr(number)
    if pr.state != "open":
        raise PromoteError(f"pull request #{number} is {pr.state}; only an open one is promoted")
    if not pr.head.startswith(PROMOTE_PREFIX):
        raise PromoteError(f"pull request #{number} ({pr.head}) is not an InfraRSI promotion")
    run_id = pr.head.removeprefix(PROMOTE_PREFIX)
    approver = _approved(forge, pr, contract.approvers.users)
    say(f"#{number}: approved by {approver} at head {pr.head_sha[:10]}")
    _fetch(repo, remote, (pr.base, pr.head))
    base_sha = _base_tip(repo, remote, pr.base)
    try:
        check_no_human_pushes(repo, pr, base_sha)
    except ApplyError as exc:
        raise PromoteError(str(exc)) from exc
    head = commit_info(repo, pr.head_sha)
    try:
        files = load_report(repo, run_id, contract=contract)
    except ReportError as exc:
        raise PromoteError(str(exc)) from exc
    report = files.report
    if not report.promoted:
        raise PromoteError(f"run {run_id} has no verified winner")
    candidate = Candidate.of(dict(report.winner_knobs), report.winner_patches)
    head_sha = pr.head_sha
    recreated = False
    if list(head.parents) != [base_sha]:
        say(f"#{number}: {pr.base} moved to {base_sha[:10]}; re-creating the promotion commit on it")
        try:
            commit = make_commit(repo, contract, files, base_sha)
            head_sha = place_branch(repo, pr.head, commit)
            forge.push(repo, pr.head, force=True)
        except (ApplyError, ForgeError) as exc:
            raise PromoteError(f"#{number}: cannot re-create the commit on {pr.base}: {exc}") from exc
        recreated = True
    forge.set_status(head_sha, context="infrarsi/verify", state="pending",
                     description=f"re-verifying against {pr.base} {base_sha[:10]}")
    verdict = (reverify or (lambda r, i, c, b: real_reverify(r, i, c, b, say=say, pairs=pairs, contract=contract,
                                                                 executor=executor)))(
        repo, run_id, candidate, base_sha)
    summary = (f"re-verification on {pr.base} {base_sha[:10]}: {verdict.kind.value}"
               + (f", {verdict.speedup:.2f}x" if verdict.speedup else "") + f" — {verdict.reason}")
    forge.ensure_comment(number, VERIFY_MARKER, f"{VERIFY_MARKER}\n{summary}\n")
    if not verdict.promoted:
        forge.set_status(head_sha, context="infrarsi/verify", state="failure", description=summary[:140])
        raise PromoteError(f"#{number}: the re-verification failed, not merging: {summary}")
    forge.set_status(head_sha, context="infrarsi/verify", state="success", description=summary[:140])
    try:
        merged = forge.merge(number, expected_head_sha=head_sha,
                             message=f"InfraRSI: promote run {run_id} ({verdict.speedup:.2f}x, approved by "
                                     f"{approver})")
    except ForgeError as exc:
        raise PromoteError(f"#{number}: the forge refused the merge: {exc}") from exc
    say(f"#{number} merged into {pr.base}: {merged[:10]} ({summary})")
    return PromoteResult(number=number, merge_commit=merged, head_sha=head_sha, recreated=recreated, verdict=verdict)
