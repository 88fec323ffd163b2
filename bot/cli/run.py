"""``infrarsi run | verify``: the search with its verification, and one candidate's interleaved A/B by hand."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TYPE_CHECKING

from bot.cli.common import (UsageError, add_repo_argument, add_run_id_argument, int_at_least, positive_float,
                            repo_dir, say)
from bot.cli.init import proposer
from bot.cli.doctor import doctor_failure, trial_context_for
from bot.executors.registry import add_executor_argument
from bot.proposers import add_proposer_arguments, spent_text
from infrarsi.rundir import RunDir, journal_path, latest_run, read_json, write_json
from infrarsi.bank import open_bank
from infrarsi.contract import load_contract

if TYPE_CHECKING:  # the CLI imports stages when a verb runs, not to build its parser
    from bot.stages.run.search import RunResult
    from bot.workspace.gc import PruneReport
    from infrarsi.contract.model import Contract
    from infrarsi.journal import Journal
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
    from infrarsi.trial_record import Candidate

    root = repo_dir(args.repo)
    if not (args.knob or args.patch or (args.candidate or "").strip()):
        raise UsageError("verify: name the candidate to compare with the baseline: --knob NAME=VALUE, --patch ID "
                         "or --candidate SPEC (the baseline against itself verifies nothing)")
    contract = load_contract(root)
    candidate = _candidate_from(args, contract)  # checked before anything is built
    if candidate.digest() == Candidate.of(contract.defaults()).digest():
        raise UsageError(f"verify: {candidate.describe()} is the baseline (every knob at its default, no patch); "
                         "name a knob value or a patch that differs from it")
    with Journal(journal_path(root)) as journal:
        ctx = trial_context_for(args, journal)
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
        from dataclasses import replace

        from infrarsi.doctor import windowed

        ctx = replace(ctx, contract=windowed(ctx.contract, doctor))  # the measured window the doctor sized
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


def nothing_to_search(contract: Contract, patches: Mapping[str, object]) -> str | None:
    """Why a run could not search anything (no knob, no applicable patch), or None. One small rule, so that a
    run that searches the proposer's patches (issue 47) can relax it."""
    if contract.knobs or patches:
        return None
    return ("the contract has no knob and no catalog patch applies to its editable scope, so there is nothing to "
            "search: add a knob under [knobs] (docs/contract.md) or widen scope.editable (`infrarsi patches` says "
            "why each patch does not apply)")


def known_run(root: Path, run_id: str) -> bool:
    """Whether ``run_id`` is a run of this repo: its directory under .infrarsi/runs or a row in its journal."""
    from infrarsi.journal import Journal

    if RunDir(root, run_id).path.is_dir():
        return True
    if not journal_path(root).is_file():
        return False
    with Journal(journal_path(root)) as journal:
        return any(known == run_id for known, _, _ in journal.runs())


def _resumed_run_id(root: Path, run_id: str | None) -> str:
    """The run ``--resume`` continues: ``--run-id``'s, which must exist, else the latest."""
    if run_id is None:
        latest = latest_run(root)
        if latest is None:
            raise UsageError("--resume: no earlier run in this repo to resume (start one without --resume)")
        return latest
    if not known_run(root, run_id):
        raise UsageError(f"--resume --run-id {run_id}: no run {run_id!r} in this repo to resume (the latest is "
                         f"{latest_run(root) or 'none'}; `infrarsi journal` lists every run)")
    return run_id


