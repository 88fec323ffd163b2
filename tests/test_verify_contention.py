"""Verification on a machine that will not sit still: "inconclusive", resumable, never a wrong answer, never
stored as experience (the production verify_candidate on the simulated machine of tests/support/simulated.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bot.stages.run.search import RunResult, remember
from bot.stages.run.verify import verify_candidate
from infrarsi.bank import open_bank
from infrarsi.verdict import VerdictKind
from tests.support.contracts import write_contract
from tests.support.simulated import CANDIDATE, Contention, SimulatedMachine


def _verify(machine: SimulatedMachine, **kw):  # noqa: ANN003, ANN202
    return verify_candidate(machine, run_id="sim", candidate=CANDIDATE, doctor=machine.doctor(),  # type: ignore[arg-type]
                            quiet=machine.quiet(budget_s=120), **kw)


def test_sustained_load_from_the_second_pair_gives_inconclusive_not_a_wrong_answer() -> None:
    for seed in range(12):
        win = _verify(SimulatedMachine(speedup=1.3, sigma=0.1, seed=seed, contention=Contention(at=2, factor=2.5)))
        assert win.kind is VerdictKind.INCONCLUSIVE, (seed, win.kind, win.reason)
        assert "the machine stayed busy" in win.reason and win.waited_s >= 120
        same = _verify(SimulatedMachine(speedup=1.0, sigma=0.1, seed=seed, contention=Contention(at=2, factor=2.5)))
        assert same.kind is not VerdictKind.PROMOTED, (seed, same.reason)


def test_an_inconclusive_verification_resumes_where_it_stopped_once_the_machine_is_quiet() -> None:
    machine = SimulatedMachine(speedup=1.5, sigma=0.1, seed=3, contention=Contention(at=2, factor=2.5))
    first = _verify(machine)
    assert first.kind is VerdictKind.INCONCLUSIVE
    kept = [t for t in (*first.baseline_trials, *first.candidate_trials) if t not in first.reruns]
    records = {}  # the journal the resumed verification reads its counted runs from
    machine2 = SimulatedMachine(speedup=1.5, sigma=0.1, seed=3, contention=Contention(at=2, factor=2.5))
    original = machine2.run

    def recorded(run_id, candidate, **kw):  # noqa: ANN001, ANN003, ANN202
        r = original(run_id, candidate, **kw)
        records[r.trial_no] = r
        return r

    machine2.run = recorded  # type: ignore[method-assign]
    again = _verify(machine2)  # the same runs again, on record this time
    machine2.contention = None  # the load is gone
    machine2.journal = SimpleNamespace(trials=lambda run_id: list(records.values()))
    resumed = _verify(machine2, resume=again)
    assert kept and resumed.kind is VerdictKind.PROMOTED, resumed.reason
    assert set(again.candidate_trials) - set(again.reruns) <= set(resumed.candidate_trials)
    assert resumed.pairs >= 4


def test_an_inconclusive_verdict_is_never_stored_as_experience(tmp_path: Path) -> None:
    machine = SimulatedMachine(speedup=1.3, sigma=0.1, seed=1, contention=Contention(at=2, factor=2.5))
    verdict = _verify(machine)
    assert verdict.kind is VerdictKind.INCONCLUSIVE
    bank = open_bank(tmp_path / "bank.sqlite")
    contract = write_contract(tmp_path)
    doctor = SimpleNamespace(**{**vars(machine.doctor()), "fingerprint": {"device": "cpu"}, "peak_mem_bytes": None,
                                "gpu_peak_bytes": None, "model_flops_per_step": None})
    result = RunResult(run_id="r", doctor=doctor, search=(), verdicts=(verdict,), path=tmp_path / "run.json")  # type: ignore[arg-type]
    assert remember(bank, result, contract) == 0 and bank.findings() == []  # type: ignore[arg-type]
