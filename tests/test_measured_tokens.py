"""bot.stages.init.measured_tokens: the tokens one optimizer step consumed, from the witness's report of one run.

The executor here runs nothing (it hands back a made-up execution); a real witnessed run of ``init`` is in
tests/test_doctor_tokens.py (slow)."""
from __future__ import annotations

from infrarsi.step_clock import counted_inside

from pathlib import Path

import pytest

import bot.executors.registry
from bot.stages.init.measured_tokens import measure_tokens
from infrarsi.contract.model import Contract
from infrarsi.seams.executor import Execution
from infrarsi.witness import WitnessReport
from tests.support.init_draft import FakeExecutor, drafted_contract, steps


def _report(*, tokens_in: int | None = None, targets_in: int | None = None, rank: int | None = None) -> dict:
    return WitnessReport(optimizer_steps=14, count_step=2, flops=None, flops_by_op=(), matmul_dtypes=(),
                         counted_s=None, params=1, param_elements=4, grad_norms=(1.0,), weight_norms=(1.0,),
                         update_proj=(0.0,), tampered=(), source_sha256="0" * 64, rank=rank, tokens_in=tokens_in,
                         targets_in=targets_in).to_dict()


@pytest.fixture
def contract(tmp_path: Path) -> Contract:
    return drafted_contract(tmp_path)


def _measure(contract: Contract, monkeypatch: pytest.MonkeyPatch, **kw: object) -> tuple[tuple[int | None, str],
                                                                                          FakeExecutor]:
    executor = FakeExecutor(Execution(**{"events": steps(14), "returncode": 0, "wall_s": 1.0, "peak_rss_bytes": 1,
                                         **kw}))  # type: ignore[arg-type]
    monkeypatch.setattr(bot.executors.registry, "build_executor", lambda c: executor)
    return measure_tokens(contract, timeout_s=30), executor


def test_the_baseline_runs_once_with_the_witness_on_the_last_warmup_step(contract: Contract,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    got, executor = _measure(contract, monkeypatch, witness=_report(tokens_in=512))
    assert got == (512, "measured: one short run of the baseline, the witness counted the token ids reaching an "
                        "embedding in optimizer step 2")  # the report's own count_step
    assert [s.timeout_s for s in executor.specs] == [30]
    assert counted_inside(executor.specs[0].witness, contract.timing.warmup_steps, contract.timing.measured_steps)


def test_a_classifier_counts_targets_and_ranks_are_summed(contract: Contract,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = (_report(targets_in=64, rank=0), _report(targets_in=64, rank=1))
    got, _ = _measure(contract, monkeypatch, witness=ranks[0], witness_ranks=ranks)
    assert got == (128, "measured: one short run of the baseline, the witness counted the targets reaching the "
                        "loss in optimizer step 2, summed over 2 ranks")


@pytest.mark.parametrize(("kw", "why"), [
    ({"returncode": 1, "stderr_tail": "Traceback\nRuntimeError: CUDA out of memory\n"},
     "the run failed (exit status 1): RuntimeError: CUDA out of memory"),
    ({"killed_for": "timeout"}, "the run failed (timeout): no stderr"),
    ({"witness_error": "the report is not signed"}, "the report is not signed"),
    ({"witness_skipped": "slurm cannot run the witness"}, "slurm cannot run the witness"),
    ({}, "the witness wrote no report"),
    ({"witness": _report()}, "in one optimizer step no token ids reached an embedding and no targets reached a loss"),
])
def test_when_the_run_cannot_say_the_reason_is_given(contract: Contract, monkeypatch: pytest.MonkeyPatch,
                                                     kw: dict, why: str) -> None:
    got, _ = _measure(contract, monkeypatch, **kw)
    assert got == (None, why)
