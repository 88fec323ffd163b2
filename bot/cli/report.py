"""``infrarsi report``: report.md, report.json and winner.diff of a finished run (:mod:`bot.stages.report.build`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bot.cli.common import add_repo_argument, add_run_id_argument, repo_dir
from infrarsi.rundir import RunDir

__all__ = ["register"]


def cmd_report(args: argparse.Namespace) -> int:
    from bot.stages.report.build import load_report
    from bot.workspace import GitWorkspace

    root = repo_dir(args.repo)
    files = load_report(root, args.run_id, workspace=GitWorkspace(root))
    r = files.report
    pngs = []
    if args.png:
        from bot.stages.report.png import write_pngs

        pngs = write_pngs(r, RunDir(root, r.run_id).charts)
    if args.json:
        for path in pngs:
            print(f"wrote {path}", file=sys.stderr)
        print(files.json.read_text(encoding="utf-8"), end="")
        return 0
    if r.promoted and r.speedup is not None and r.speedup_ci:
        print(f"run {r.run_id}: verified speedup {r.speedup:.2f}x ({(r.ci_level or 0):.0%} CI "
              f"[{r.speedup_ci[0]:.2f}, {r.speedup_ci[1]:.2f}]) with {r.winner}")
    else:
        print(f"run {r.run_id}: no verified speedup")
    print(f"{len(r.trials)} trials, {len(r.failed)} failed costing {r.failed_cost_s:.1f} device-s")
    print(f"wrote {files.markdown}")
    print(f"wrote {files.json}")
    for path in pngs:
        print(f"wrote {path}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="write report.md and report.json of a finished run")
    add_repo_argument(p)
    add_run_id_argument(p, "the run id (default: the latest finished run)", deprecated_run=True)
    p.add_argument("--json", action="store_true", help="print report.json")
    p.add_argument("--png", action="store_true",
                   help="also draw the charts as PNG files in the run's charts/ folder (needs matplotlib)")
    p.set_defaults(func=cmd_report)
