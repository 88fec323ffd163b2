"""``infrarsi trial | journal | gc``: one candidate by hand, the journal of every trial, and cleaning up after runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Any, TYPE_CHECKING

from bot.cli.common import (UsageError, add_repo_argument, add_run_id_argument, fmt_bytes, memory_size,
                            positive_float, repo_dir)
from bot.executors.registry import ExecutorOptions, add_executor_argument, build_executor, select_executor
from infrarsi.rundir import journal_path
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.patches import PatchSpec

if TYPE_CHECKING:  # the CLI imports stages when a verb runs, not to build its parser
    from infrarsi.trial_record import TrialMetrics, TrialRecord

__all__ = ["register"]


def cmd_trial(args: argparse.Namespace) -> int:
    from bot.patching.catalog import applicable_patches
    from bot.stages.run.candidate import run_candidate
    from bot.stages.run.run_trial import TrialRequest, metrics_summary, run_trial
    from bot.workspace import GitWorkspace
    from bot.workspace.commits import is_dirty
    from bot.workspace.refs import is_git_repo
    from infrarsi.candidates import CandidateError, make_candidate
    from infrarsi.journal import Journal
    from infrarsi.trial_record import Outcome

    root = repo_dir(args.repo)
    contract = select_executor(load_contract(root), args.executor)
    lock = read_lock(root)
    try:
        candidate = make_candidate(contract, args.knob or [], tuple(args.patch or ()))
    except CandidateError as e:
        raise UsageError(str(e)) from None
    memory_limit = args.memory_limit  # bytes: checked by the parser (common.memory_size)
    total = contract.timing.total_steps

    def progress(n: int) -> None:
        if not args.json:
            print(f"\r  step {min(n, total)}/{total}", end="", file=sys.stderr, flush=True)

    executor = build_executor(contract, options=ExecutorOptions(on_step=progress))
    run_id = args.run_id or "manual"
    in_git = is_git_repo(root)
    patches: dict[str, PatchSpec] = {}
    if candidate.patches:
        if not in_git:
            raise UsageError(f"{root}: --patch needs a git repository (each patched candidate is a commit on its "
                             "own branch); run `git init` and commit the training code first")
        patches = applicable_patches(contract)
        unknown = [p for p in candidate.patches if p not in patches]
        if unknown:
            raise UsageError(f"--patch {unknown[0]}: not a catalog patch that applies to this repo "
                             f"(applicable: {', '.join(sorted(patches)) or 'none'}; see `infrarsi patches`)")
    with Journal(journal_path(root)) as journal:
        journal.ensure_run(run_id, kind="manual")
        if not args.json:
            where = "in its own worktree" if in_git else "on the working tree"
            print(f"trial of {candidate.describe()} {where} ({contract.workload.command[-1]}, "
                  f"{contract.timing.warmup_steps} warm-up + {contract.timing.measured_steps} measured steps)",
                  file=sys.stderr)
        if in_git:
            if is_dirty(root) and not args.json:
                print("note: uncommitted changes in the working tree are not part of the trial "
                      "(it runs the HEAD commit)", file=sys.stderr)
            workspace = GitWorkspace(root)
            record = run_candidate(contract, lock, workspace=workspace, base=workspace.head_commit(), run_id=run_id,
                                   candidate=candidate, patches=patches, executor=executor, journal=journal,
                                   memory_limit_bytes=memory_limit, timeout_s=args.timeout)
        else:
            record = run_trial(contract, lock, TrialRequest(run_id=run_id, candidate=candidate, tree=root,
                                                            memory_limit_bytes=memory_limit, timeout_s=args.timeout),
                               executor=executor, journal=journal)
    if args.json:
        print(json.dumps(metrics_summary(record), sort_keys=True))
    else:
        print(file=sys.stderr)
        print(_trial_text(record))
    return 0 if record.outcome is Outcome.OK else 1


def _trial_text(record: TrialRecord) -> str:
    m = record.metrics
    lines = [f"trial {record.run_id}/{record.trial_no}: {record.outcome.value}"
             + (f" — {record.reason}" if record.reason else "")]
    if m.step_time_s is not None:
        cv = f" (cv {m.step_time_cv:.1%})" if m.step_time_cv is not None else ""
        lines.append(f"  step time    {m.step_time_s * 1000:.1f} ms{cv}, measured by the bot over "
                     f"{len(m.step_times_s)} steps")
    if m.tokens_per_s is not None:
        lines.append(f"  throughput   {m.tokens_per_s:,.0f} tokens/s ({m.tokens_per_step} tokens/step)")
    censored = " (censored: at least this)" if m.peak_mem_censored else ""
    steady = f", {fmt_bytes(m.steady_mem_bytes)} held across steps" if m.steady_mem_bytes and not censored else ""
    lines.append(f"  peak memory  {fmt_bytes(m.peak_mem_bytes)}{censored}{steady}")
    if m.device_peak_mem_bytes or m.device_peak_censored:
        lines.append(f"  GPU memory   {_gpu_text(m)}")
    if m.loss:
        lines.append(f"  loss         {m.loss[0]:.4f} → {m.loss[-1]:.4f}")
    lines.append(f"  cost         {record.cost_s:.1f} device-seconds")
    return "\n".join(lines)


def _gpu_text(m: TrialMetrics) -> str:
    """The allocator's peak, what it held across steps, what it could have grown to (or that it ran out)."""
    peak = fmt_bytes(m.device_peak_mem_bytes) if m.device_peak_mem_bytes else "unknown"
    parts = [f"{peak} peak (the allocator's, on the fullest GPU)" + (": ran out of GPU memory"
                                                                     if m.device_peak_censored else "")]
    if m.device_steady_mem_bytes and not m.device_peak_censored:
        parts.append(f"{fmt_bytes(m.device_steady_mem_bytes)} held across steps")
    if m.device_capacity_bytes:
        parts.append(f"of {fmt_bytes(m.device_capacity_bytes)} it could grow to")
    return ", ".join(parts)


