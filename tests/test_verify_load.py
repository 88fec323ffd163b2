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
def doctored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """tinygpt (tiny config, short waits for quiet) and its doctor, run once on a quiet machine."""
    repo = committed_tinygpt(tmp_path_factory.mktemp("load") / "tinygpt")
    toml = (repo / "infrarsi.toml").read_text()
    (repo / "infrarsi.toml").write_text(toml + "\n[verify]\nmax_pairs = 4\nquiet_wait_s = 6\n")
    assert infrarsi("lock", str(repo)).returncode == 0
    commit_tree(repo, "short waits")
    with Journal(journal_path(repo)) as journal:
        doctor, _ = run_doctor(_context(repo, journal), run_id="load", repeats=3)
    return repo, doctor


def _context(repo: Path, journal: Journal):  # noqa: ANN202
    return trial_context(load_contract(repo), read_lock(repo), workspace=GitWorkspace(repo), executor=LocalExecutor(),
                         journal=journal)


def _verify(doctored: tuple[Path, object], candidate: Candidate):  # noqa: ANN202
    """Verify ``candidate`` against the doctor's run, with both cores kept busy from the second pair on."""
    repo, doctor = doctored
    said: list[str] = []
    hog: list = []

    def progress(message: str) -> None:
        said.append(message)
        if message.startswith("pair 2/") and not hog:
            hog.append(both_cores_busy())
            hog[0].__enter__()

    try:
        with Journal(journal_path(repo)) as journal:
            verdict = verify_candidate(_context(repo, journal), run_id="load", candidate=candidate,
                                       doctor=doctor, progress=progress)  # type: ignore[arg-type]
    finally:
        if hog:
            hog[0].__exit__(None, None, None)
    return verdict, said


def test_a_real_win_under_sustained_load_is_promoted_after_quiet_or_inconclusive(doctored) -> None:  # noqa: ANN001
    contract = load_contract(doctored[0])
    verdict, said = _verify(doctored, Candidate.of({**contract.defaults(), "micro_batch": 4}))
    assert verdict.kind in (VerdictKind.PROMOTED, VerdictKind.INCONCLUSIVE), (verdict.kind, verdict.reason, said)
    if verdict.kind is VerdictKind.INCONCLUSIVE:
        assert "the machine stayed busy" in verdict.reason, verdict.reason


def test_the_baseline_against_itself_under_sustained_load_is_never_promoted(doctored) -> None:  # noqa: ANN001
    contract = load_contract(doctored[0])
    # the baseline by another name (an explicit knob at its default is the same job): never promoted
    verdict, said = _verify(doctored, Candidate.of(contract.defaults()))
    assert verdict.kind is not VerdictKind.PROMOTED, (verdict.reason, said)
