"""Several processes writing one bank, one of them killed mid-way: nothing committed is lost."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from infrarsi.bank import SqliteBank
from tests.support.findings import write_findings

WRITERS = 4
PER_WRITER = 50
VICTIM = 0
VICTIM_COUNT = 100_000  # far more than it gets to write: the kill always lands mid-way


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_concurrent_writers_and_a_sigkill(tmp_path: Path) -> None:
    bank_path = tmp_path / "bank.sqlite"
    SqliteBank(bank_path).close()  # create the schema once, before anyone races
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    id_files = [tmp_path / f"ids-{w}.txt" for w in range(WRITERS)]
    procs = [ctx.Process(target=write_findings,
                         args=(str(bank_path), str(id_files[w]), w, VICTIM_COUNT if w == VICTIM else PER_WRITER,
                               start))
             for w in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    deadline = time.monotonic() + 20
    while len(_lines(id_files[VICTIM])) < 20 and time.monotonic() < deadline:
        time.sleep(0.002)
    assert procs[VICTIM].pid is not None
    os.kill(procs[VICTIM].pid, signal.SIGKILL)
    for p in procs:
        p.join(20)
    assert procs[VICTIM].exitcode == -signal.SIGKILL
    assert all(p.exitcode == 0 for i, p in enumerate(procs) if i != VICTIM)

    with SqliteBank(bank_path) as bank:
        assert bank.integrity() == "ok"
        stored = bank.ids()
        findings = bank.findings()  # every record still parses
    committed = [set(_lines(f)) for f in id_files]
    for w, ids in enumerate(committed):
        assert ids <= stored, f"writer {w} lost {len(ids - stored)} findings"
    assert all(len(committed[w]) == PER_WRITER for w in range(WRITERS) if w != VICTIM)
    assert 20 <= len(committed[VICTIM]) < VICTIM_COUNT
    assert len(findings) == len(stored) >= 3 * PER_WRITER + len(committed[VICTIM])
