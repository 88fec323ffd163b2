"""The baseline loss band: its width (k sigma, rtol, dtype margin, floor), serialisation, and what falls outside."""

from __future__ import annotations

import math

import pytest

from infrarsi.loss_band import (BAND_SIGMAS, DTYPE_MARGIN, LOSS_FLOOR, LossBand, calibrate, calibrate_band,
                                final_loss_worse, first_step_outside)

RUNS = [[2.0, 1.0, 0.50], [2.2, 1.0, 0.52], [1.8, 1.0, 0.48]]


def test_calibrate_takes_the_larger_of_k_sigma_and_rtol_per_step() -> None:
    assert len(calibrate(RUNS + [[9.0]], rtol=0.05, final_rtol=0.02).mean) == 1  # the shortest run sets the length
    band = calibrate(RUNS, rtol=0.05, final_rtol=0.02)
    assert band.mean == pytest.approx((2.0, 1.0, 0.5)) and band.method == "rtol" and band.runs == 3
    assert band.upper[0] - band.mean[0] == pytest.approx(BAND_SIGMAS * 0.2)  # sigma wins
    assert band.upper[1] - band.mean[1] == pytest.approx(0.05)  # rtol wins (no spread)
    with pytest.raises(ValueError, match="no baseline loss curves to calibrate from"):
        calibrate([[], []], rtol=0.05, final_rtol=0.02)


def test_calibrate_band_caps_by_rtol_and_floors_small_widths() -> None:
    band = calibrate_band(RUNS, rtol=0.05, final_rtol=0.02, dtype_deviation=(0.0, 0.001))
    assert band.method == "calibrated" and band.dtype_deviation == (0.0, 0.001)
    assert band.upper[0] - band.mean[0] == pytest.approx(0.05 * 2.0)  # 4 sigma = 0.8, capped by rtol
    assert band.upper[1] - band.mean[1] == pytest.approx(DTYPE_MARGIN * 0.001)  # the dtype margin
    # the third step reuses the largest deviation given
    assert band.upper[2] - band.mean[2] == pytest.approx(min(0.05 * 0.5, BAND_SIGMAS * 0.02))
    alone = calibrate_band([[1.0, 1.0]], rtol=0.05, final_rtol=0.02)
    assert alone.upper[0] - 1.0 == pytest.approx(LOSS_FLOOR) and alone.final_rtol == pytest.approx(LOSS_FLOOR)
    with pytest.raises(ValueError):
        calibrate_band([], rtol=0.05, final_rtol=0.02)


def test_the_band_round_trips_through_a_dict() -> None:
    band = calibrate_band(RUNS, rtol=0.05, final_rtol=0.02, dtype_deviation=(0.01,))
    assert LossBand.from_dict(band.to_dict()) == band
    old = {k: v for k, v in calibrate(RUNS, rtol=0.05, final_rtol=0.02).to_dict().items()
           if k not in ("method", "dtype_deviation")}
    assert LossBand.from_dict(old).method == "rtol"  # written before the calibrated band existed


def test_first_step_outside() -> None:
    band = calibrate(RUNS, rtol=0.05, final_rtol=0.02)
    assert first_step_outside(band, [2.0, 1.0, 0.5]) is None
    assert first_step_outside(band, [2.0, 1.2, 0.5]) == 2
    assert first_step_outside(band, [2.0, math.nan, 0.5]) == 2
    assert first_step_outside(band, [2.0]) == 2  # a curve that stopped early leaves the band where it stopped


def test_final_loss_worse() -> None:
    band = calibrate([[2.0, 1.0], [2.0, 1.0]], rtol=0.05, final_rtol=0.02)
    assert final_loss_worse(band, [2.0, 1.01]) is None
    assert final_loss_worse(band, [2.0, 1.1]) == pytest.approx(0.1)
    assert final_loss_worse(band, [2.0, 0.5]) is None  # better is never worse
    assert final_loss_worse(band, []) is None
