"""``infrarsi run | verify``: the search with its verification, and one candidate's interleaved A/B by hand."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TYPE_CHECKING

from bot.cli.common import UsageError, add_repo_argument, add_run_id_argument, repo_dir, say
from bot.cli.init import proposer
from bot.cli.doctor import doctor_failure, trial_context_for
from bot.executors.registry import add_executor_argument
from bot.proposers import add_proposer_arguments, spent_text
from infrarsi.rundir import RunDir, journal_path, latest_run, read_json, write_json
from infrarsi.bank import open_bank
from infrarsi.contract import load_contract

if TYPE_CHECKING:  # the CLI imports stages when a verb runs, not to build its parser
    from infrarsi.trial_record import Candidate
    from infrarsi.verdict import Verdict

__all__ = ["register"]


def _candidate_from(args: argparse.Namespace, contract) -> Candidate:  # noqa: ANN001
    from infrarsi.candidates import CandidateError, make_candidate
    from infrarsi.trial_record import parse_description

    described, patched = parse_description(args.candidate or "")
    knobs = list(args.knob or []) + [f"{name}={value}" if value else name for name, value in described]
    patches = list(args.patch or []) + patched
    try:
        return make_candidate(contract, knobs, tuple(patches))
    except CandidateError as e:
        raise UsageError(str(e)) from None


def cmd_verify(args: argparse.Namespace) -> int:
    from bot.stages.doctor.baseline import load_doctor, new_run_id, run_doctor
    from bot.stages.run.verify import verify_candidate
    from infrarsi.journal import Journal

    root = repo_dir(args.repo)
    with Journal(journal_path(root)) as journal:
        ctx = trial_context_for(args, journal)
        candidate = _candidate_from(args, ctx.contract)
        unknown = [p for p in candidate.patches if p not in ctx.patches]
        if unknown:
            raise UsageError(f"patch {unknown[0]}: not applicable here (applicable: "
                             f"{', '.join(sorted(ctx.patches)) or 'none; patches need a git repository'})")
        run_id = args.run_id or latest_run(root) or new_run_id()
        doctor = load_doctor(root, run_id)
        if doctor is None:
            print(f"no doctor report for run {run_id}: running the doctor first", file=sys.stderr)
            with doctor_failure(run_id):
                doctor, _ = run_doctor(ctx, run_id=run_id, repeats=args.repeats, progress=say(args))
        cap = ctx.contract.verify.max_pairs
        if args.pairs:
            pairs = min(args.pairs, cap)
            print(f"verifying {candidate.describe()} against the baseline: {pairs} interleaved pairs (fixed"
                  + (f"; --pairs {args.pairs} is capped at verify.max_pairs = {cap}" if args.pairs > cap else "")
                  + ")", file=sys.stderr)
        else:
            pairs = None
            print(f"verifying {candidate.describe()} against the baseline: interleaved pairs until the sequential "
                  f"plan decides (at most {cap}, verify.max_pairs)", file=sys.stderr)
        from infrarsi.verdict import Verdict

        earlier = read_json(RunDir(root, run_id).verify_json(candidate.digest()))
        resume = Verdict.from_dict(earlier) if earlier and earlier.get("verdict") == "inconclusive" else None
        verdict = verify_candidate(ctx, run_id=run_id, candidate=candidate, doctor=doctor, pairs=pairs,
                                   progress=say(args), resume=resume)
    out = write_json(RunDir(root, run_id).verify_json(candidate.digest()), verdict.to_dict())
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
    shown: set[tuple[str, object]] = set()
    for check in verdict.invariants:
        if (not check.ok or check.name in ("loss_band", "clock", "project_metadata", "split_reference")) \
                and (check.name, check.status) not in shown:
            shown.add((check.name, check.status))
            label = {"ok": "ok         ", "broken": "BROKEN     "}.get(check.status.value,
                                                                       "waived     " if check.waived else
                                                                       "NOT CHECKED")
            lines.append(f"  {label} {check.name}: {check.detail}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    from bot.stages.doctor.baseline import new_run_id
    from bot.stages.run.search import RunOptions, run_search
    from infrarsi.journal import Journal

    root = repo_dir(args.repo)
    if args.resume and not args.run_id:
        args.run_id = latest_run(root)
        if args.run_id is None:
            raise UsageError("--resume: no earlier run in this repo")
    run_id = args.run_id or new_run_id()
    contract = load_contract(root)
    options = RunOptions(budget_trials=args.budget_trials or contract.budget.trials,
                         budget_seconds=args.budget_seconds or contract.budget.seconds,
                         parallel=args.parallel, initial=args.initial, seed=args.seed, repeats=args.repeats,
                         proposer=None if args.proposer == "builtin" else proposer(args, root))

    def progress(event: dict) -> None:
        if args.json:
            print(json.dumps(event, sort_keys=True, default=str), flush=True)
            return
        if event["event"] == "trial":
            best = f"best {event['best_speedup']:.2f}x" if event.get("best_speedup") else "best -"
            step = f"{event['step_time_s'] * 1000:.1f} ms" if event.get("step_time_s") else event["reason"][:60]
            if event.get("speedup"):  # against the baseline as the machine ran at the time (infrarsi/search/drift)
                ref = f"control {event['control_trial']}" if event.get("control_trial") else "doctor"
                step += f" ({event['speedup']:.2f}x vs {ref})"
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
            ctx = trial_context_for(args, journal)
            print(f"run {run_id}" + (" (resumed)" if args.resume else ""), file=sys.stderr)
            with doctor_failure(run_id):
                result = run_search(ctx, run_id=run_id, options=options, progress=progress, bank=bank)
    except BaseException:
        # Every command that spent tokens says so, also when it fails (or is interrupted) partway.
        if options.proposer is not None and (spent := spent_text(options.proposer)):
            print(f"LLM proposer: the run stopped{spent}", file=sys.stderr)
        raise
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


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="search knobs and patches jointly, then verify the best candidates")
    add_repo_argument(p)
    p.add_argument("--budget-trials", type=int, default=None, help="search trials (default: budget.trials)")
    p.add_argument("--budget-seconds", type=float, default=None, help="wall-clock budget of the search")
    p.add_argument("--parallel", type=int, default=1,
                   help="trials run at once (default 1: timing is cleanest, and the first batch is revised "
                        "after each trial)")
    p.add_argument("--initial", type=int, default=8, help="size of the diverse first batch (default 8)")
    p.add_argument("--seed", type=int, default=0)
    add_run_id_argument(p, "name of the run (default: a new id)")
    p.add_argument("--resume", action="store_true", help="continue the latest (or --run-id) run after a kill")
    p.add_argument("--repeats", type=int, default=5, help="doctor repeats when the run has no doctor report")
    p.add_argument("--bank", metavar="PATH", help="experience bank (default: $INFRARSI_BANK or the user data dir)")
    p.add_argument("--no-bank", action="store_true", help="neither seed from nor write to the experience bank")
    add_executor_argument(p)
    p.add_argument("--json", action="store_true", help="machine-readable progress: one JSON object per line")
    add_proposer_arguments(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("verify", help="interleaved A/B verification of one candidate against the baseline")
    add_repo_argument(p)
    p.add_argument("--candidate", metavar="SPEC", help='knob settings and +patches, e.g. "dtype=bf16 +fused_gelu"')
    p.add_argument("--knob", action="append", metavar="NAME=VALUE", help="set a knob (repeatable)")
    p.add_argument("--patch", action="append", metavar="ID", help="apply a catalog patch (repeatable)")
    add_run_id_argument(p, "use this run's doctor report (default: the latest)")
    p.add_argument("--pairs", type=int, help="run exactly this many A/B pairs (the fixed design; at most "
                   "verify.max_pairs) instead of stopping as soon as the sequential plan decides")
    p.add_argument("--repeats", type=int, default=5, help="baseline runs if the doctor must run first")
    add_executor_argument(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=cmd_verify)
