"""The baseline loss band: how far a candidate's loss curve may stray and still be the same job.

Calibrated from the baseline's own repeats: per step, the mean of the runs
plus or minus the larger of ``k`` standard deviations (run-to-run noise) and
the contract's relative tolerance (a deterministic fp32 baseline has zero
spread, and a bf16 candidate legitimately differs in the third digit).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

BAND_SIGMAS = 4.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LossBand:
    mean: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    spread: tuple[float, ...]  # run-to-run standard deviation per step
    rtol: float
    final_rtol: float
    runs: int

    def to_dict(self) -> dict[str, object]:
        return {"mean": list(self.mean), "lower": list(self.lower), "upper": list(self.upper),
                "spread": list(self.spread), "rtol": self.rtol, "final_rtol": self.final_rtol, "runs": self.runs,
                "sigmas": BAND_SIGMAS}

    @staticmethod
    def from_dict(data: dict[str, object]) -> LossBand:
        def floats(key: str) -> tuple[float, ...]:
            return tuple(float(v) for v in data[key])  # type: ignore[union-attr]
        return LossBand(mean=floats("mean"), lower=floats("lower"), upper=floats("upper"), spread=floats("spread"),
                        rtol=float(data["rtol"]), final_rtol=float(data["final_rtol"]),  # type: ignore[arg-type]
                        runs=int(data["runs"]))  # type: ignore[call-overload]


def calibrate(loss_runs: Sequence[Sequence[float]], *, rtol: float, final_rtol: float) -> LossBand:
    """The band over the measured steps of several baseline runs (all of the same length)."""
    runs = [list(r) for r in loss_runs if r]
    if not runs:
        raise ValueError("no baseline loss curves to calibrate from")
    length = min(len(r) for r in runs)
    mean, lower, upper, spread = [], [], [], []
    for i in range(length):
        values = [r[i] for r in runs]
        m = statistics.fmean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        half = max(BAND_SIGMAS * sd, rtol * abs(m))
        mean.append(m)
        spread.append(sd)
        lower.append(m - half)
        upper.append(m + half)
    return LossBand(mean=tuple(mean), lower=tuple(lower), upper=tuple(upper), spread=tuple(spread), rtol=rtol,
                    final_rtol=final_rtol, runs=len(runs))


def first_step_outside(band: LossBand, loss: Sequence[float]) -> int | None:
    """1-based index (among measured steps) of the first loss outside the band; None when inside."""
    if len(loss) < len(band.mean):
        return len(loss) + 1
    for i, (value, lo, hi) in enumerate(zip(loss, band.lower, band.upper), start=1):
        if not math.isfinite(value) or not lo <= value <= hi:
            return i
    return None


def final_loss_worse(band: LossBand, loss: Sequence[float]) -> float | None:
    """How much worse (relative) the final loss is than the baseline's beyond ``final_rtol``; None if not."""
    if not loss or not band.mean:
        return None
    base = band.mean[len(loss) - 1] if len(loss) <= len(band.mean) else band.mean[-1]
    worse = (loss[-1] - base) / abs(base) if base else 0.0
    allowed = max(band.final_rtol, BAND_SIGMAS * band.spread[-1] / abs(base) if base else 0.0)
    return worse if worse > allowed else None
