"""Model FLOPs utilisation: counted model FLOPs over measured time, against the peak of the dtype computed in.

Pure arithmetic. Model FLOPs per step are what the witness counted with
``torch.utils.flop_counter.FlopCounterMode`` over one real optimizer step of the
baseline (forward + backward + optimizer, every micro-batch), or the contract's
figure, or ``6·N·tokens`` with the embedding left out of N as a last resort. A
candidate's MFU divides the *baseline's* model FLOPs by the candidate's step
time: activation checkpointing recomputes the forward, which is hardware work,
not model work, so it is not counted in its favour. The peak is the one of the
dtype the candidate's matrix products ran in (the witness sees them), measured
on this device by ``bot.stages.doctor.device_probe``; on a known GPU the
datasheet's dense peak is a second reference.

An achieved FLOP/s above the measured peak cannot happen: either the peak was
under-measured or the FLOP count is wrong. :func:`mfu` then returns no figure
and a defect that says so, and every renderer shows the defect, never a
percentage above 100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infrarsi.dtypes import lowest_precision, short_name

#: Dense (no sparsity) peak FLOP/s per dtype from the vendors' datasheets, by a substring of the
#: device name torch reports. fp32 is the non-tensor-core rate (torch's default: TF32 off for matmuls);
#: tf32 the tensor-core rate for fp32 tensors, which a job that allows TF32 is measured against.
DATASHEET_PEAKS: tuple[tuple[str, Mapping[str, float]], ...] = (
    ("H200", {"bf16": 989e12, "fp16": 989e12, "tf32": 494.7e12, "fp32": 67e12}),
    ("H100 PCIe", {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp32": 51e12}),
    ("H100 NVL", {"bf16": 835e12, "fp16": 835e12, "tf32": 417.5e12, "fp32": 60e12}),
    ("H100", {"bf16": 989e12, "fp16": 989e12, "tf32": 494.7e12, "fp32": 67e12}),  # SXM5
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12}),
    ("L4", {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12}),
)
DATASHEET_SOURCE = ("NVIDIA datasheets (H100/H200 SXM: 989 TFLOP/s bf16 dense, 67 fp32; H100 PCIe, H100 NVL, "
                    "A100 SXM, L40S, L4), dense figures without sparsity, as read on 2026-12-03")



@dataclass(frozen=True, kw_only=True, slots=True)
class MfuFigure:
    """One MFU reading: a value in (0, 1], or a defect that says why there is none."""

    flops_per_step: float
    step_time_s: float
    dtype: str
    peak_flops: float | None
    peak_source: str  # "measured" or "datasheet"
    value: float | None
    defect: str | None = None

    @property
    def achieved_flops(self) -> float:
        return self.flops_per_step / self.step_time_s

    def text(self) -> str:
        """How a report shows it: ``12.3% of the bf16 measured peak`` or the defect."""
        if self.defect:
            return f"defect: {self.defect}"
        if self.value is None:
            return f"n/a (no {self.dtype} peak)"
        return f"{self.value:.1%} of the {self.dtype} {self.peak_source} peak"


def compute_dtype(matmul_dtypes: Sequence[str], fallback: str = "fp32") -> str:
    """The short dtype a step computes in: the lowest precision its matrix products used (a step that ran any
    matmul in bf16 is judged against the bf16 peak)."""
    lowest = lowest_precision(matmul_dtypes, fallback="")
    return short_name(lowest) if lowest else fallback


def six_n_flops(*, parameters: int, tokens_per_step: int, embedding_parameters: int = 0) -> float:
    """The analytic fallback: 6 FLOPs per non-embedding parameter per token (forward 2, backward 4)."""
    return 6.0 * max(parameters - embedding_parameters, 0) * tokens_per_step


def datasheet_peaks(device_name: str | None) -> tuple[str, Mapping[str, float]] | None:
    """(matched model, dense peaks per dtype) for a GPU name such as ``NVIDIA H100 80GB HBM3``."""
    if not device_name:
        return None
    for model, peaks in DATASHEET_PEAKS:
        if model.lower() in device_name.lower():
            return model, peaks
    return None


def mfu(*, flops_per_step: float, step_time_s: float, peaks: Mapping[str, float], dtype: str,
        peak_source: str = "measured") -> MfuFigure:
    """Model FLOPs utilisation of one step time against ``peaks[dtype]``; a defect when it cannot be true."""
    peak = peaks.get(dtype)
    if peak is None and dtype == "fp16":
        peak = peaks.get("bf16")
    base = dict(flops_per_step=flops_per_step, step_time_s=step_time_s, dtype=dtype, peak_flops=peak,
                peak_source=peak_source)
    if not step_time_s or step_time_s <= 0 or not flops_per_step or flops_per_step <= 0:
        return MfuFigure(**base, value=None, defect="no step time or no FLOP count to divide")
    if not peak:
        return MfuFigure(**base, value=None)
    achieved = flops_per_step / step_time_s
    value = achieved / peak
    tf32 = peaks.get("tf32")
    if value > 1.0 and dtype == "fp32" and tf32 and achieved <= tf32:
        # fp32 tensors faster than strict fp32 allows: the job lets matmuls use TF32 (cuda_backend_flags does)
        return mfu(flops_per_step=flops_per_step, step_time_s=step_time_s, peaks=peaks, dtype="tf32",
                   peak_source=peak_source)
    if value > 1.0:
        return MfuFigure(**base, value=None, defect=(
            f"achieved {achieved / 1e9:,.1f} GFLOP/s exceeds the {peak_source} {dtype} peak of "
            f"{peak / 1e9:,.1f} GFLOP/s ({value:.0%}): the peak is under-measured or the FLOP count is wrong, "
            "so no MFU is reported"))
    return MfuFigure(**base, value=value)
