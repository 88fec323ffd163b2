"""The offline demo: all five stages on a fresh copy of the tinygpt fixture, ending in a merged pull request.

``./dev demo [--workdir DIR]``. The fixture becomes its own git repository with
a bare remote beside it (``remote.git``) that the local forge serves pull
requests from. Then, through the real CLI: ``init`` (the contract, with a team
lead ``lead`` as approver) → ``doctor`` → ``run`` (built-in proposer, a small
budget) → ``report`` → ``apply`` (local forge) → ``approve 1 --as lead`` →
``promote --pr 1`` (re-verified on the base, then merged by the forge). The
local forge is set up as many teams set GitHub: squash merges only, and one
approving review required on ``main``, so promote's path through a forge's
rules runs offline too. No network, no API key, no GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bot.forges.local import LocalForge
from bot.workspace.commits import commit_all
from bot.workspace.refs import init_repository
from bot.workspace.remotes import add_remote, push
from infrarsi.rundir import RunDir
from infrarsi.rundir import STATE_DIR

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tinygpt"
RUN_ID = "demo"
APPROVER = "lead"
# A small model whose global batch of 16 sequences the "research code" default feeds one sequence at a time
# (16 micro-steps of accumulation): the same computation in fewer, larger micro-batches is a real lever on every
# CPU (2.5x at micro-batch 16, on an AVX-512 BF16 EPYC as it is and with ATen and oneDNN held to AVX2:
# benchmarks/demo_levers.py, docs/BENCHMARKS.md), where the old demo's levers were bf16 and micro-batching of a
# GEMM-bound model: 1.5-1.7x with AVX-512 BF16 or AMX, nothing on an AVX2-only host, which only emulates bf16.
CONFIGS = {
    "small": "--n-layer 2 --n-head 4 --d-model 128 --vocab-size 2048 --seq-len 64 --global-batch 16 --steps 6 "
             "--micro-batch 1",
    "tiny": "--n-layer 1 --n-head 2 --d-model 64 --vocab-size 256 --seq-len 32 --global-batch 4 --steps 6",
}
# Knobs the demo leaves out of its contract: torch.compile costs a minute of compilation per trial on a CPU.
DROPPED_KNOBS = ("compile", "threads")


def prepare_repo(workdir: Path) -> tuple[Path, Path]:
    """``workdir/tinygpt`` as its own git repository on ``main``, with ``workdir/remote.git`` as origin: a
    squash-only forge whose ``main`` needs one approving review."""
    repo = workdir / "tinygpt"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__", STATE_DIR, "infrarsi.*"))
    init_repository(repo, initial_head="main")
    commit_all(repo, "tinygpt fixture")  # the demo plays the user here, so the bot identity signs
    remote = workdir / "remote.git"
    init_repository(remote, bare=True, initial_head="main")
    add_remote(repo, "origin", str(remote))
    forge = LocalForge(remote)
    forge.configure(merge_methods=("squash",))
    forge.protect("main", required_approvals=1)
    return repo, remote


def _drop_table(text: str, header: str) -> str:
    """``text`` without the TOML table ``header``, its leading comments and its body (up to a blank line)."""
    lines = text.splitlines(keepends=True)
    if header + "\n" not in lines:
        return text
    start = end = lines.index(header + "\n")
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    while end + 1 < len(lines) and lines[end + 1].strip() and not lines[end + 1].startswith("["):
        end += 1
    if end + 1 < len(lines) and not lines[end + 1].strip():
        end += 1
    return "".join(lines[:start] + lines[end + 1:])


def edit_contract(text: str, *, top_k: int, max_pairs: int) -> str:
    """What the user would edit after ``init``: an approver, fewer knobs, a small verification budget."""
    for name in DROPPED_KNOBS:
        text = _drop_table(text, f"[knobs.{name}]")
    text = text.replace("[approvers]\n", f"[verify]\ntop_k = {top_k}\nmax_pairs = {max_pairs}\n\n[approvers]\n", 1)
    return re.sub(r"(\[approvers\]\n(?:#[^\n]*\n)*)users = \[\]", rf'\1users = ["{APPROVER}"]', text, count=1)


def stage(n: int, title: str) -> None:
    print(f"\n[{n}/7] {title}", flush=True)


def cli(*argv: str) -> int:
    """One stage through the real command line, in this process."""
    from bot.cli.main import main

    print("  $ infrarsi " + " ".join(argv), flush=True)
    sys.stdout.flush()
    return main(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, help="where to put the fixture copy (default: a new temp dir)")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small",
                        help="the fixture's size: small (default) or tiny (seconds; for tests, no real speedup "
                             "is expected)")
    parser.add_argument("--repeats", type=int, default=3, help="doctor's baseline runs (default 3)")
    parser.add_argument("--budget-trials", type=int, default=6, help="search trials (default 6)")
    parser.add_argument("--initial", type=int, default=4, help="the diverse first batch (default 4)")
    # Verification stops early once a speedup is clear, so a higher cap costs nothing where the speedup is large
    # (bf16 on AVX-512/AMX) and decides the marginal ones: on an AVX2 CPU bf16 is emulated, the best the search
    # finds is ~1.2x at ~9% step-time noise, and 5 pairs (or a fixed 4 at promotion) left it undecided.
    parser.add_argument("--max-pairs", type=int, default=8, help="A/B pairs of verification at most (default 8)")
    parser.add_argument("--promote-pairs", type=int,
                        help="A/B pairs of the re-verification (default: sequential, as the run's verification)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="infrarsi-demo-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / "tinygpt").exists() or (workdir / "remote.git").exists():
        parser.error(f"{workdir} already holds a demo; pass an empty --workdir")

    stage(1, f"init: the tinygpt fixture in {workdir / 'tinygpt'}, its own git repo, remote {workdir / 'remote.git'}")
    repo, remote = prepare_repo(workdir)
    print("  the local forge allows squash merges only and requires one approving review on main "
          f"({remote / 'infrarsi-forge' / 'settings.json'})")
    if cli("init", str(repo), "--command", f"python train.py {CONFIGS[args.config]}") != 0:
        return 1
    contract = repo / "infrarsi.toml"
    contract.write_text(edit_contract(contract.read_text(encoding="utf-8"), top_k=1, max_pairs=args.max_pairs),
                        encoding="utf-8")
    print(f"  edited the contract as a user would: approver {APPROVER!r}, knobs without "
          f"{', '.join(DROPPED_KNOBS)}, verification of the top candidate with at most {args.max_pairs} pairs")
    if cli("lock", str(repo)) != 0:
        return 1
    commit_all(repo, "infrarsi: contract and lock")
    push(repo, "origin", ["refs/heads/main:refs/heads/main"])

    stage(2, "doctor: the baseline's noise, phases, memory and MFU")
    if cli("doctor", str(repo), "--repeats", str(args.repeats), "--run-id", RUN_ID) != 0:
        return 1
    stage(3, "run: the search (built-in proposer), then interleaved A/B verification of the best")
    if cli("run", str(repo), "--run-id", RUN_ID, "--budget-trials", str(args.budget_trials), "--initial",
           str(args.initial), "--bank", str(workdir / "bank.sqlite")) != 0:
        return 1
    stage(4, "report")
    if cli("report", str(repo), "--run-id", RUN_ID) != 0:
        return 1
    report_json = RunDir(repo, RUN_ID).report_json
    report = json.loads(report_json.read_text(encoding="utf-8"))
    if not report["promoted"]:
        print(f"\nno candidate was verified faster than the baseline on this machine (a busy machine hides "
              f"speedups); nothing to propose.\nreport.json: {report_json}")
        print(f"demo took {(time.monotonic() - started) / 60:.1f} min")
        return 1
    stage(5, "apply: the promotion branch, pushed to the local forge, one pull request")
    if cli("apply", str(repo), "--run-id", RUN_ID) != 0:
        return 1
    record = remote / "infrarsi-forge" / "pulls" / "1.json"
    stage(6, f"approve: the team lead {APPROVER!r} approves pull request #1")
    if cli("approve", str(repo), "1", "--as", APPROVER) != 0:
        return 1
    stage(7, "promote: read the forge's rules, re-verify on the base, then merge (a squash: the forge's only method)")
    pairs = ["--pairs", str(args.promote_pairs)] if args.promote_pairs else []
    merged = cli("promote", str(repo), "--pr", "1", *pairs) == 0
    lo, hi = report["speedup_ci"]
    print(f"\nverified speedup: {report['speedup']:.2f}x ({report['ci_level']:.0%} CI [{lo:.2f}, {hi:.2f}]), "
          f"{report['winner']}")
    print(f"pull request #1: {json.loads(record.read_text(encoding='utf-8'))['state']}")
    print(f"report.json: {report_json}")
    print(f"pull-request record: {record}")
    print(f"demo took {(time.monotonic() - started) / 60:.1f} min")
    return 0 if merged else 1


if __name__ == "__main__":
    sys.exit(main())
