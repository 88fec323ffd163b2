"""The offline demo: a fresh copy of the tinygpt fixture, its contract, a baseline and a candidate.

``./dev demo [--workdir DIR]``. Everything runs here: the bundled fixture, the
local executor, the SQLite journal; no network and no API key.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pygit2

from bot.draft import draft_contract
from bot.executors.local import LocalExecutor
from bot.git.commits import BOT_IDENTITY
from bot.scan import scan_repo
from bot.toml_writer import render_contract
from bot.candidate_trial import trial_context
from bot.trials import journal_path, make_candidate, state_dir
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock, write_lock
from infrarsi.journal import Journal
from infrarsi.trial import Outcome, TrialRecord

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tinygpt"
COMMAND = "python train.py"
CANDIDATES: tuple[tuple[str, list[str]], ...] = (
    ("baseline", []),
    ("bf16 autocast", ["dtype=bf16"]),
)


def commit_all(repo: Path, message: str) -> None:
    """Commit every file of the demo repo (the demo plays the user here, so the bot identity signs)."""
    git = pygit2.Repository(str(repo))
    git.index.add_all()
    git.index.write()
    sig = pygit2.Signature(BOT_IDENTITY.name, BOT_IDENTITY.email)
    parents = [] if git.head_is_unborn else [git.head.target]
    git.create_commit("HEAD", sig, sig, message, git.index.write_tree(), parents)


def prepare_repo(workdir: Path) -> Path:
    """Copy the fixture into ``workdir/tinygpt`` as its own git repository with one commit."""
    repo = workdir / "tinygpt"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__", ".infrarsi"))
    pygit2.init_repository(str(repo), initial_head="main")
    commit_all(repo, "tinygpt fixture")
    return repo


def _row(label: str, record: TrialRecord) -> str:
    m = record.metrics
    step = f"{m.step_time_s * 1000:9.1f} ms" if m.step_time_s else " " * 12
    cv = f"{m.step_time_cv:6.1%}" if m.step_time_cv is not None else " " * 6
    tps = f"{m.tokens_per_s:10,.0f}" if m.tokens_per_s else " " * 10
    mem = f"{m.peak_mem_bytes / 2**20:7.0f} MiB" if m.peak_mem_bytes else " " * 11
    loss = f"{m.loss[-1]:.4f}" if m.loss else "-"
    return f"  {label:<16} {record.outcome.value:<8} {step} {cv} {tps} {mem}  {loss:>8}  {record.cost_s:6.1f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev demo", description=__doc__)
    parser.add_argument("--workdir", type=Path, help="where to put the fixture copy (default: a new temp dir)")
    args = parser.parse_args(argv)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="infrarsi-demo-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / "tinygpt").exists():
        parser.error(f"{workdir / 'tinygpt'} already exists; pass an empty --workdir")

    print(f"[1/3] init: copying the tinygpt fixture to {workdir / 'tinygpt'} and drafting its contract")
    repo = prepare_repo(workdir)
    draft = draft_contract(COMMAND, scan_repo(repo, "train.py"))
    (repo / "infrarsi.toml").write_text(render_contract(draft), encoding="utf-8")
    contract = load_contract(repo)
    write_lock(contract)
    lock = read_lock(repo)
    state_dir(repo)
    commit_all(repo, "infrarsi: contract and lock")
    print(f"      {len(contract.knobs)} knobs ({', '.join(k.name for k in contract.knobs)}), "
          f"{len(contract.scope.editable)} editable symbols, locked: {', '.join(contract.scope.locked)}")

    print(f"[2/3] trials: {contract.timing.warmup_steps} warm-up + {contract.timing.measured_steps} measured steps "
          "each, timed by the bot")
    records: list[tuple[str, TrialRecord]] = []
    with Journal(journal_path(repo)) as journal:
        journal.ensure_run("demo", kind="demo")
        ctx = trial_context(contract, lock, executor=LocalExecutor(), journal=journal)
        for label, knobs in CANDIDATES:
            candidate = make_candidate(contract, knobs)
            print(f"      running {label}: {candidate.describe()}", flush=True)
            record = ctx.run("demo", candidate)
            print(f"      … {record.outcome.value}, commit {(record.commit or '')[:10]} on "
                  f"infrarsi/demo/{record.trial_no}", flush=True)
            records.append((label, record))

    print("[3/3] what the bot measured")
    print(f"  {'candidate':<16} {'outcome':<8} {'step time':>12} {'cv':>6} {'tokens/s':>10} {'peak mem':>11}  "
          f"{'loss':>8}  {'cost':>8}")
    for label, record in records:
        print(_row(label, record))
    base = records[0][1]
    failed = [(label, r) for label, r in records if r.outcome is not Outcome.OK]
    for label, r in failed:
        print(f"  {label}: {r.outcome.value} — {r.reason}")
    if base.outcome is Outcome.OK and base.metrics.step_time_s:
        for label, r in records[1:]:
            if r.outcome is Outcome.OK and r.metrics.step_time_s:
                print(f"  speedup of {label} over the baseline: {base.metrics.step_time_s / r.metrics.step_time_s:.2f}x "
                      "(one trial each; verification with repeats is the doctor/verify stages' job)")
    print(f"journal: {journal_path(repo)}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
