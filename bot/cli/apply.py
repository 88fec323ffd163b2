"""``infrarsi apply | approve | promote``: the pull request of a verified winner, its approval, and the merge.

The logic is in :mod:`bot.stages.apply.open_pr` (one branch, one pull request)
and :mod:`bot.stages.apply.merge` (merge only after a listed approver approved
the current head and a re-verification on the current base passed).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from bot.executors.registry import add_executor_argument
from bot.cli.common import (UsageError, add_deprecated_alias, add_repo_argument, add_run_id_argument, int_at_least,
                            repo_dir, resolve_repo)
from bot.forges import FORGES, open_forge
from infrarsi.errors import NOT_YET

if TYPE_CHECKING:  # the CLI imports stages and forges when a verb runs, not to build its parser
    from pathlib import Path

    from bot.forges.local import LocalForge
    from infrarsi.contract.model import Approvers
    from infrarsi.seams.forge import Forge

__all__ = ["register"]


def cmd_apply(args: argparse.Namespace) -> int:
    from bot.stages.apply.open_pr import apply_run
    from bot.workspace import GitWorkspace

    repo = repo_dir(args.repo)
    result = apply_run(repo, workspace=GitWorkspace(repo), run_id=args.run_id, forge_name=args.forge,
                       remote=args.remote, base=args.base, draft=args.draft, dry_run=args.dry_run, reopen=args.reopen)
    if result.record is not None:
        print(f"pull-request record: {result.record}")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    """0 merged (or queued in the base's merge queue), 4 not merged yet: the commit was re-created on a base that
    moved and waits for a new approval; a refusal is a PromoteError (1). Progress goes to stderr, the outcome to
    stdout."""
    from bot.stages.apply.merge import promote
    from bot.workspace import GitWorkspace

    repo = repo_dir(resolve_repo(args))
    forge = open_forge(args.forge, repo, args.remote)
    result = promote(repo, args.pr, workspace=GitWorkspace(repo), forge=forge, remote=args.remote, pairs=args.pairs,
                     executor=args.executor, say=lambda line: print(line, file=sys.stderr, flush=True))
    _prune_reverification(repo, forge, args.pr)
    if result.merge_commit is not None:
        print(f"#{args.pr}: merged as {result.merge_commit[:10]} by {result.method}")
        return 0
    if result.queued:
        print(f"#{args.pr}: in the base's merge queue; the forge merges it")
        return 0
    print(f"#{args.pr}: not merged yet: waiting for an approval of the re-created head {result.head_sha[:10]}; run "
          "promote again once a listed approver approved it")
    return NOT_YET


def cmd_approve(args: argparse.Namespace) -> int:
    from bot.forges.local import LocalForge, local_remote_path
    from infrarsi.contract import load_contract

    repo = repo_dir(resolve_repo(args))
    forge = LocalForge(local_remote_path(repo, args.remote))
    forge.get_pr(args.number)  # a pull request that does not exist is said first
    if not args.request_changes:
        _check_approver(args.login, load_contract(repo).approvers, forge, args.number)
    review = forge.submit_review(args.number, args.login, "CHANGES_REQUESTED" if args.request_changes
                                 else "APPROVED")
    print(f"#{args.number}: {review.state.lower().replace('_', ' ')} by {review.login} at {review.commit_sha[:10]}")
    return 0


def _prune_reverification(repo: Path, forge: Forge, number: int) -> None:
    """The re-verification's trial branches go once promote is done with them (the journal keeps the trials)."""
    from bot.stages.apply.merge import reverify_run_id
    from bot.workspace.gc import prune_run
    from bot.workspace.naming import PROMOTE_PREFIX

    head = forge.get_pr(number).head
    if head.startswith(PROMOTE_PREFIX):
        pruned = prune_run(repo, reverify_run_id(head.removeprefix(PROMOTE_PREFIX)), keep={})
        if pruned.deleted:
            print(f"#{number}: removed the {len(pruned.deleted)} trial branches of the re-verification",
                  file=sys.stderr)


def _check_approver(login: str, approvers: Approvers, forge: LocalForge, number: int) -> None:
    """An approval only counts from a listed approver (a user, or a member of a listed team): refuse anyone else
    now, not at ``promote``."""
    users, teams = approvers.users, approvers.teams
    if login.lower() in {u.lower() for u in users} or any(forge.team_member(t, login) for t in teams):
        return
    listed = ", ".join([*users, *(f"team {t}" for t in teams)]) or "none: add [approvers] users to the contract"
    raise UsageError(f"approve #{number} --as {login}: {login} is not an approver of this repo (the contract's "
                     f"approvers: {listed}); approve as one of them")


def register(sub: Any) -> None:
    forges = tuple(FORGES)
    p = sub.add_parser("apply", help="push the verified winner as one commit on infrarsi/promote/<run> and ensure "
                       "its pull request")
    add_repo_argument(p)
    add_run_id_argument(p, "the run id (default: the latest finished run)", deprecated_run=True)
    p.add_argument("--forge", default="local", choices=forges,
                   help="local (default: a bare git remote on disk) or github")
    p.add_argument("--remote", default="origin", help="the git remote the forge pushes to (default origin)")
    p.add_argument("--base", help="the branch to promote onto (default: the branch HEAD is on)")
    p.add_argument("--draft", action="store_true", help="open the pull request as a draft")
    p.add_argument("--reopen", action="store_true", help="reopen the pull request if a human closed it")
    p.add_argument("--dry-run", action="store_true", help="print what would be done and change nothing")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("approve", help="approve a pull request on the local forge as LOGIN (the offline demo)")
    add_repo_argument(p, optional=True, help="the repository")
    p.add_argument("number", type=int_at_least(1), metavar="N", help="the pull request number")
    p.add_argument("--as", dest="login", required=True, metavar="LOGIN", help="who approves (an approver "
                   "listed in the contract, for the approval to count)")
    add_deprecated_alias(p, "--repo", dest="repo_option", replacement="the positional REPO")
    p.add_argument("--remote", default="origin", help="the git remote the local forge serves (default origin)")
    p.add_argument("--request-changes", action="store_true", help="request changes instead of approving")
    p.set_defaults(func=cmd_approve)

    p = sub.add_parser("promote", help="merge an approved promotion after re-verifying it on the current base",
                       epilog="exit status: 0 merged (or queued in the base's merge queue); 1 refused (the line says "
                              "why); 2 bad input; 4 not merged yet: the base moved, the commit was re-created on it "
                              "and waits for an approval of its new head")
    add_repo_argument(p, optional=True)
    p.add_argument("--pr", type=int_at_least(1), required=True, metavar="N", help="the pull request number")
    p.add_argument("--forge", default="local", choices=forges, help="local (default) or github")
    p.add_argument("--remote", default="origin", help="the git remote the forge serves (default origin)")
    p.add_argument("--pairs", type=int_at_least(1), metavar="K",
                   help="A/B pairs of the re-verification, at least 1 (default: the doctor's choice)")
    add_executor_argument(p)
    p.set_defaults(func=cmd_promote)