def cmd_journal(args: argparse.Namespace) -> int:
    from infrarsi.journal import Journal

    root = repo_dir(args.repo)
    with Journal(journal_path(root)) as journal:
        records = journal.trials(args.run_id)
        pending = journal.orphaned(args.run_id)
        known = [run_id for run_id, _, _ in journal.runs()]
    if args.run_id is not None and not records and not pending and args.run_id not in known:
        raise UsageError(f"--run-id {args.run_id}: no such run in the journal (runs: {', '.join(known) or 'none'})")
    if args.json:
        for r in records:
            print(json.dumps(r.to_dict(), sort_keys=True))
        return 0
    for r in records:
        st = f"{r.metrics.step_time_s * 1000:8.1f} ms" if r.metrics.step_time_s else " " * 11
        print(f"{r.run_id}/{r.trial_no:<4} {r.outcome.value:<11} {st}  {r.cost_s:7.1f} s  {r.candidate.describe()}")
    for p in pending:
        print(f"{p.run_id}/{p.trial_no:<4} interrupted  (started {time.ctime(p.started_at)}; its bot is gone)")
    return 0


def _parent_data_names(root: Path) -> frozenset[str]:
    """The names a contract's ``../NAME`` data paths take in the worktrees directory (none without a contract:
    gc must work on a repository whose contract is gone or broken)."""
    from infrarsi.errors import InfraRSIError

    try:
        paths = load_contract(root).data.paths
    except InfraRSIError:
        return frozenset()
    parts = [PurePosixPath(p).parts for p in paths]
    return frozenset(ps[1] for ps in parts if len(ps) > 1 and ps[0] == "..")


def cmd_gc(args: argparse.Namespace) -> int:
    from bot.stages.report.build import winner_branches
    from bot.workspace.gc import collect_garbage
    from infrarsi.journal import Journal

    root = repo_dir(args.repo)
    with Journal(journal_path(root)) as journal:
        orphaned = {(p.run_id, p.trial_no) for p in journal.orphaned()}
        active = {p.run_id for p in journal.pending() if (p.run_id, p.trial_no) not in orphaned}
        winners = winner_branches(root, journal)  # the branch each finished run keeps
    protected = frozenset(args.protect or ()) | frozenset(winners)
    report = collect_garbage(root, active_runs=frozenset(active), protected_branches=protected,
                             data_links=_parent_data_names(root), dry_run=args.dry_run)
    print(report.summary())
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("trial", help="run one candidate on the working tree and print what the bot measured")
    add_repo_argument(p)
    p.add_argument("--knob", action="append", metavar="NAME=VALUE", help="set a knob (repeatable)")
    p.add_argument("--patch", action="append", metavar="ID", help="apply a catalog patch (repeatable; see "
                   "`infrarsi patches`); needs a git repository")
    p.add_argument("--memory-limit", metavar="SIZE", type=memory_size,
                   help="override the contract's memory limit, > 0 (e.g. 2GiB)")
    p.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                   help="override the contract's trial timeout, in seconds > 0")
    add_run_id_argument(p, "journal the trial under this run (default: manual)")
    add_executor_argument(p)
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    p.set_defaults(func=cmd_trial)

    p = sub.add_parser("journal", help="list the trials recorded in the repo's journal")
    add_repo_argument(p)
    add_run_id_argument(p, "only this run's trials (default: every run)")
    p.add_argument("--json", action="store_true", help="one full trial record per line")
    p.set_defaults(func=cmd_journal)

    p = sub.add_parser("gc", help="remove worktrees and branches of finished or abandoned runs (the verified "
                       "winner's branch of a finished run stays: report and apply read it)")
    add_repo_argument(p)
    p.add_argument("--protect", action="append", metavar="BRANCH",
                   help="a branch never to delete, e.g. the head of an open pull request (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(func=cmd_gc)
