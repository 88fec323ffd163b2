"""bot.stages.run.run_trial: one candidate launched, measured, classified and recorded — judged here with an
executor that runs nothing (the trials that really run are in tests/test_trial_cli.py)."""
from __future__ import annotations

import random

from pathlib import Path

import pytest

from bot.stages.run.run_trial import TrialRequest, metrics_summary, record_rejected, run_trial, trial_spec, \
    witness_step
from infrarsi.step_clock import counted_inside, counted_window
from infrarsi.contract.lock import Lock, read_lock, write_lock
from infrarsi.contract.model import Contract
from infrarsi.journal import Journal
from infrarsi.seams.executor import Execution
from infrarsi.trial_record import Candidate, Outcome
from tests.support.init_draft import FakeExecutor, drafted_contract, steps


@pytest.fixture
def job(tmp_path: Path) -> tuple[Contract, Lock, Journal]:
    contract = drafted_contract(tmp_path / "repo")
    write_lock(contract)
    journal = Journal(tmp_path / "journal.sqlite")
    journal.ensure_run("r1", kind="run")
    return contract, read_lock(contract.root), journal


def _request(contract: Contract, **kw: object) -> TrialRequest:
    return TrialRequest(run_id="r1", candidate=Candidate.of({**contract.defaults(), "dtype": "bf16"}, ()),
                        tree=contract.root, **kw)  # type: ignore[arg-type]


def _ok(n: int = 14) -> Execution:
    return Execution(events=steps(n), returncode=0, wall_s=2.0, peak_rss_bytes=10, devices=2)


def test_the_spec_passes_every_knob_and_the_contracts_limits(tmp_path: Path) -> None:
    contract = drafted_contract(tmp_path)
    spec = trial_spec(contract, Candidate.of({"dtype": "bf16"}, ()), tree=tmp_path / "wt", memory_limit_bytes=None,
                      log_dir=tmp_path / "logs")
    assert spec.argv[1:] == ("train.py", "--dtype", "bf16")
    assert (spec.cwd, spec.root, spec.log_dir) == (str(tmp_path / "wt"), str(tmp_path / "wt"),
                                                   str(tmp_path / "logs"))
    assert (spec.timeout_s, spec.expected_steps, spec.source) == (600, 14, "stdout")
    assert trial_spec(contract, Candidate.of({"dtype": "bf16"}, ()), tree=tmp_path, memory_limit_bytes=1,
                      timeout_s=5).timeout_s == 5


def test_the_witness_counts_a_step_drawn_inside_the_measured_window_never_the_first(tmp_path: Path) -> None:
    contract = drafted_contract(tmp_path)
    timing = contract.timing
    low, high = counted_window(timing.warmup_steps, timing.measured_steps, timing.steps_per_line)  # type: ignore[misc]
    drawn = {witness_step(contract, random.Random(seed)) for seed in range(60)}
    assert drawn <= set(range(low, high + 1)) and len(drawn) > 1 and min(drawn) > timing.warmup_steps


def test_a_good_trial_is_recorded_with_its_cost_over_devices(job: tuple[Contract, Lock, Journal]) -> None:
    contract, lock, journal = job
    executor = FakeExecutor(_ok())
    record = run_trial(contract, lock, _request(contract, witness=True, commit="abc"), executor=executor,
                       journal=journal)
    assert (record.outcome, record.trial_no, record.cost_s, record.executor, record.commit) == (
        Outcome.OK, 1, 4.0, "fake", "abc")
    spec = executor.specs[0]
    assert (spec.commit, spec.lock) == ("abc", lock.files)
    assert counted_inside(spec.witness, contract.timing.warmup_steps, contract.timing.measured_steps)
    assert [r.trial_no for r in journal.trials("r1")] == [1]
    summary = metrics_summary(record)
    assert (summary["outcome"], summary["candidate"], summary["cost_s"]) == ("ok", "dtype=bf16", 4.0)
    assert summary["loss"] == pytest.approx([2.0 - i * 0.01 for i in range(2, 14)])
    assert summary["step_time_s"] == pytest.approx(0.1)


def test_a_changed_contract_is_invalid_and_nothing_is_launched(job: tuple[Contract, Lock, Journal]) -> None:
    contract, lock, journal = job
    path = contract.root / "infrarsi.toml"
    path.write_text(path.read_text().replace("trials = 30", "trials = 31"))
    executor = FakeExecutor(_ok())
    record = run_trial(contract, lock, _request(contract), executor=executor, journal=journal)
    assert record.outcome is Outcome.INVALID
    assert record.reason.startswith("lock broken before launch: infrarsi.toml: the contract changed since the lock")
    assert executor.specs == []
    assert journal.trials("r1")[0].outcome is Outcome.INVALID


def test_a_crash_is_recorded_with_its_error_line(job: tuple[Contract, Lock, Journal]) -> None:
    contract, lock, journal = job
    execution = Execution(events=steps(3), returncode=1, wall_s=1.0, peak_rss_bytes=1,
                          stderr_tail="Traceback\nValueError: bad shape\n")
    record = run_trial(contract, lock, _request(contract), executor=FakeExecutor(execution), journal=journal)
    assert (record.outcome, record.returncode) == (Outcome.CRASH, 1)
    assert record.reason.startswith("exit status 1: ValueError: bad shape")


def test_a_rejected_candidate_costs_nothing_and_is_journaled(job: tuple[Contract, Lock, Journal]) -> None:
    contract, _, journal = job
    record = record_rejected(contract, _request(contract, memory_limit_bytes=123), trial_no=7,
                             reason="the patch left the scope", journal=journal, executor_name="fake")
    assert (record.outcome, record.cost_s, record.memory_limit_bytes, record.reason) == (
        Outcome.REJECTED, 0.0, 123, "the patch left the scope")
    assert [(r.trial_no, r.outcome) for r in journal.trials("r1")] == [(7, Outcome.REJECTED)]
