"""A finished run with a verified winner, for the report, apply and promote tests.

Everything is real except one thing: the doctor report, the baseline and
candidate trials, their commits on ``infrarsi/<run>/<n>`` and the journal come
from the real CLI on a copy of tinygpt (tiny config). The verdict in run.json
is *recorded*: it names those real trials but carries fixed step times, because
whether a 2-core box shared with other jobs shows a significant speedup in
three pairs is not what these tests are about (verification has its own tests).
``run.json`` has the shape :func:`bot.stages.run.search.run_summary` writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pygit2
import pytest

from tests.support.repos import commit_tree
from infrarsi.contract import load_contract
from infrarsi.doctor import DoctorReport
from infrarsi.journal import Journal
from infrarsi.stats import compare
from infrarsi.trial_record import Candidate
from infrarsi.verdict import Reference, Verdict, VerdictKind, trial_invariants
from tests.support.tinygpt import TINY_ARGS, copy_fixture, infrarsi

RUN_ID = "r1"
WINNER_KNOBS = ("dtype=bf16",)
WINNER_PATCHES = ("fused_gelu",)
BASE_TIMES = (0.0120, 0.0124, 0.0119, 0.0122)
CAND_TIMES = (0.0090, 0.0093, 0.0091, 0.0089)


def _ok(result) -> None:  # noqa: ANN001
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]


def make_promoted_run(dest: Path) -> Path:
    """``dest/tinygpt`` (on ``main``, pushed to the bare ``dest/remote.git`` as origin) with a finished run."""
    repo = copy_fixture(dest / "tinygpt")
    _ok(infrarsi("init", str(repo), "--command", f"python train.py {TINY_ARGS}"))
    toml = (repo / "infrarsi.toml").read_text(encoding="utf-8")
    head, _, tail = toml.partition("[approvers]\n")
    assert tail, "init writes an [approvers] table"
    tail = tail.replace("users = []", 'users = ["alice"]\nteams = ["acme/perf"]', 1)
    (repo / "infrarsi.toml").write_text(head + "[approvers]\n" + tail, encoding="utf-8")
    _ok(infrarsi("lock", str(repo)))
    commit_tree(repo, "tinygpt with its contract")
    remote = dest / "remote.git"
    pygit2.init_repository(str(remote), bare=True, initial_head="main")
    git = pygit2.Repository(str(repo))
    git.remotes.create("origin", str(remote))
    git.remotes["origin"].push(["refs/heads/main:refs/heads/main"])

    _ok(infrarsi("doctor", str(repo), "--repeats", "2", "--run-id", RUN_ID, timeout=1800))
    knob_args = [a for k in WINNER_KNOBS for a in ("--knob", k)] + [a for p in WINNER_PATCHES for a in ("--patch", p)]
    _ok(infrarsi("trial", str(repo), "--run-id", RUN_ID, timeout=1200))
    _ok(infrarsi("trial", str(repo), "--run-id", RUN_ID, *knob_args, timeout=1200))
    write_run_json(repo)
    return repo


def write_run_json(repo: Path, *, promoted: bool = True) -> Path:
    contract = load_contract(repo)
    run_dir = repo / ".infrarsi" / "runs" / RUN_ID
    doctor = DoctorReport.from_dict(json.loads((run_dir / "doctor.json").read_text()))
    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        records = journal.trials(RUN_ID)
    # The two trials this helper ran after the doctor (whose witness calibration also runs a bf16 baseline).
    searched = sorted((r for r in records if r.trial_no not in doctor.trials), key=lambda r: r.trial_no)[-2:]
    base = [r for r in searched if not r.candidate.patches]
    cand = [r for r in searched if r.candidate.patches]
    candidate = cand[0].candidate
    comparison = compare(BASE_TIMES, CAND_TIMES, min_effect=0.01, alpha=0.05, n_boot=500, seed=0)
    reference = Reference(work=doctor.work, band=doctor.loss_band)
    checks = tuple(c for r in cand for c in trial_invariants(r, reference))
    verdict = Verdict(kind=VerdictKind.PROMOTED if promoted else VerdictKind.NOT_SIGNIFICANT,
                      reason=comparison.reason, candidate=candidate,
                      baseline_trials=tuple(r.trial_no for r in base), candidate_trials=tuple(r.trial_no for r in cand),
                      baseline_step_s=BASE_TIMES, candidate_step_s=CAND_TIMES, comparison=comparison,
                      invariants=checks)
    failed = [r for r in searched if r.outcome.value != "ok"]
    summary = {
        "run_id": RUN_ID, "baseline_step_s": doctor.median_s,
        "trials": [{"trial_no": r.trial_no, "candidate": r.candidate.describe(), "outcome": r.outcome.value,
                    "reason": r.reason, "step_time_s": r.metrics.step_time_s, "cost_s": r.cost_s,
                    "commit": r.commit} for r in searched],
        "failed_cost_s": sum(r.cost_s for r in failed), "oom": [],
        "verdicts": [verdict.to_dict()], "best": verdict.to_dict() if promoted else None,
        "posterior": {"time_effects": [
            {"feature": "dtype=bf16", "prior_mean": -0.51, "prior_sd": 0.3, "post_mean": -0.28, "post_sd": 0.1},
            {"feature": "fused_gelu", "prior_mean": -0.05, "prior_sd": 0.1, "post_mean": -0.02, "post_sd": 0.05}]},
    }
    assert Candidate.of(contract.defaults()).digest() == base[0].candidate.digest()
    path = run_dir / "run.json"
    path.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return path


def clone_template(template: Path, dest: Path) -> Path:
    """A copy of a ``make_promoted_run`` directory with its origin re-pointed at the copied remote."""
    shutil.copytree(template, dest, symlinks=True)
    repo = dest / "tinygpt"
    git = pygit2.Repository(str(repo))
    git.remotes.set_url("origin", str(dest / "remote.git"))
    return repo


def shared_template(base: Path) -> Path:
    """One finished run per pytest session, shared by every module that asks (built on first use)."""
    root = base / "promoted-template"
    if not (root / "done").is_file():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        make_promoted_run(root)
        (root / "done").write_text("ok\n")
    return root


def pull_records(remote: Path) -> list[Path]:
    return sorted((remote / "infrarsi-forge" / "pulls").glob("*.json"))


@pytest.fixture(scope="session")
def promoted_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's finished run (:func:`shared_template`); a test module imports this fixture to use it."""
    return shared_template(tmp_path_factory.getbasetemp())


def passing_verdict(candidate: Candidate) -> Verdict:
    """A re-verification verdict that passes (the statistics are tested in test_verdict_judge.py)."""
    c = compare((0.012, 0.0124, 0.0119, 0.0122), (0.009, 0.0093, 0.0091, 0.0089), min_effect=0.01, alpha=0.05,
                n_boot=200, seed=0)
    return Verdict(kind=VerdictKind.PROMOTED, reason=c.reason, candidate=candidate, baseline_trials=(),
                   candidate_trials=(), baseline_step_s=c.baseline, candidate_step_s=c.candidate, comparison=c,
                   invariants=())


def reverify_passes(repo: Path, run_id: str, candidate: Candidate, base: str) -> Verdict:
    """``promote``'s ``reverify`` hook, passing."""
    return passing_verdict(candidate)
