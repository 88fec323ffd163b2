"""``infrarsi apply | approve | promote``: the pull request of a verified winner, its approval, and the merge.

The logic is in :mod:`bot.stages.apply.open_pr` (one branch, one pull request)
and :mod:`bot.stages.apply.merge` (merge only after a listed approver approved
the current head and a re-verification on the current base passed).
"""

from __future__ import annotations

import argparse
from typing import Any

from bot.executors.registry import add_executor_argument
from bot.cli.common import add_deprecated_alias, add_repo_argument, add_run_id_argument, repo_dir, resolve_repo
from bot.forges import FORGES, open_forge

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
    from bot.stages.apply.merge import promote
    from bot.workspace import GitWorkspace

    repo = repo_dir(resolve_repo(args))
    forge = open_forge(args.forge, repo, args.remote)
    promote(repo, args.pr, workspace=GitWorkspace(repo), forge=forge, remote=args.remote, pairs=args.pairs,
            executor=args.executor)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    from bot.forges.local import LocalForge, local_remote_path

    repo = repo_dir(resolve_repo(args))
    forge = LocalForge(local_remote_path(repo, args.remote))
    review = forge.submit_review(args.number, args.login, "CHANGES_REQUESTED" if args.request_changes
                                 else "APPROVED")
    print(f"#{args.number}: {review.state.lower().replace('_', ' ')} by {review.login} at {review.commit_sha[:10]}")
    return 0


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
    p.add_argument("number", type=int, metavar="N", help="the pull request number")
    p.add_argument("--as", dest="login", required=True, metavar="LOGIN", help="who approves (an approver "
                   "listed in the contract, for the approval to count)")
    add_deprecated_alias(p, "--repo", dest="repo_option", replacement="the positional REPO")
    p.add_argument("--remote", default="origin", help="the git remote the local forge serves (default origin)")
    p.add_argument("--request-changes", action="store_true", help="request changes instead of approving")
    p.set_defaults(func=cmd_approve)

    p = sub.add_parser("promote", help="merge an approved promotion after re-verifying it on the current base")
    add_repo_argument(p, optional=True)
    p.add_argument("--pr", type=int, required=True, metavar="N", help="the pull request number")
    p.add_argument("--forge", default="local", choices=forges, help="local (default) or github")
    p.add_argument("--remote", default="origin", help="the git remote the forge serves (default origin)")
    p.add_argument("--pairs", type=int, help="A/B pairs of the re-verification (default: the doctor's choice)")
    add_executor_argument(p)
    p.set_defaults(func=cmd_promote)
