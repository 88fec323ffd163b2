"""The red team on every path a trial takes: torchrun (two ranks, the DDP fixture), a self-hosted Actions runner
(the project's stand-in) and Slurm (the local cluster) judge exactly as the local executor does.

In the suite each of those three meets the cheats caught where the job ran — the lock of the tree it ran, the
witness's integrity — and one cheat caught by a row of the witness's report (counted work on torchrun, the
weights combined with a re-split of the global batch on Slurm, the optimizer's configuration on Actions), an
honest re-split, and the baseline against itself (A/A, witness on), whose every row is read on each. The local executor
runs the whole red team in test_cheats.py; the table in docs/trials.md, every cheat on every executor alone and
combined with a re-split, comes from ``python -m benchmarks.redteam_table``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from infrarsi.trial_record import Candidate
from infrarsi.verdict import trial_invariants
from tests.support.redteam.bench import RESPLIT, Bench
from tests.support.redteam.cheats import GPT, SHARED, SLIPS, Cheat
from tests.support.redteam.quarantine_cheats import UNSEEN

pytestmark = pytest.mark.slow

BY_NAME = {c.name: c for c in (*SHARED, *GPT, *SLIPS, *UNSEEN)}
REMOTE = ["torchrun", "actions", "slurm"]


def _fixture(name: str) -> str:
    return "ddp" if name == "torchrun" else "tinygpt"


def _judge(bench: Bench, cheat: Cheat, *, resplit: dict | None = None):  # noqa: ANN202
    lock = (bench.repo / "infrarsi.lock").read_bytes()
    try:
        return bench.judge(knobs={**dict(cheat.knobs), **(resplit or {})}, patches=cheat.specs())
    finally:  # a cheat that re-takes the lock rewrites the repository's lock file: later candidates get the real one
        (bench.repo / "infrarsi.lock").write_bytes(lock)


# What the job does where it runs (the lock of the tree it ran, the witness's integrity) is met on every executor;
# a row's cheat is judged on the witness's report, which every executor hands back alike (the honest re-split and
# A/A below read every row on each), so each row's cheat runs on one executor, each executor judging one of them.
# Every cheat on every executor: ``python -m benchmarks.redteam_table``.
ROW_CHEATS = [
    ("torchrun", "truncated_sequence", False, {"work", "work_total", "tokens_per_step"}),
    ("slurm", "changed_lr", True, {"weights", "loss_band", "final_loss", "optimizer"}),
    ("actions", "fused_no_weight_decay", False, {"optimizer"}),
]
WHERE_IT_RAN = [(executor, cheat, False, {"outcome"}) for executor in REMOTE
                for cheat in ("edit_locked_unseen", "patch_flop_counter")]


@pytest.mark.parametrize(("executor", "cheat", "resplit", "caught_by"), ROW_CHEATS + WHERE_IT_RAN)
def test_a_cheat_is_caught_on_every_executor(bench_on: Callable[[str], Bench], executor: str, cheat: str,
                                            resplit: bool, caught_by: set[str]) -> None:
    bench = bench_on(executor)
    judged = _judge(bench, BY_NAME[cheat], resplit=RESPLIT[_fixture(executor)] if resplit else None)
    print(f"\nREDTEAM | {executor} | {cheat}{' + re-split' if resplit else ''} | {judged.verdict} | "
          f"{judged.caught_by} | {judged.reason()[:240]}")
    assert judged.verdict == "invalid", judged.checks
    assert {c.name for c in judged.checks if c.broken} & caught_by, judged.reason()
    if cheat.startswith("edit_locked"):
        assert "lock broken" in judged.record.reason, judged.record.reason
    if cheat == "patch_flop_counter":
        assert judged.record.reason.startswith("witness:"), judged.record.reason


@pytest.mark.parametrize("executor", REMOTE)
def test_an_honest_resplit_and_the_baseline_against_itself_pass_every_check_on_every_executor(
        bench_on: Callable[[str], Bench], executor: str) -> None:
    bench = bench_on(executor)
    honest = bench.judge(knobs=RESPLIT[_fixture(executor)])
    print(f"\nREDTEAM | {executor} | honest re-split | {honest.verdict} | {honest.reason()[:240]}")
    assert honest.verdict == "ok", [c for c in honest.checks if not c.ok]
    assert any(c.name == "split_reference" and c.ok for c in honest.checks)
    baseline = Candidate.of(bench.ctx.contract.defaults())
    record = bench.ctx.run("aa", baseline, witness=True)
    reference, _ = bench.references.for_candidate(baseline)
    rows = trial_invariants(record, reference)
    assert all(c.ok for c in rows), [c for c in rows if not c.ok]
    if executor == "torchrun":  # both ranks witnessed and held to their own rank of the baseline
        assert len(record.metrics.witness_ranks) == 2
        assert any(c.name == "work_total" and c.ok for c in rows)