def cmd_run(args: argparse.Namespace) -> int:
    from bot.cli.run_progress import RunProgress, doctor_loader
    from bot.stages.doctor.baseline import new_run_id
    from bot.stages.run.search import RunOptions, run_search
    from infrarsi.journal import Journal

    root = repo_dir(args.repo)
    run_id = _resumed_run_id(root, args.run_id) if args.resume else args.run_id or new_run_id()
    contract = load_contract(root)
    options = RunOptions(budget_trials=contract.budget.trials if args.budget_trials is None else args.budget_trials,
                         budget_seconds=contract.budget.seconds if args.budget_seconds is None else args.budget_seconds,
                         parallel=args.parallel, initial=args.initial, seed=args.seed, repeats=args.repeats,
                         proposer=None if args.proposer == "builtin" else proposer(args, root))
    progress = RunProgress(contract=contract, run_id=run_id, as_json=args.json, load_doctor=doctor_loader(root))
    bank = None if args.no_bank else open_bank(Path(args.bank) if args.bank else None)
    try:
        with Journal(journal_path(root)) as journal:
            ctx = trial_context_for(args, journal)
            if (why := nothing_to_search(ctx.contract, ctx.patches)) is not None:
                raise UsageError(why)
            print(f"run {run_id}" + (" (resumed)" if args.resume else ""), file=sys.stderr)
            with doctor_failure(run_id):
                result = run_search(ctx, run_id=run_id, options=options, progress=progress, bank=bank)
            pruned = None if args.keep_branches or ctx.workspace is None else _prune(root, run_id, result, journal)
    except BaseException:
        # Every command that spent tokens says so, also when it fails (or is interrupted) partway.
        if options.proposer is not None and (spent := spent_text(options.proposer)):
            print(f"LLM proposer: the run stopped{spent}", file=sys.stderr)
        raise
    finally:
        if bank is not None:
            bank.close()
    best = result.best
    if args.json and pruned is not None:
        print(json.dumps({"event": "prune", "run_id": run_id, "deleted": list(pruned.deleted),
                          "left": {k.name: k.reason for k in pruned.left}}, sort_keys=True), flush=True)
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
        if pruned is not None:
            print(_pruned_text(pruned))
        elif args.keep_branches:
            print(f"trial branches of run {run_id} kept (--keep-branches): `infrarsi gc {args.repo}` removes them")
        print(f"wrote {result.path}")
    return 0


def _prune(root: Path, run_id: str, result: RunResult, journal: Journal) -> PruneReport:
    """Delete the finished run's trial branches but the verified winner's."""
    from bot.stages.report.build import winner_record
    from bot.workspace.gc import prune_run
    from bot.workspace.naming import trial_branch

    winner = winner_record(journal.trials(run_id), result.best)
    keep = {trial_branch(run_id, winner.trial_no): "the verified winner's"} if winner is not None else {}
    return prune_run(root, run_id, keep=keep)


def _pruned_text(pruned: PruneReport) -> str:
    """One line: how many trial branches the run removed and which it left, and why."""
    left = "; ".join(f"{k.name} ({k.reason})" for k in pruned.left)
    return (f"trial branches of run {pruned.run_id}: removed {len(pruned.deleted)}, left {len(pruned.left)}"
            + (f": {left}" if left else "") + "; every trial stays in the journal (`infrarsi journal`), "
            "--keep-branches keeps them all, and `infrarsi gc` cleans up after runs that were killed")


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="search knobs and patches jointly, then verify the best candidates")
    add_repo_argument(p)
    p.add_argument("--budget-trials", type=int_at_least(1), default=None, metavar="N",
                   help="search trials, at least 1 (default: budget.trials)")
    p.add_argument("--budget-seconds", type=positive_float, default=None, metavar="S",
                   help="wall-clock budget of the search in seconds, > 0 (default: budget.seconds, else none)")
    p.add_argument("--parallel", type=int_at_least(1), default=1, metavar="K",
                   help="trials run at once, at least 1 (default 1: timing is cleanest, and the first batch is "
                        "revised after each trial)")
    p.add_argument("--initial", type=int_at_least(1), default=8, metavar="N",
                   help="size of the diverse first batch, at least 1 (default 8)")
    p.add_argument("--seed", type=int_at_least(0), default=0, metavar="N",
                   help="seed of the search's random choices (space-filling picks, model fits), >= 0 (default 0): "
                        "the same seed on the same trials proposes the same candidates")
    add_run_id_argument(p, "name of the run (default: a new id)")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest run (or --run-id's, which must exist) after a kill")
    p.add_argument("--keep-branches", action="store_true",
                   help="keep every trial branch infrarsi/<run>/<n> when the run ends (default: only the verified "
                        "winner's is kept; `infrarsi gc` removes what is left)")
    p.add_argument("--repeats", type=int_at_least(2), default=5, metavar="N",
                   help="doctor repeats when the run has no doctor report, at least 2 (default 5)")
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
    p.add_argument("--pairs", type=int_at_least(1), metavar="K",
                   help="run exactly this many A/B pairs, at least 1 (the fixed design; at most "
                   "verify.max_pairs) instead of stopping as soon as the sequential plan decides")
    p.add_argument("--repeats", type=int_at_least(2), default=5, metavar="N",
                   help="baseline runs if the doctor must run first, at least 2 (default 5)")
    add_executor_argument(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=cmd_verify)
