"""``infrarsi doctor``: profile the baseline; and the trial context every measuring verb builds.

:func:`trial_context_for` is where ``doctor``, ``verify`` and ``run`` get their
executor; :func:`doctor_failure` gives a baseline that cannot be profiled the
same one-line message (exit status 1) wherever the doctor runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TYPE_CHECKING

from bot.cli.common import add_repo_argument, add_run_id_argument, fmt_bytes, int_at_least, repo_dir, say
from bot.executors.registry import ExecutorOptions, add_executor_argument, build_executor, select_executor
from infrarsi.rundir import journal_path, run_logs
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock

if TYPE_CHECKING:  # the CLI imports stages when a verb runs, not to build its parser
    from bot.stages.run.candidate import TrialContext
    from infrarsi.contract.model import VerifySpec
    from infrarsi.doctor import DoctorReport
    from infrarsi.journal import Journal

__all__ = ["doctor_failure", "noise_lines", "register", "trial_context_for"]


def trial_context_for(args: argparse.Namespace, journal: Journal, *,
                      on_step: Callable[[int], None] | None = None) -> TrialContext:
    """The contract, its lock, the executor and the workspace (when it is a git repo) of REPO, bound to
    ``journal``."""
    from bot.stages.run.candidate import trial_context
    from bot.workspace import GitWorkspace
    from bot.workspace.refs import is_git_repo

    root = repo_dir(args.repo)
    contract = select_executor(load_contract(root), getattr(args, "executor", None))
    lock = read_lock(root)
    executor = build_executor(contract, options=ExecutorOptions(on_step=on_step))
    workspace = GitWorkspace(root) if is_git_repo(root) else None
    return trial_context(contract, lock, workspace=workspace, executor=executor, journal=journal)


@contextmanager
def doctor_failure(run_id: str) -> Iterator[None]:
    """A :class:`DoctorError` inside the block becomes one line that names the run and where its logs are."""
    from infrarsi.doctor import DoctorError

    try:
        yield
    except DoctorError as e:
        raise DoctorError(f"the doctor failed for run {run_id}: {e}; see the baseline's logs in "
                          f"{run_logs(Path(), run_id)}/") from None


def cmd_doctor(args: argparse.Namespace) -> int:
    from bot.stages.doctor.baseline import new_run_id, run_doctor
    from infrarsi.journal import Journal

    root = repo_dir(args.repo)
    run_id = args.run_id or new_run_id()
    with Journal(journal_path(root)) as journal:
        ctx = trial_context_for(args, journal)
        print(f"doctor for run {run_id}: {args.repeats} baseline runs in fresh processes", file=sys.stderr)
        with doctor_failure(run_id):
            report, out = run_doctor(ctx, run_id=run_id, repeats=args.repeats, progress=say(args),
                                     remeasure_device=args.remeasure_device)
    if args.json:
        print(report.to_json(), end="")
        return 0
    mfu = f"{report.mfu:.1%} ({report.baseline_dtype})" if report.mfu is not None else \
        "defect (see doctor.md)" if report.mfu_defect else "n/a"
    print(f"step time {report.median_s * 1000:.1f} ms; peak memory {fmt_bytes(report.peak_mem_bytes)}; "
          f"MFU {mfu} (model FLOP/s against this device's measured peak)")
    for line in noise_lines(report, ctx.contract.verify):
        print(line)
    print(f"wrote {out / 'doctor.json'} and {out / 'doctor.md'}")
    return 0


def noise_lines(report: DoctorReport, spec: VerifySpec) -> list[str]:
    """The doctor's noise figures in plain words (cv within / between, the minimum detectable effect), and a
    warning when the noise hides the speedup verification is sized for (``verify.target_effect``)."""
    mde = f"+{report.mde:.0%}" if math.isfinite(report.mde) else "any speedup"
    lines = [f"noise: steps vary {report.cv_within:.1%} within a run and runs {report.cv_between:.1%} from each "
             f"other, so this machine's noise hides speedups below {mde}: verification needs "
             f"{report.verify_pairs} interleaved A/B pairs to confirm one of that size"]
    if not math.isfinite(report.mde) or report.mde > spec.target_effect:
        lines.append(f"warning: this machine can only confirm a speedup of {mde} or more (verify.target_effect is "
                     f"+{spec.target_effect:.0%}, verify.max_pairs {spec.max_pairs}): a smaller real speedup will "
                     "read not_significant; run on a quieter machine or raise verify.max_pairs (docs/doctor.md)")
    return lines


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="profile the baseline: noise, phases, memory, MFU, fingerprint, loss band")
    add_repo_argument(p)
    add_run_id_argument(p, "the run this doctor report belongs to (default: a new run id)")
    p.add_argument("--repeats", type=int_at_least(2), default=5, metavar="N",
                   help="baseline runs in fresh processes, at least 2 (default 5)")
    add_executor_argument(p)
    p.add_argument("--json", action="store_true", help="print doctor.json instead of a summary")
    p.add_argument("--remeasure-device", action="store_true",
                   help="measure this device's peak FLOP/s again instead of reusing a measurement of the last "
                        "6 hours (docs/doctor.md)")
    p.set_defaults(func=cmd_doctor)
