"""The measured window sized from the job's own noise: fewer steps when they are steady, never fewer than the
contract's floor; the band and the contract follow it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from infrarsi.doctor import band_for, measured_window, windowed
from infrarsi.loss_band import calibrate
from infrarsi.stats import noise_profile
from tests.support.contracts import write_contract


def _profile(within: float, between: float, steps: int = 12):  # noqa: ANN202
    runs = []
    for r, level in enumerate((1.0, 1.0 + between, 1.0 - between)):
        runs.append([level * (1.0 + within * ((i % 3) - 1)) for i in range(steps)])
    return noise_profile(runs)


def test_steady_steps_time_the_floor_and_noisy_ones_the_whole_window(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    contract = replace(contract, timing=replace(contract.timing, measured_steps=12))
    steady, why = measured_window(_profile(within=0.001, between=0.05), contract)
    assert steady == contract.timing.window_floor == 6 and "runs time 6 measured steps, not 12" in why
    noisy, why = measured_window(_profile(within=0.2, between=0.01), contract)
    assert noisy == 12 and why == ""


def test_never_fewer_than_the_contracts_floor(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    contract = replace(contract, timing=replace(contract.timing, measured_steps=12, min_measured_steps=10))
    assert measured_window(_profile(within=0.001, between=0.05), contract)[0] == 10


def test_the_contract_and_the_band_follow_the_window(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    doctor = SimpleNamespace(measured_steps=contract.timing.measured_steps - 1)
    shorter = windowed(contract, doctor)  # type: ignore[arg-type]
    assert shorter.timing.measured_steps == contract.timing.measured_steps - 1
    assert windowed(contract, SimpleNamespace(measured_steps=None)) is contract  # type: ignore[arg-type]
    band = calibrate([[5.0, 4.9, 4.8, 4.7], [5.0, 4.9, 4.8, 4.7]], rtol=0.02, final_rtol=0.01)
    assert len(band_for(band, replace(contract.timing, measured_steps=3)).mean) == 3
    witness = replace(band, source="witness", first_step=3)
    assert len(band_for(witness, replace(contract.timing, measured_steps=2, steps_per_line=2)).mean) == 4


def test_a_job_printing_at_its_first_iteration_is_held_to_the_steps_a_shorter_window_reaches() -> None:
    # chargpt's convention: a line at iterations 0, 10, 20, ... so 14 lines reach step 131, not 140; warm-up 2
    # lines, measured 12: the doctor's band holds steps 21..131 (111). A window of 6 measured lines stops at line
    # 8, step 71: the band must end there (51 steps), or every honest candidate reads its step 72 as missing.
    curve = [3.0 - 0.001 * i for i in range(111)]
    band = replace(calibrate([curve, curve], rtol=0.02, final_rtol=0.01), source="witness", first_step=21)
    assert len(band.window(6, 10).mean) == 51 and band.window(6, 10).first_step == 21
    assert band.window(12, 10) is band
    # a job that prints after its k-th step (lines at 10, 20, ...): its band is whole windows, cut to whole windows
    whole = replace(calibrate([curve[:120 - 9] + [2.0] * 9] * 2, rtol=0.02, final_rtol=0.01), source="witness")
    assert len(whole.mean) == 120 and len(whole.window(6, 10).mean) == 60
