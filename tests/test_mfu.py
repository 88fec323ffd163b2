"""MFU arithmetic (infrarsi.mfu) and where the doctor and the report take it from."""

from __future__ import annotations

import pytest

from infrarsi.mfu import compute_dtype, datasheet_peaks, mfu, six_n_flops

PEAKS = {"fp32": 100e9, "bf16": 400e9}


def test_mfu_is_counted_flops_over_time_against_the_peak_of_the_dtype() -> None:
    fig = mfu(flops_per_step=2e9, step_time_s=0.1, peaks=PEAKS, dtype="fp32")
    assert fig.value == pytest.approx(0.2) and fig.defect is None
    assert "20.0% of the fp32 measured peak" == fig.text()
    bf = mfu(flops_per_step=2e9, step_time_s=0.05, peaks=PEAKS, dtype="bf16")
    assert bf.value == pytest.approx(0.1)  # twice as fast, but against the 4x higher bf16 peak


def test_an_impossible_mfu_is_a_defect_never_a_figure() -> None:
    fig = mfu(flops_per_step=2e9, step_time_s=0.01, peaks=PEAKS, dtype="fp32")  # 200 GFLOP/s > 100 peak
    assert fig.value is None and fig.defect is not None
    assert "exceeds the measured fp32 peak" in fig.defect and "under-measured" in fig.defect
    assert fig.text().startswith("defect:") and "%" not in fig.text().split("(")[0]


def test_no_peak_or_no_count_is_no_figure_without_a_guess() -> None:
    assert mfu(flops_per_step=2e9, step_time_s=0.1, peaks=PEAKS, dtype="fp8").value is None
    assert mfu(flops_per_step=0, step_time_s=0.1, peaks=PEAKS, dtype="fp32").defect


def test_compute_dtype_is_the_lowest_precision_seen() -> None:
    assert compute_dtype(["float32", "bfloat16"]) == "bf16"
    assert compute_dtype(["float32"]) == "fp32"
    assert compute_dtype([], fallback="bf16") == "bf16"


def test_six_n_leaves_the_embedding_out() -> None:
    assert six_n_flops(parameters=4_500_000, embedding_parameters=2_100_000, tokens_per_step=4096) == \
        6 * 2_400_000 * 4096


def test_datasheet_peaks_by_gpu_name() -> None:
    model, peaks = datasheet_peaks("NVIDIA H100 80GB HBM3")  # type: ignore[misc]
    assert model == "H100" and peaks["bf16"] == 989e12
    assert datasheet_peaks("NVIDIA H200")[0] == "H200"  # type: ignore[index]
    assert datasheet_peaks("NVIDIA H100 PCIe")[1]["bf16"] == 756e12  # type: ignore[index]
    assert datasheet_peaks(None) is None and datasheet_peaks("AMD EPYC 9B14") is None


# -- the doctor and the report take MFU from the witnessed count and the dtype each arm computes in ----------

from infrarsi.doctor import DoctorReport  # noqa: E402
from infrarsi.doctor import render_markdown as doctor_markdown  # noqa: E402
from infrarsi.report.model import mfu_figures  # noqa: E402
from infrarsi.trial_record import Candidate  # noqa: E402
from tests.support.reports import FLOPS, mfu_record, sample_doctor  # noqa: E402


def test_the_doctor_counts_flops_with_the_witness_and_measures_against_the_baseline_dtype() -> None:
    doctor = sample_doctor({"fp32": 100e9, "bf16": 400e9})
    assert doctor.model_flops_per_step == FLOPS and doctor.model_flops_source.startswith("FlopCounterMode")
    assert doctor.mfu == pytest.approx(FLOPS / 0.1 / 100e9) and doctor.mfu_defect is None
    assert doctor.datasheet_model == "H100" and doctor.mfu_datasheet == pytest.approx(FLOPS / 0.1 / 67e12)
    text = doctor_markdown(doctor)
    assert "**30.0%**" in text and "datasheet dense peak of the H100" in text


def test_the_doctor_reports_the_baselines_gpu_memory_when_it_ran_on_one() -> None:
    from dataclasses import replace

    doctor = sample_doctor({"fp32": 100e9, "bf16": 400e9})
    assert doctor.gpu_peak_bytes is None and "- GPU:" not in doctor_markdown(doctor)  # the records have none
    gib = 2**30
    on_gpu = replace(doctor, gpu_peak_bytes=40 * gib, gpu_steady_bytes=30 * gib, gpu_capacity_bytes=79 * gib)
    text = doctor_markdown(on_gpu)
    assert ("- GPU: the allocator's peak 40,960 MiB, held across steps 30,720 MiB, could grow to 80,896 MiB "
            "(headroom 39,936 MiB)") in text
    assert DoctorReport.from_dict(on_gpu.to_dict()) == on_gpu


def test_the_doctor_reports_an_impossible_mfu_as_a_defect() -> None:
    doctor = sample_doctor({"fp32": 10e9, "bf16": 40e9})  # 30 GFLOP/s achieved against a 10 GFLOP/s "peak"
    assert doctor.mfu is None and doctor.mfu_defect and "exceeds the measured fp32 peak" in doctor.mfu_defect
    assert any(n.startswith("MFU defect") for n in doctor.notes)
    assert "**defect**" in doctor_markdown(doctor) and "300.0%" not in doctor_markdown(doctor)
    assert DoctorReport.from_dict(doctor.to_dict()).mfu_defect == doctor.mfu_defect


def test_the_winner_is_measured_against_the_peak_of_the_dtype_it_computes_in() -> None:
    doctor = sample_doctor({"fp32": 100e9, "bf16": 400e9})
    winner = Candidate.of({"dtype": "bf16"})
    figs = mfu_figures(doctor, before_s=0.1, after_s=0.05, winner=winner, knobs=(),
                       winner_records=[mfu_record(9, 0.05, winner, dtypes=("bfloat16", "float32"))])
    assert figs.before == pytest.approx(0.30) and figs.before_dtype == "fp32"
    assert figs.after == pytest.approx(FLOPS / 0.05 / 400e9) and figs.after_dtype == "bf16"
    # Without a witness report the winner's dtype knob says it.
    assert mfu_figures(doctor, before_s=0.1, after_s=0.05, winner=winner, knobs=(), winner_records=[]).after_dtype \
        == "bf16"
    # Faster than the fp32 peak allows, had it been measured against fp32: a defect, not 150%.
    bad = mfu_figures(doctor, before_s=0.1, after_s=0.02, winner=Candidate.of({"dtype": "fp32"}), knobs=(),
                      winner_records=[mfu_record(9, 0.02)])
    assert bad.after is None and bad.defects and bad.defects[0].startswith("after:")


def test_fp32_faster_than_strict_fp32_is_measured_against_tf32_where_the_device_has_it() -> None:
    peaks = {"fp32": 50e12, "tf32": 400e12, "bf16": 800e12}
    fig = mfu(flops_per_step=1e13, step_time_s=0.1, peaks=peaks, dtype="fp32")  # 100 TFLOP/s: TF32 was allowed
    assert fig.dtype == "tf32" and fig.value == pytest.approx(0.25) and fig.defect is None
    assert mfu(flops_per_step=1e14, step_time_s=0.1, peaks=peaks, dtype="fp32").defect  # above tf32 too
