"""bot.cli.run_progress: each figure of a run's progress is said in plain words once, and the ETA counts the
verification still to come."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.doctor import noise_lines
from bot.cli.run_progress import ORIGINS, RunProgress
from infrarsi.contract import load_contract
from infrarsi.contract.model import VerifySpec
from infrarsi.doctor import DoctorReport


class Doctor:
    """The figures of a doctor report that progress reads."""

    def __init__(self, *, mde: float, pairs: int = 4) -> None:
        self.cv_within, self.cv_between, self.mde, self.verify_pairs = 0.012, 0.034, mde, pairs


def _progress(tiny_repo: Path, doctor: Doctor) -> tuple[RunProgress, list[str]]:
    lines: list[str] = []
    contract = load_contract(tiny_repo)
    return RunProgress(contract=contract, run_id="r1", load_doctor=lambda run_id: doctor, write=lines.append), lines


def _trial(n: int, origin: str, *, cost_s: float = 6.0, eta_s: float = 60.0) -> dict:
    return {"event": "trial", "n": n, "total": 3, "origin": origin, "outcome": "ok", "step_time_s": 0.01,
            "reason": "", "speedup": 1.2, "control_trial": None, "candidate": "dtype=bf16", "best_speedup": 1.2,
            "failures": 0, "failed_cost_s": 0.0, "eta_s": eta_s, "cost_s": cost_s}


def test_the_noise_is_said_in_plain_words_with_a_warning_when_it_hides_the_target() -> None:
    quiet = noise_lines(Doctor(mde=0.037), VerifySpec())  # type: ignore[arg-type]
    assert quiet == ["noise: steps vary 1.2% within a run and runs 3.4% from each other, so this machine's noise "
                     "hides speedups below +4%: verification needs 4 interleaved A/B pairs to confirm one of that "
                     "size"]
    noisy = noise_lines(Doctor(mde=3.67, pairs=12), VerifySpec())  # type: ignore[arg-type]
    assert "hides speedups below +367%" in noisy[0]
    assert noisy[1].startswith("warning: this machine can only confirm a speedup of +367% or more "
                               "(verify.target_effect is +5%, verify.max_pairs 12)")


def test_the_eta_counts_verification_and_each_origin_is_explained_once(tiny_repo: Path) -> None:
    progress, lines = _progress(tiny_repo, Doctor(mde=0.04, pairs=4))
    progress({"event": "stage", "stage": "search", "message": "search: 3 trials"})
    assert lines[0].startswith("  noise: ") and lines[1] == "  search: 3 trials"
    progress(_trial(1, "prior"))
    progress(_trial(2, "prior"))
    progress(_trial(3, "spread"))
    explained = [line for line in lines if line.startswith("  [")]
    assert explained == [f"  [prior]: {ORIGINS['prior']}", f"  [spread]: {ORIGINS['spread']}"]
    top_k = load_contract(tiny_repo).verify.top_k
    verify_min = top_k * 4 * 2 * 6.0 / 60
    assert lines[-1].endswith(f"ETA {1 + verify_min:.1f} min (1.0 search + at most {verify_min:.1f} verification)")
    assert sum("each trial line:" in line for line in lines) == 1


def test_a_verification_stage_says_what_is_left_of_it(tiny_repo: Path) -> None:
    progress, lines = _progress(tiny_repo, Doctor(mde=0.04, pairs=4))
    progress({"event": "stage", "stage": "search", "message": "search: 3 trials"})
    progress(_trial(1, "prior", cost_s=3.0))
    progress({"event": "verdict", "verdict": "not_significant", "speedup": 1.01, "candidate": "dtype=bf16"})
    progress({"event": "stage", "stage": "verify", "message": "verify 2/3: x"})
    left = (load_contract(tiny_repo).verify.top_k - 1) * 4 * 2 * 3.0 / 60
    assert lines[-1] == f"  verify 2/3: x (verification ETA at most {left:.1f} min)"


def test_a_baseline_control_says_what_its_ratio_means(tiny_repo: Path) -> None:
    progress, lines = _progress(tiny_repo, Doctor(mde=0.1))
    progress({"event": "control", "trial_no": 14, "outcome": "ok", "step_time_s": 0.0123, "drift": 0.73,
              "next_after": 4, "message": "x0.73 the doctor's time"})
    assert lines == ["  baseline control (trial 14): 12.3 ms/step, 0.73x the doctor's step time (the machine runs "
                     "27% faster than when the doctor measured it); the trials around it are compared with it (next "
                     "control after 4 trials)"]


def test_json_progress_is_the_events_themselves(tiny_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    contract = load_contract(tiny_repo)
    RunProgress(contract=contract, run_id="r1", as_json=True)({"event": "stop", "message": "done"})
    assert capsys.readouterr().out == '{"event": "stop", "message": "done"}\n'


def test_the_doctor_report_type_has_what_noise_lines_reads() -> None:
    fields = set(DoctorReport.__dataclass_fields__)
    assert {"cv_within", "cv_between", "mde", "verify_pairs"} <= fields
