"""Real verification while another process keeps both cores busy from the second pair on: "promoted" after waiting
for quiet, or "inconclusive" — never "not_significant" — and a candidate equal to the baseline is never promoted."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.executors.local import LocalExecutor
from bot.stages.doctor.baseline import run_doctor
from bot.stages.run.candidate import trial_context
from bot.stages.run.verify import verify_candidate
from bot.workspace import GitWorkspace
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.journal import Journal
from infrarsi.rundir import journal_path
from infrarsi.trial_record import Candidate
from infrarsi.verdict import VerdictKind
from tests.support.repos import commit_tree
from tests.support.tinygpt import committed_tinygpt, infrarsi

pytestmark = pytest.mark.slow

HOG = "import os\nwhile True:\n    pass\n"


@contextmanager
def both_cores_busy() -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = committed_tinygpt(tmp_path_factory.mktemp("load") / "tinygpt")
    toml = (repo / "infrarsi.toml").read_text()
    (repo / "infrarsi.toml").write_text(toml + "\n[verify]\nmax_pairs = 4\nquiet_wait_s = 6\n")
    assert infrarsi("lock", str(repo)).returncode == 0
    commit_tree(repo, "short waits")
    return repo


def _verify(repo: Path, candidate: Candidate, run_id: str):  # noqa: ANN202
    contract = load_contract(repo)
    said: list[str] = []
    with Journal(journal_path(repo)) as journal:
        ctx = trial_context(contract, read_lock(repo), workspace=GitWorkspace(repo), executor=LocalExecutor(),
                            journal=journal)
        doctor, _ = run_doctor(ctx, run_id=run_id, repeats=3)
        with contextmanager(_load_from_pair_two)(said) as progress:
            verdict = verify_candidate(ctx, run_id=run_id, candidate=candidate, doctor=doctor, progress=progress)
    return verdict, said


def _load_from_pair_two(said: list[str]) -> Iterator:
    """A progress callback that starts the load when pair 2 begins, and stops it when verification ends."""
    hog: list = []

    def progress(message: str) -> None:
        said.append(message)
        if message.startswith("pair 2/") and not hog:
            hog.append(both_cores_busy())
            hog[0].__enter__()

    try:
        yield progress
    finally:
        if hog:
            hog[0].__exit__(None, None, None)


def test_a_real_win_under_sustained_load_is_promoted_after_quiet_or_inconclusive(repo: Path) -> None:
    contract = load_contract(repo)
    candidate = Candidate.of({**contract.defaults(), "micro_batch": 4})
    verdict, said = _verify(repo, candidate, "win")
    assert verdict.kind in (VerdictKind.PROMOTED, VerdictKind.INCONCLUSIVE), (verdict.kind, verdict.reason, said)
    if verdict.kind is VerdictKind.INCONCLUSIVE:
        assert verdict.disturbed and "waiting" in " ".join(said), said


def test_the_baseline_against_itself_under_sustained_load_is_never_promoted(repo: Path) -> None:
    contract = load_contract(repo)
    verdict, said = _verify(repo, Candidate.of(contract.defaults()), "same")
    assert verdict.kind is not VerdictKind.PROMOTED, (verdict.reason, said)
