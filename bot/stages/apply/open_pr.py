"""``infrarsi apply REPO [--run-id ID] [--forge local|github] [--draft] [--dry-run]``: one branch, one pull request.

The promotion branch ``infrarsi/promote/<run-id>`` holds one commit on the base
(see :mod:`bot.stages.apply.promotion_commit`). The pull request is found by its head branch and
updated, never opened twice; a closed one stays closed unless ``--reopen``.
Labels ``infrarsi`` and ``performance``; review is requested from the
contract's approvers. ``--dry-run`` prints the plan and changes nothing. Git is
reached only through the :class:`~infrarsi.seams.workspace.Workspace` the caller gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from bot.forges import open_forge
from bot.stages.apply.run_record import push_record, record_branch
from bot.stages.apply.promotion_commit import PromotionCommit, PromotionError, build_promotion_commit, human_commits, promotion_branch
from bot.stages.report.build import ReportFiles, load_report
from infrarsi.errors import NOT_RIGHT, InfraRSIError
from infrarsi.contract import load_contract
from infrarsi.contract.model import Contract
from infrarsi.seams.forge import EnsureAction, Forge, ForgeError, PullRequest, PullRequestDraft
from infrarsi.seams.workspace import Workspace
from infrarsi.report import Report, pr_title, render_pr_body

__all__ = ["ApplyError", "ApplyResult", "LABELS", "apply_run", "base_branch", "promotion_message"]

LABELS = ("infrarsi", "performance")


class ApplyError(InfraRSIError):
    """Nothing to apply, or the branch cannot be made; the message says what to do."""

    exit_code = NOT_RIGHT


@dataclass(frozen=True, kw_only=True, slots=True)
class ApplyResult:
    run_id: str
    branch: str
    base: str
    commit: str | None
    pull_request: PullRequest | None
    action: EnsureAction | None
    plan: tuple[str, ...] = field(default=())
    record: Path | None = None  # the local forge's pull-request record


def base_branch(workspace: Workspace, repo: Path) -> str:
    """The branch HEAD is on: the base promotions target unless ``--base`` says otherwise."""
    branch = workspace.head_branch()
    if branch is None:
        raise ApplyError(f"{repo}: HEAD is not on a branch; pass --base BRANCH")
    return branch


def promotion_message(files: ReportFiles) -> tuple[str, dict[str, str]]:
    r = files.report
    title = f"InfraRSI: promote run {r.run_id} ({r.speedup:.2f}x faster step)\n\n{r.winner}\n"
    trailers = {"InfraRSI-Run": r.run_id, "InfraRSI-Candidate": r.winner_digest or "",
                "InfraRSI-Trial-Commit": r.winner_commit or ""}
    return title, trailers


def make_commit(workspace: Workspace, contract: Contract, files: ReportFiles, base_sha: str) -> PromotionCommit:
    r = files.report
    if not r.winner_commit:
        raise ApplyError(f"run {r.run_id}: the winner has no trial commit to promote")
    message, trailers = promotion_message(files)
    try:
        return build_promotion_commit(workspace, contract=contract, trial_commit=r.winner_commit, base=base_sha,
                                      knobs=dict(r.winner_knobs), message=message, trailers=trailers)
    except PromotionError as exc:
        raise ApplyError(str(exc)) from exc


def place_branch(workspace: Workspace, branch: str, commit: PromotionCommit) -> str:
    """Point the promotion branch at ``commit`` unless it already holds the same single commit on the same base."""
    tip = workspace.branch_tip(branch)
    if tip is not None:
        current = workspace.commit_info(tip)
        if list(current.parents) == [commit.base] and current.tree == commit.tree:
            return current.sha  # the same change on the same base: keep it, so nothing moves
    workspace.set_branch(branch, commit.sha)
    return commit.sha


def check_no_human_pushes(workspace: Workspace, pr: PullRequest | None, base_sha: str) -> None:
    """Refuse when the branch on the forge carries a commit the bot did not make."""
    if pr is None or pr.state != "open":
        return
    if not workspace.has_commit(pr.head_sha):
        raise ApplyError(f"pull request #{pr.number}: its head {pr.head_sha[:10]} is not a commit InfraRSI made "
                         f"here and cannot be fetched; someone may have pushed to {pr.head}. Stopping: the bot "
                         "does not rewrite human commits")
    fork = workspace.merge_base(pr.head_sha, base_sha)
    humans = human_commits(workspace, pr.head_sha, fork or base_sha)
    if humans:
        raise ApplyError(f"pull request #{pr.number}: {pr.head} has commits by someone else "
                         f"({'; '.join(humans)}). Stopping: the bot does not rewrite human commits")


def _on_forge(repo: Path, workspace: Workspace, report: Report, forge: Forge) -> tuple[Report, str]:
    """The report as the pull request shows it: its record and the trial branch pushed, its links naming them
    on the forge (the body's diff, full report and ``git checkout`` must exist where the reader is)."""
    push_record(repo, report.run_id, report.winner_commit or "", forge, workspace=workspace)
    record = record_branch(report.run_id)  # the branch, not its commit: report.json's time changes each apply
    trial = report.winner_branch if report.winner_branch and workspace.branch_tip(report.winner_branch) else None
    if trial:
        forge.push(repo, trial, force=True)
    return (replace(report, winner_branch=trial,
                    diff_link=forge.blob_url(record, "winner.diff") if report.diff_link else None),
            forge.blob_url(record, "report.md"))


def apply_run(repo: Path, *, workspace: Workspace, run_id: str | None = None, forge: Forge | None = None,
              forge_name: str = "local", remote: str = "origin", base: str | None = None, draft: bool = False,
              dry_run: bool = False, reopen: bool = False,
              say=print) -> ApplyResult:  # noqa: ANN001 - a print-like callable
    """The promotion of ``repo``'s run (its git: ``workspace``) as one commit and one pull request."""
    repo = repo.resolve()
    contract = load_contract(repo)
    # no finished run: ReportError, exit 2
    files = load_report(repo, run_id, workspace=workspace, write=not dry_run, contract=contract)
    report = files.report
    if not report.promoted:
        raise ApplyError(f"run {report.run_id}: no candidate was verified faster than the baseline; "
                         "nothing to apply (see the report)")
    base = base or base_branch(workspace, repo)
    base_sha = workspace.branch_tip(base)
    if base_sha is None:
        raise ApplyError(f"{repo}: no branch {base!r} to promote onto")
    branch = promotion_branch(report.run_id)
    approvers = contract.approvers
    plan = [f"branch {branch} from {base} ({base_sha[:10]}): one commit with",
            *[f"  knob {c.name}: {c.old} -> {c.new} ({c.where})" for c in report.knob_changes],
            *[f"  patch {p.patch_id}: " + ", ".join(f"{s.path}::{s.symbol}" for s in p.sources)
              for p in report.patches],
            f"push it to the {forge.name if forge else forge_name} forge (remote {remote}), with the run's record "
            f"on {record_branch(report.run_id)} and the trial branch {report.winner_branch}",
            f"ensure one pull request {branch} -> {base}: {pr_title(report)!r}, labels {', '.join(LABELS)}"
            + (", draft" if draft else ""),
            "request review from " + (", ".join(approvers.users + approvers.teams) or "nobody (the contract "
                                      "lists no approvers)")]
    if dry_run:
        say("dry run: nothing is changed")
        for line in plan:
            say(f"  would {line}" if not line.startswith("  ") else f"    {line.strip()}")
        return ApplyResult(run_id=report.run_id, branch=branch, base=base, commit=None, pull_request=None,
                           action=None, plan=tuple(plan))
    forge = forge or open_forge(forge_name, repo, remote)  # cannot reach the forge: ForgeError, exit 2
    try:
        existing = forge.find_pr(branch)
        forge.fetch(repo, (branch,), remote=remote)  # with the forge's credentials; a failure stops apply
        check_no_human_pushes(workspace, existing, base_sha)
        commit = make_commit(workspace, contract, files, base_sha)
        shown, full = _on_forge(repo, workspace, report, forge)
        body = render_pr_body(shown, full_report=full)
        wanted = PullRequestDraft(head=branch, base=base, title=pr_title(report), body=body, labels=LABELS,
                                  draft=draft)
        reopened = None
        if reopen and existing is not None and existing.state == "closed":
            # Reopen before the push: GitHub refuses to reopen once the head branch was force-pushed.
            reopened, _ = forge.ensure_pr(wanted, reopen=True)
            if reopened.number != existing.number:
                say(f"pull request #{existing.number} could not be reopened (its branch changed since it was "
                    f"closed); opened #{reopened.number} instead")
        sha = place_branch(workspace, branch, commit)
        say(f"commit {sha[:10]} on {branch}: " + "; ".join(commit.written))
        for line in commit.unwritten:
            say(f"  not written to a file: {line}")
        forge.push(repo, branch, force=True)
        pr, action = forge.ensure_pr(wanted, reopen=reopen)
        if reopened is not None and action == "unchanged":
            action = "updated" if reopened.number == pr.number else "created"  # it was reopened (or opened) above
        if action == "closed":
            say(f"pull request #{pr.number} is {pr.state}; not reopened (pass --reopen to reopen it)")
        else:
            if approvers.users or approvers.teams:
                forge.request_review(pr.number, approvers.users, approvers.teams)
            say(f"pull request #{pr.number} {action}: {pr.url}")
    except ForgeError as exc:
        raise ApplyError(str(exc)) from exc
    return ApplyResult(run_id=report.run_id, branch=branch, base=base, commit=sha, pull_request=pr, action=action,
                       plan=tuple(plan), record=forge.record_path(pr.number))

