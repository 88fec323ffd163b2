"""The baseline loss band: how far a candidate's loss curve may stray and still be the same job.

:func:`calibrate_band` (the doctor's): per step, the mean of the baseline's
repeats plus or minus the largest of ``k`` standard deviations (run-to-run
noise), ``DTYPE_MARGIN`` times what a legitimate dtype change moved the loss
(a baseline run in bf16, measured by the doctor) and a small floor for
re-associated fp32 arithmetic; the contract's ``loss.rtol`` and
``loss.final_rtol`` are upper bounds on that width, not the width.
:func:`calibrate` is the older rule (the larger of ``k`` σ and ``rtol``),
kept for callers without a dtype measurement.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

BAND_SIGMAS = 4.0
# Fused kernels and other micro-batch sizes re-associate fp32 sums: on the fixtures the honest catalog
# patches move a short loss curve by at most ~1e-6 relative; the floor keeps a 100x margin.
LOSS_FLOOR = 1e-4
# A dtype change may move the loss this many times what the doctor measured it to move.
DTYPE_MARGIN = 3.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LossBand:
    mean: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    spread: tuple[float, ...]  # run-to-run standard deviation per step
    rtol: float
    final_rtol: float
    runs: int
    method: str = "rtol"  # "rtol": max(kσ, rtol); "calibrated": calibrate_band, rtol only an upper bound
    dtype_deviation: tuple[float, ...] = ()  # per step, relative, of the doctor's lower-dtype baseline run
    # What the band holds: "witness" — per optimizer step from ``first_step`` on, the loss the witness saw
    # reach backward() (whatever the job prints, and however it splits the batch); "printed" — per measured
    # step line, the loss the job printed (a band from before the witness kept its losses, or a job whose
    # losses the witness cannot see).
    source: str = "printed"
    first_step: int = 0

    def first(self, n: int) -> LossBand:
        """The band over its first ``n`` steps (a run that measures a shorter window)."""
        if n >= len(self.mean):
            return self
        return LossBand(mean=self.mean[:n], lower=self.lower[:n], upper=self.upper[:n], spread=self.spread[:n],
                        rtol=self.rtol, final_rtol=self.final_rtol, runs=self.runs, method=self.method,
                        dtype_deviation=self.dtype_deviation[:n], source=self.source, first_step=self.first_step)

    def window(self, measured: int, steps_per_line: int = 1) -> LossBand:
        """The band over the runs of a window of ``measured`` lines, shorter than the runs that calibrated it.

        A witness band is per optimizer step, and a line stands for ``steps_per_line`` of them. A job that prints
        at its first iteration (``if it % 10 == 0``) reaches its last line k - 1 steps short of k x lines, so
        the band its runs calibrated ends that many steps short of a whole window; the runs of a shorter window
        end short by as much (else the band's last steps would hold losses no run of that window reaches)."""
        k = max(1, steps_per_line) if self.source == "witness" else 1
        n = measured * k
        if n >= len(self.mean):
            return self
        short = (k - len(self.mean) % k) % k
        return self.first(max(1, n - short))

    def to_dict(self) -> dict[str, object]:
        return {"mean": list(self.mean), "lower": list(self.lower), "upper": list(self.upper),
                "spread": list(self.spread), "rtol": self.rtol, "final_rtol": self.final_rtol, "runs": self.runs,
                "sigmas": BAND_SIGMAS, "method": self.method, "dtype_deviation": list(self.dtype_deviation),
                "source": self.source, "first_step": self.first_step}

    @staticmethod
    def from_dict(data: dict[str, object]) -> LossBand:
        def floats(key: str) -> tuple[float, ...]:
            return tuple(float(v) for v in data[key])  # type: ignore[union-attr]
        return LossBand(mean=floats("mean"), lower=floats("lower"), upper=floats("upper"), spread=floats("spread"),
                        rtol=float(data["rtol"]), final_rtol=float(data["final_rtol"]),  # type: ignore[arg-type]
                        runs=int(data["runs"]), method=str(data.get("method", "rtol")),  # type: ignore[call-overload]
                        dtype_deviation=tuple(float(v) for v in data.get("dtype_deviation") or ()),  # type: ignore[union-attr]
                        source=str(data.get("source") or "printed"), first_step=int(data.get("first_step") or 0))  # type: ignore[call-overload]


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


def calibrate_band(loss_runs: Sequence[Sequence[float]], *, rtol: float, final_rtol: float,
                   dtype_deviation: Sequence[float] = ()) -> LossBand:
    """The doctor's band: measured spreads, capped by the contract's ``rtol`` / ``final_rtol``.

    ``dtype_deviation`` is, per measured step, how far (relative) a baseline run in a
    lower precision the contract permits landed from the baseline's mean.
    """
    runs = [list(r) for r in loss_runs if r]
    if not runs:
        raise ValueError("no baseline loss curves to calibrate from")
    length = min(len(r) for r in runs)
    mean, lower, upper, spread = [], [], [], []
    for i in range(length):
        values = [r[i] for r in runs]
        m = statistics.fmean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        dev = dtype_deviation[i] if i < len(dtype_deviation) else (max(dtype_deviation) if dtype_deviation else 0.0)
        half = min(rtol * abs(m), max(BAND_SIGMAS * sd, DTYPE_MARGIN * dev * abs(m), LOSS_FLOOR * abs(m)))
        mean.append(m)
        spread.append(sd)
        lower.append(m - half)
        upper.append(m + half)
    last = mean[-1] if mean else 0.0
    final_dev = dtype_deviation[length - 1] if len(dtype_deviation) >= length else (
        max(dtype_deviation) if dtype_deviation else 0.0)
    final = min(final_rtol, max(DTYPE_MARGIN * final_dev, LOSS_FLOOR,
                                BAND_SIGMAS * spread[-1] / abs(last) if last else 0.0))
    return LossBand(mean=tuple(mean), lower=tuple(lower), upper=tuple(upper), spread=tuple(spread), rtol=rtol,
                    final_rtol=final, runs=len(runs), method="calibrated",
                    dtype_deviation=tuple(float(v) for v in dtype_deviation))


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
