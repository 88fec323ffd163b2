"""The ``infrarsi`` command line: one place that turns arguments into calls.

Exit status: 0 success; 1 the thing checked is not right (a broken lock, a
trial that was not ``ok``); 2 bad input (a malformed contract, a bad flag).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from bot import __doc__ as _bot_doc
from bot.cli.bank import add_bank_parser
from bot.stages.apply.open_pr import add_apply_parser
from bot.stages.apply.merge import add_approve_parser, add_promote_parser
from bot.stages.report.build import add_report_parser
from bot.stages.run.candidate import is_git_repo, run_candidate, trial_context
from bot.stages.doctor.baseline import latest_run, load_doctor, new_run_id, run_dir, run_doctor
from bot.stages.run.search import RunOptions, run_search
from bot.stages.run.verify import verify_candidate
from bot.proposers import ProposerSetupError, add_proposer_arguments, draft_with, proposer_from_args
from bot.patching.catalog import applicable_patches, catalog_for_repo
from bot.stages.init.draft import DraftError, draft_contract
from bot.workspace.commits import is_dirty, repo_head_commit
from bot.workspace.errors import GitLayerError
from bot.workspace.gc import collect_garbage
from bot.executors.registry import (ExecutorOptions, ExecutorSetupError, add_executor_argument, build_executor,
                                    select_executor)
from bot.stages.init.scan import scan_repo
from bot.stages.init.toml_writer import render_contract
from bot.stages.run.trial import CandidateError, TrialRequest, journal_path, make_candidate, metrics_summary, run_trial, state_dir
from infrarsi.contract import ContractError, load_contract
from infrarsi.contract.load import CONTRACT_FILE, find_contract, parse_memory
from infrarsi.contract.lock import LOCK_FILE, read_lock, verify_lock, write_lock
from infrarsi.journal import Journal
from infrarsi.bank import open_bank
from infrarsi.doctor import DoctorError
from infrarsi.patches import PatchSpec
from infrarsi.verify import Verdict
from infrarsi.trial import Candidate, Outcome, TrialRecord


class UsageError(Exception):
    """Bad input on the command line: printed without a traceback, exit status 2."""


def _repo(path: str) -> Path:
    root = Path(path).resolve()
    if not root.is_dir():
        raise UsageError(f"{path}: not a directory")
    return root


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**20:.0f} MiB"


def cmd_init(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    try:
        path, prefix = find_contract(root)
        exists = True
    except ContractError:
        exists = False
    if exists and not args.force:
        print(f"using the existing contract in {path.relative_to(root)}"
              + (f" [{prefix}]" if prefix else "") + " (pass --force to draft a new one)")
    else:
        if not args.command:
            raise UsageError("no contract yet: pass --command \"python train.py ...\" to draft one")
        entry = _entry_script(args.command)
        summary = scan_repo(root, entry)
        try:
            draft = (draft_contract(args.command, summary, tokens_per_step=args.tokens_per_step)
                     if args.proposer == "builtin" else
                     _llm_draft(args, root, summary))
        except DraftError as e:
            raise UsageError(str(e)) from None
        (root / CONTRACT_FILE).write_text(render_contract(draft), encoding="utf-8")
        print(f"wrote {CONTRACT_FILE}: {len(draft.data.get('knobs', {}))} knobs, "
              f"{len(draft.data['scope']['editable'])} editable symbols, "
              f"{len(draft.data['scope']['locked'])} locked paths; {len(draft.notes)} guessed or defaulted fields "
              "are marked with comments — review them")
    contract = load_contract(root)
    state_dir(root)
    lock_path = write_lock(contract)
    print(f"wrote {lock_path.name}: {len(read_lock(root).files)} locked files and the contract hashed")
    return 0


def _proposer(args: argparse.Namespace, root: Path):  # noqa: ANN202
    try:
        return proposer_from_args(args, root)
    except ProposerSetupError as e:
        raise UsageError(str(e)) from None


def _llm_draft(args: argparse.Namespace, root: Path, summary):  # noqa: ANN001, ANN202
    proposer = _proposer(args, root)
    draft = draft_with(proposer, args.command, summary, tokens_per_step=args.tokens_per_step)
    usage = proposer.usage()
    print(f"drafted by the {proposer.name} proposer: {usage.tokens} tokens, ${usage.cost_usd:.4f}"
          + (f" ({usage.cached_calls} cached)" if usage.cached_calls else ""))
    return draft


def _entry_script(command: str) -> str | None:
    import shlex

    for part in shlex.split(command):
        if part.endswith(".py"):
            return part
    return None


def cmd_lock(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    contract = load_contract(root)
    write_lock(contract)
    print(f"wrote {LOCK_FILE}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    contract = load_contract(root)
    lock = read_lock(root)
    broken = verify_lock(contract, lock)
    if broken:
        for v in broken:
            print(f"{v.path}: {v.reason}", file=sys.stderr)
        print(f"check failed: {len(broken)} problem(s) with the lock", file=sys.stderr)
        return 1
    print(f"ok: contract valid; {len(lock.files)} locked files match {LOCK_FILE}; "
          f"{len(contract.knobs)} knobs, {len(contract.scope.editable)} editable symbols")
    return 0


def cmd_trial(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    contract = select_executor(load_contract(root), args.executor)
    lock = read_lock(root)
    try:
        candidate = make_candidate(contract, args.knob or [], tuple(args.patch or ()))
    except CandidateError as e:
        raise UsageError(str(e)) from None
    memory_limit = None
    if args.memory_limit is not None:
        memory_limit = parse_memory(args.memory_limit)
        if memory_limit is None:
            raise UsageError(f"--memory-limit: expected bytes or a size like 6GiB, got {args.memory_limit!r}")
    total = contract.timing.total_steps

    def progress(n: int) -> None:
        if not args.json:
            print(f"\r  step {min(n, total)}/{total}", end="", file=sys.stderr, flush=True)

    executor = _executor(contract, on_step=progress)
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
            record = run_candidate(contract, lock, repo=root, base=repo_head_commit(root), run_id=run_id,
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
    lines.append(f"  peak memory  {_fmt_bytes(m.peak_mem_bytes)}{censored}")
    if m.loss:
        lines.append(f"  loss         {m.loss[0]:.4f} → {m.loss[-1]:.4f}")
    lines.append(f"  cost         {record.cost_s:.1f} device-seconds")
    return "\n".join(lines)


def cmd_journal(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    with Journal(journal_path(root)) as journal:
        records = journal.trials(args.run_id)
        pending = journal.orphaned(args.run_id)
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


def _context(args: argparse.Namespace, journal: Journal, *, on_step=None):  # noqa: ANN001, ANN202
    root = _repo(args.repo)
    contract = select_executor(load_contract(root), getattr(args, "executor", None))
    lock = read_lock(root)
    return trial_context(contract, lock, executor=_executor(contract, on_step=on_step), journal=journal)


def _executor(contract, *, on_step=None):  # noqa: ANN001, ANN202
    try:
        return build_executor(contract, options=ExecutorOptions(on_step=on_step))
    except ExecutorSetupError as e:
        raise UsageError(str(e)) from None


def _say(args: argparse.Namespace) -> Callable[[str], None]:
    def say(message: str) -> None:
        if not getattr(args, "json", False):
            print(f"  {message}", file=sys.stderr, flush=True)
    return say


def cmd_doctor(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    run_id = args.run_id or new_run_id()
    with Journal(journal_path(root)) as journal:
        ctx = _context(args, journal)
        print(f"doctor for run {run_id}: {args.repeats} baseline runs in fresh processes", file=sys.stderr)
        try:
            report, out = run_doctor(ctx, run_id=run_id, repeats=args.repeats, progress=_say(args))
        except DoctorError as e:
            print(f"doctor failed: {e}", file=sys.stderr)
            return 1
    if args.json:
        print(report.to_json(), end="")
        return 0
    mfu = f"{report.mfu:.1%}" if report.mfu is not None else "n/a"
    print(f"step time {report.median_s * 1000:.1f} ms (cv within {report.cv_within:.1%}, between "
          f"{report.cv_between:.1%}); verification needs {report.verify_pairs} pairs (MDE {report.mde:.1%}); "
          f"peak memory {_fmt_bytes(report.peak_mem_bytes)}; MFU {mfu}")
    print(f"wrote {out / 'doctor.json'} and {out / 'doctor.md'}")
    return 0


def _candidate_from(args: argparse.Namespace, contract) -> Candidate:  # noqa: ANN001
    knobs = list(args.knob or [])
    patches = list(args.patch or [])
    for token in (args.candidate or "").split():
        (patches if token.startswith("+") else knobs).append(token.lstrip("+"))
    try:
        return make_candidate(contract, knobs, tuple(patches))
    except CandidateError as e:
        raise UsageError(str(e)) from None


def cmd_verify(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    with Journal(journal_path(root)) as journal:
        ctx = _context(args, journal)
        candidate = _candidate_from(args, ctx.contract)
        unknown = [p for p in candidate.patches if p not in ctx.patches]
        if unknown:
            raise UsageError(f"patch {unknown[0]}: not applicable here (applicable: "
                             f"{', '.join(sorted(ctx.patches)) or 'none; patches need a git repository'})")
        run_id = args.run_id or latest_run(root) or new_run_id()
        doctor = load_doctor(root, run_id)
        if doctor is None:
            print(f"no doctor report for run {run_id}: running the doctor first", file=sys.stderr)
            doctor, _ = run_doctor(ctx, run_id=run_id, repeats=args.repeats, progress=_say(args))
        pairs = args.pairs or doctor.verify_pairs
        print(f"verifying {candidate.describe()} against the baseline: {pairs} interleaved pairs", file=sys.stderr)
        verdict = verify_candidate(ctx, run_id=run_id, candidate=candidate, doctor=doctor, pairs=pairs,
                                   progress=_say(args))
    out = run_dir(root, run_id) / f"verify-{candidate.digest()}.json"
    out.write_text(json.dumps(verdict.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(verdict.to_dict(), sort_keys=True))
    else:
        print(_verdict_text(verdict))
        print(f"wrote {out}")
    return 0 if verdict.promoted else 1


def _verdict_text(verdict: Verdict) -> str:
    lines = [f"verdict: {verdict.kind.value} — {verdict.reason}"]
    c = verdict.comparison
    if c is not None:
        lines.append(f"  speedup {c.speedup:.3f}x, {c.ci_level:.0%} CI [{c.ci_low:.3f}, {c.ci_high:.3f}], "
                     f"Mann-Whitney p = {c.p_value:.4f} ({c.n_baseline} vs {c.n_candidate} runs)")
    for check in verdict.invariants:
        if not check.ok or check.name in ("loss_band", "clock", "project_metadata"):
            lines.append(f"  {'ok ' if check.ok else 'BROKEN'} {check.name}: {check.detail}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    if args.resume and not args.run_id:
        args.run_id = latest_run(root)
        if args.run_id is None:
            raise UsageError("--resume: no earlier run in this repo")
    run_id = args.run_id or new_run_id()
    contract = load_contract(root)
    options = RunOptions(budget_trials=args.budget_trials or contract.budget.trials,
                         budget_seconds=args.budget_seconds or contract.budget.seconds,
                         parallel=args.parallel, initial=args.initial, seed=args.seed, repeats=args.repeats,
                         proposer=None if args.proposer == "builtin" else _proposer(args, root))

    def progress(event: dict) -> None:
        if args.json:
            print(json.dumps(event, sort_keys=True, default=str), flush=True)
            return
        if event["event"] == "trial":
            best = f"best {event['best_speedup']:.2f}x" if event.get("best_speedup") else "best -"
            step = f"{event['step_time_s'] * 1000:.1f} ms" if event.get("step_time_s") else event["reason"][:60]
            print(f"  trial {event['n']}/{event['total']} [{event['origin']}] {event['outcome']}: {step} — "
                  f"{event['candidate']} | {best}, {event['failures']} failed ({event['failed_cost_s']:.0f} s), "
                  f"ETA {event['eta_s'] / 60:.1f} min", file=sys.stderr, flush=True)
        elif event["event"] == "verdict":
            sp = f" {event['speedup']:.2f}x" if event.get("speedup") else ""
            print(f"  verdict: {event['verdict']}{sp} — {event['candidate']}", file=sys.stderr, flush=True)
        else:
            print(f"  {event.get('message', event)}", file=sys.stderr, flush=True)

    bank = None if args.no_bank else open_bank(Path(args.bank) if args.bank else None)
    try:
        with Journal(journal_path(root)) as journal:
            ctx = _context(args, journal)
            print(f"run {run_id}" + (" (resumed)" if args.resume else ""), file=sys.stderr)
            result = run_search(ctx, run_id=run_id, options=options, progress=progress, bank=bank)
    finally:
        if bank is not None:
            bank.close()
    best = result.best
    if not args.json:
        if best is not None and best.comparison is not None:
            c = best.comparison
            print(f"verified speedup {c.speedup:.2f}x ({c.ci_level:.0%} CI [{c.ci_low:.2f}, {c.ci_high:.2f}]) "
                  f"with {best.candidate.describe()}")
        else:
            print("no candidate was verified faster than the baseline")
        if result.llm:
            llm = result.llm
            print(f"LLM proposer: {llm['tokens']} tokens, ${llm['cost_usd']:.4f}, "
                  f"{len(llm['patches_proposed'])} patch(es) proposed, {len(llm['failed_proposals'])} failed"
                  + (f"; {llm['note']}" if llm['note'] else ""))
        print(f"wrote {result.path}")
    return 0


def cmd_patches(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    contract = load_contract(root)
    found = catalog_for_repo(contract)
    if args.json:
        for a in found:
            print(json.dumps({"id": a.entry.codemod, "title": a.entry.title, "applies": a.applies,
                              "targets": list(a.spec.targets) if a.spec else [], "why_not": list(a.reasons),
                              "effect": a.entry.effect.to_dict()}, sort_keys=True))
        return 0
    for a in found:
        e = a.entry.effect
        prior = f"time x{e.time_ratio:.2f}, memory x{e.mem_ratio:.2f}"
        if a.spec is not None:
            print(f"{a.entry.codemod:<24} applies   {prior}  at {', '.join(a.spec.targets)}")
        else:
            why = a.reasons[0] if a.reasons else "no editable Python file"
            print(f"{a.entry.codemod:<24} no        {prior}  ({why}{' …' if len(a.reasons) > 1 else ''})")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    root = _repo(args.repo)
    protected = frozenset(args.protect or ())
    with Journal(journal_path(root)) as journal:
        orphaned = {(p.run_id, p.trial_no) for p in journal.orphaned()}
        active = {p.run_id for p in journal.pending() if (p.run_id, p.trial_no) not in orphaned}
    report = collect_garbage(root, active_runs=frozenset(active), protected_branches=protected, dry_run=args.dry_run)
    print(report.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infrarsi", description=_bot_doc)
    sub = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")

    p = sub.add_parser("init", help="draft the contract (infrarsi.toml) and take the lock (infrarsi.lock)")
    p.add_argument("repo", help="the training repo")
    p.add_argument("--command", help='the training command, e.g. "python train.py --steps 8"')
    p.add_argument("--tokens-per-step", type=int, help="tokens per optimizer step, when init cannot infer it")
    p.add_argument("--force", action="store_true", help="draft a new contract over an existing one")
    add_proposer_arguments(p)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("lock", help="re-take the lock after an intended change to the contract or a locked file")
    p.add_argument("repo")
    p.set_defaults(func=cmd_lock)

    p = sub.add_parser("check", help="validate the contract and verify the lock against the tree")
    p.add_argument("repo")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("trial", help="run one candidate on the working tree and print what the bot measured")
    p.add_argument("repo")
    p.add_argument("--knob", action="append", metavar="NAME=VALUE", help="set a knob (repeatable)")
    p.add_argument("--patch", action="append", metavar="ID", help="apply a catalog patch (repeatable; see "
                   "`infrarsi patches`); needs a git repository")
    p.add_argument("--memory-limit", metavar="SIZE", help="override the contract's memory limit (e.g. 2GiB)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="override the contract's trial timeout")
    p.add_argument("--run-id", help="journal the trial under this run (default: manual)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    add_executor_argument(p)
    p.set_defaults(func=cmd_trial)

    p = sub.add_parser("doctor", help="profile the baseline: noise, phases, memory, MFU, fingerprint, loss band")
    p.add_argument("repo")
    p.add_argument("--run-id", help="the run this doctor report belongs to (default: a new run id)")
    p.add_argument("--repeats", type=int, default=5, help="baseline runs in fresh processes (default 5)")
    p.add_argument("--json", action="store_true", help="print doctor.json instead of a summary")
    add_executor_argument(p)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("verify", help="interleaved A/B verification of one candidate against the baseline")
    p.add_argument("repo")
    p.add_argument("--candidate", metavar="SPEC", help='knob settings and +patches, e.g. "dtype=bf16 +fused_gelu"')
    p.add_argument("--knob", action="append", metavar="NAME=VALUE", help="set a knob (repeatable)")
    p.add_argument("--patch", action="append", metavar="ID", help="apply a catalog patch (repeatable)")
    p.add_argument("--run-id", help="use this run's doctor report (default: the latest)")
    p.add_argument("--pairs", type=int, help="override the number of A/B pairs the doctor chose")
    p.add_argument("--repeats", type=int, default=5, help="baseline runs if the doctor must run first")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    add_executor_argument(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("run", help="search knobs and patches jointly, then verify the best candidates")
    p.add_argument("repo")
    p.add_argument("--budget-trials", type=int, default=None, help="search trials (default: budget.trials)")
    p.add_argument("--budget-seconds", type=float, default=None, help="wall-clock budget of the search")
    p.add_argument("--parallel", type=int, default=1,
                   help="trials run at once (default 1: timing is cleanest, and the first batch is revised "
                        "after each trial)")
    p.add_argument("--initial", type=int, default=8, help="size of the diverse first batch (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-id", help="name of the run (default: a new id)")
    p.add_argument("--resume", action="store_true", help="continue the latest (or --run-id) run after a kill")
    p.add_argument("--repeats", type=int, default=5, help="doctor repeats when the run has no doctor report")
    p.add_argument("--bank", metavar="PATH", help="experience bank (default: $INFRARSI_BANK or the user data dir)")
    p.add_argument("--no-bank", action="store_true", help="neither seed from nor write to the experience bank")
    p.add_argument("--json", action="store_true", help="machine-readable progress: one JSON object per line")
    add_executor_argument(p)
    add_proposer_arguments(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("patches", help="list the built-in patch catalog and where each patch applies in the repo")
    p.add_argument("repo")
    p.add_argument("--json", action="store_true", help="one JSON object per catalog patch")
    p.set_defaults(func=cmd_patches)

    p = sub.add_parser("gc", help="remove worktrees and branches of finished or abandoned runs")
    p.add_argument("repo")
    p.add_argument("--protect", action="append", metavar="BRANCH",
                   help="a branch never to delete, e.g. the head of an open pull request (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(func=cmd_gc)

    add_bank_parser(sub)
    add_report_parser(sub)
    add_apply_parser(sub)
    add_promote_parser(sub)
    add_approve_parser(sub)

    p = sub.add_parser("journal", help="list the trials recorded in the repo's journal")
    p.add_argument("repo")
    p.add_argument("--run-id")
    p.add_argument("--json", action="store_true", help="one full trial record per line")
    p.set_defaults(func=cmd_journal)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (ContractError, UsageError, GitLayerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
