"""``infrarsi bank ...``: list, export, import and sync the experience bank.

One verb group of the parser registry (:mod:`bot.cli.registry`). Every verb
takes ``--bank PATH`` (before or after the verb) to use another bank file than
the default (``$INFRARSI_BANK``, else ``bank.sqlite`` in the user data dir).

Exit status follows :mod:`infrarsi.errors`: 0 done, 2 bad input (an unreadable
file, an unknown remote). Git failures raise
:class:`~bot.workspace.errors.GitLayerError` (exit status 2), printed by the one
handler in ``bot.cli.main.main``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bot.workspace.naming import EXPERIENCE_BRANCH
from bot.cli.common import UsageError, add_deprecated_alias, int_at_least, resolve_repo
from infrarsi.bank import Finding, SqliteBank, default_bank_path, open_bank

__all__ = ["add_bank_parser", "cmd_bank_export", "cmd_bank_import", "cmd_bank_list", "cmd_bank_sync",
           "register"]


def _open(args: argparse.Namespace) -> SqliteBank:
    return open_bank(getattr(args, "bank", None))


def _summary(f: Finding) -> dict[str, Any]:
    return {"id": f.id, "outcome": f.outcome.value, "family": f.workload.get("family"),
            "parameters": f.workload.get("parameters"), "device": f.hardware.get("device"),
            "gpu_model": f.hardware.get("gpu_model"), "candidate": f.candidate.describe(),
            "time_ratio": f.effect.time_ratio, "repo": f.repo, "run_id": f.run_id}


def cmd_bank_list(args: argparse.Namespace) -> int:
    with _open(args) as bank:
        findings = bank.findings()
        path = bank.path
    if args.json:
        for f in findings:
            print(f.to_json())
        return 0
    print(f"{len(findings)} findings in {path}")
    for f in findings:
        s = _summary(f)
        ratio = "-" if s["time_ratio"] is None else f"x{s['time_ratio']:.3f}"
        where = s["gpu_model"] or s["device"] or "?"
        print(f"  {f.id[:12]}  {s['outcome']:<15} {ratio:>8}  {s['family'] or '?':<5} {where:<24} "
              f"{s['candidate']}  ({s['repo']}/{s['run_id']})")
    return 0


def cmd_bank_export(args: argparse.Namespace) -> int:
    with _open(args) as bank:
        try:
            n = bank.export_jsonl(args.path)
        except OSError as exc:
            raise UsageError(f"cannot write {args.path}: {exc}") from None
    print(f"exported {n} findings to {args.path}")
    return 0


def cmd_bank_import(args: argparse.Namespace) -> int:
    with _open(args) as bank:
        try:
            n = bank.import_jsonl(args.path)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot import {args.path}: {exc}") from None
        total = len(bank)
    print(f"imported {n} new findings from {args.path} ({total} in the bank)")
    return 0


def cmd_bank_sync(args: argparse.Namespace) -> int:
    from bot.bank.sync import sync  # pygit2 only when syncing

    with _open(args) as bank:
        report = sync(bank, Path(resolve_repo(args)), args.remote, branch=args.branch, max_attempts=args.attempts)
    print(f"synced with {report.remote} ({report.branch}): {report.imported} findings imported, "
          f"{report.exported} pushed, {report.remote_findings} on the branch"
          + (f", after {report.attempts} attempts" if report.attempts > 1 else ""))
    for path in report.skipped:
        print(f"  skipped {path}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bank`` and its verbs (``list``, ``export``, ``import``, ``sync``) on ``subparsers``."""
    bank_opt = argparse.ArgumentParser(add_help=False)
    bank_opt.add_argument("--bank", metavar="PATH", default=argparse.SUPPRESS,
                          help=f"the bank file (default: $INFRARSI_BANK, else {default_bank_path()})")

    p = subparsers.add_parser("bank", parents=[bank_opt], help="the experience bank: findings of earlier runs",
                              description="List, export, import and share (through a git remote) the findings "
                                          "that seed later tuning runs.")
    verbs = p.add_subparsers(dest="bank_verb", required=True, metavar="VERB")

    v = verbs.add_parser("list", parents=[bank_opt], help="list the findings in the bank")
    v.add_argument("--json", action="store_true", help="one finding per line, as JSON")
    v.set_defaults(func=cmd_bank_list)

    v = verbs.add_parser("export", parents=[bank_opt], help="write every finding to a JSONL file")
    v.add_argument("path", metavar="PATH")
    v.set_defaults(func=cmd_bank_export)

    v = verbs.add_parser("import", parents=[bank_opt], help="add the findings of a JSONL file (idempotent)")
    v.add_argument("path", metavar="PATH")
    v.set_defaults(func=cmd_bank_import)

    v = verbs.add_parser("sync", parents=[bank_opt],
                         help="exchange findings with a git remote's infrarsi/experience branch")
    v.add_argument("repo", nargs="?", default=None, metavar="REPO",
                   help="the git repository to sync through (default: the current directory)")
    v.add_argument("remote", metavar="REMOTE", help="a remote of the repository, a URL, or a path to a repository")
    add_deprecated_alias(v, "--repo", dest="repo_option", replacement="the positional REPO")
    v.add_argument("--branch", default=EXPERIENCE_BRANCH, help="the shared branch (default: %(default)s)")
    v.add_argument("--attempts", type=int_at_least(1), default=5, metavar="N",
                   help="rounds to retry when the remote moves, at least 1 (default: 5)")
    v.set_defaults(func=cmd_bank_sync)
    return p


add_bank_parser = register  # the name tests and older callers use
