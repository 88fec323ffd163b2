"""The doctor's report: what the baseline costs, how noisy it is, and what verification will need.

Built from several baseline trials (never one), the device's measured peak
FLOP/s and its fingerprint. Serialised as ``doctor.json``; rendered for people
as ``doctor.md`` with two Mermaid charts (the step-time distribution and the
phase breakdown), which GitHub renders in place.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from scipy.stats import chi2

from infrarsi.contract.model import Contract, Timing
from infrarsi.errors import NOT_RIGHT, InfraRSIError
from infrarsi.dtype_levers import knob_dtypes
from infrarsi.dtypes import DTYPE_KNOB_NAMES, PRECISION_RANK, torch_name
from infrarsi.invariants import WorkReference
from infrarsi.loss_band import LossBand, calibrate_band
from infrarsi.mfu import compute_dtype, datasheet_peaks, six_n_flops
from infrarsi.mfu import mfu as mfu_of
from infrarsi.stats import NoiseProfile, minimum_detectable_effect, noise_profile, repeats_for_effect
from infrarsi.trial_record import Outcome, TrialRecord, median_bytes

PHASES = ("data", "forward", "backward", "optimizer", "communication")
PHASE_TOLERANCE = 0.15  # the phases must account for the step time within this fraction
DOCTOR_VERSION = 1


class DoctorError(InfraRSIError, RuntimeError):
    """The baseline cannot be profiled (it does not run, or too few repeats succeeded)."""

    exit_code = NOT_RIGHT


@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorReport:
    version: int = DOCTOR_VERSION
    run_id: str
    created_at: float
    trials: tuple[int, ...]
    step_times_s: tuple[tuple[float, ...], ...]  # per run, the measured intervals
    median_s: float
    cv_within: float
    cv_between: float
    sigma_log: float
    verify_pairs: int
    mde: float  # minimum detectable effect with verify_pairs per arm
    alpha: float
    power: float
    phases_s: dict[str, float]
    phases_source: str
    phases_sum_error: float | None
    peak_mem_bytes: int
    memory_limit_bytes: int | None
    peak_flops: dict[str, float]
    peak_flops_method: str
    baseline_dtype: str
    model_flops_per_step: float | None
    model_flops_source: str
    mfu: float | None
    fingerprint: dict[str, Any]
    loss_band: LossBand
    notes: tuple[str, ...] = field(default=())
    work: WorkReference | None = None  # the witnessed baseline: counted work, gradients, weights
    mfu_defect: str | None = None  # why there is no MFU figure although there should be (infrarsi.mfu)
    datasheet_peak_flops: dict[str, float] | None = None  # the detected GPU's dense datasheet peaks
    datasheet_model: str | None = None
    mfu_datasheet: float | None = None  # MFU against the datasheet peak of the baseline dtype
    # On a GPU (the device memory reporter, docs/trials.md): the allocator's peak, what it held across steps and
    # what it could grow to, medians over the baseline's runs; None on a CPU
    gpu_peak_bytes: int | None = None
    gpu_steady_bytes: int | None = None
    gpu_capacity_bytes: int | None = None
    # The witnessed runs the doctor made beside the baseline repeats (the baseline in each lower dtype): theirs,
    # not the search's, so the search never counts or verifies them as candidates.
    calibration_trials: tuple[int, ...] = ()
    # The band over the printed losses, kept beside a witness-sourced ``loss_band`` for unwitnessed runs (the
    # search's timed trials) whose printed curve is all they have; None when ``loss_band`` is itself printed.
    printed_band: LossBand | None = None
    # The measured steps a run times (infrarsi.doctor.measured_window): fewer than the contract's when the job's
    # steps are steady; None: the contract's (a report written before the window was sized).
    measured_steps: int | None = None
    window_note: str = ""
    # (row, why) of every verdict row the baseline's own witnessed repeats fail against each other (an A/A check
    # of every row): "not checked: the baseline fails it too" for every candidate of the run, never convicting.
    baseline_fails: tuple[tuple[str, str], ...] = ()

    @property
    def own_trials(self) -> frozenset[int]:
        """Every trial the doctor ran: the baseline repeats and the calibration runs."""
        return frozenset(self.trials) | frozenset(self.calibration_trials)

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.memory_limit_bytes is None else self.memory_limit_bytes - self.peak_mem_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version, "run_id": self.run_id, "created_at": self.created_at,
            "trials": list(self.trials),
            "step_time_s": {"median": self.median_s, "cv": self.cv_within, "cv_within": self.cv_within,
                            "cv_between": self.cv_between, "sigma_log": self.sigma_log,
                            "per_run": [list(r) for r in self.step_times_s]},
            "mde": {"effect": self.mde, "pairs": self.verify_pairs, "alpha": self.alpha, "power": self.power},
            "verify_pairs": self.verify_pairs,
            "phases": {"seconds": self.phases_s, "source": self.phases_source,
                       "sum_error": self.phases_sum_error, "tolerance": PHASE_TOLERANCE},
            "peak_mem_bytes": self.peak_mem_bytes, "memory_limit_bytes": self.memory_limit_bytes,
            "headroom_bytes": self.headroom_bytes,
            "peak_flops": self.peak_flops, "peak_flops_method": self.peak_flops_method,
            "baseline_dtype": self.baseline_dtype,
            "model_flops_per_step": self.model_flops_per_step, "model_flops_source": self.model_flops_source,
            "mfu": self.mfu, "fingerprint": self.fingerprint, "loss_band": self.loss_band.to_dict(),
            "notes": list(self.notes), "work": self.work.to_dict() if self.work else None,
            "mfu_defect": self.mfu_defect, "datasheet_peak_flops": self.datasheet_peak_flops,
            "datasheet_model": self.datasheet_model, "mfu_datasheet": self.mfu_datasheet,
            "gpu_peak_bytes": self.gpu_peak_bytes, "gpu_steady_bytes": self.gpu_steady_bytes,
            "gpu_capacity_bytes": self.gpu_capacity_bytes, "calibration_trials": list(self.calibration_trials),
            "printed_band": self.printed_band.to_dict() if self.printed_band else None,
            "measured_steps": self.measured_steps, "window_note": self.window_note,
            "baseline_fails": [list(pair) for pair in self.baseline_fails],
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DoctorReport:
        st, mde, ph = d["step_time_s"], d["mde"], d["phases"]
        return DoctorReport(
            version=int(d["version"]), run_id=d["run_id"], created_at=float(d["created_at"]),
            trials=tuple(d["trials"]), step_times_s=tuple(tuple(r) for r in st["per_run"]), median_s=st["median"],
            cv_within=st["cv_within"], cv_between=st["cv_between"], sigma_log=st["sigma_log"],
            verify_pairs=int(mde["pairs"]), mde=float(mde["effect"]), alpha=float(mde["alpha"]),
            power=float(mde["power"]), phases_s=dict(ph["seconds"]), phases_source=ph["source"],
            phases_sum_error=ph["sum_error"], peak_mem_bytes=int(d["peak_mem_bytes"]),
            memory_limit_bytes=d["memory_limit_bytes"], peak_flops=dict(d["peak_flops"]),
            peak_flops_method=d["peak_flops_method"], baseline_dtype=d["baseline_dtype"],
            model_flops_per_step=d["model_flops_per_step"], model_flops_source=d["model_flops_source"],
            mfu=d["mfu"], fingerprint=dict(d["fingerprint"]), loss_band=LossBand.from_dict(d["loss_band"]),
            notes=tuple(d.get("notes", ())),
            work=WorkReference.from_dict(d["work"]) if d.get("work") else None,
            mfu_defect=d.get("mfu_defect"), datasheet_peak_flops=d.get("datasheet_peak_flops"),
            datasheet_model=d.get("datasheet_model"), mfu_datasheet=d.get("mfu_datasheet"),
            gpu_peak_bytes=d.get("gpu_peak_bytes"), gpu_steady_bytes=d.get("gpu_steady_bytes"),
            gpu_capacity_bytes=d.get("gpu_capacity_bytes"),
            calibration_trials=tuple(int(t) for t in d.get("calibration_trials") or ()),
            printed_band=LossBand.from_dict(d["printed_band"]) if d.get("printed_band") else None,
            measured_steps=int(d["measured_steps"]) if d.get("measured_steps") else None,
            window_note=str(d.get("window_note") or ""),
            baseline_fails=tuple((str(n), str(why)) for n, why in d.get("baseline_fails") or ()))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def baseline_dtype(contract: Contract) -> str:
    """The compute dtype of the baseline, from a knob that looks like one (for the matching peak)."""
    for knob in contract.knobs:
        if knob.name in DTYPE_KNOB_NAMES and isinstance(knob.default, str):
            return "bf16" if "bf16" in knob.default or "bfloat16" in knob.default else "fp32"
    return "fp32"


def dtype_knob(contract: Contract) -> tuple[str, dict[str, str]] | None:
    """The knob that sets the compute dtype, and its values as torch dtypes (for the precision invariant)."""
    for knob in contract.knobs:
        if knob.name in DTYPE_KNOB_NAMES and knob.values:
            named = {str(v): name for v in knob.values if (name := torch_name(str(v)))}
            if named:
                return knob.name, named
    return None


def allowed_dtypes(contract: Contract) -> tuple[str, ...]:
    """Torch dtypes the contract lets a candidate compute in besides the baseline's own: its precision policy
    (``[precision] allow``), its dtype knob's values, and what any knob's value selects (a ``--bf16`` switch,
    ``precision=bf16-mixed``)."""
    found = dtype_knob(contract)
    named = set(found[1].values()) if found else set()
    return tuple(sorted(named | set(knob_dtypes(contract.knobs)) | set(contract.precision.allow)))


def policy_lower_dtypes(contract: Contract) -> tuple[str, ...]:
    """The dtypes the precision policy allows below the baseline's precision that no knob value reaches: the
    doctor calibrates each with a witnessed baseline run under the catalog's autocast patch for it."""
    by_knob = {dtype for _, _, dtype in lower_dtype_values(contract)} | set(knob_dtypes(contract.knobs))
    baseline = torch_name(baseline_dtype(contract)) or "float32"
    return tuple(d for d in contract.precision.lower_than(baseline) if d not in by_knob)


def lower_dtype_values(contract: Contract) -> list[tuple[str, str, str]]:
    """(knob, value, torch dtype) for each value of the dtype knob below the default's precision: the runs
    the doctor makes to measure what a legitimate dtype change does to the loss and the gradients."""
    found = dtype_knob(contract)
    if found is None:
        return []
    name, named = found
    default = named.get(str(contract.knob(name).default), "float32")
    return [(name, value, dtype) for value, dtype in named.items()
            if PRECISION_RANK.get(dtype, 1) > PRECISION_RANK.get(default, 1)]


#: The doctor's baseline repeats: at least this many, more only while they could change the plan.
MIN_REPEATS = 3
#: How far the run-to-run noise could still be above its estimate from n runs: the chi-square quantile's
#: one-sided 70% bound on a standard deviation from n - 1 degrees of freedom.
NOISE_BOUND = 0.3


def enough_repeats(records: Sequence[TrialRecord], contract: Contract) -> str | None:
    """Why the doctor's baseline repeats so far are enough (None: run another): the verification it plans needs
    the same number of pairs at the estimated noise and at its plausible upper bound — more repeats cannot
    change the plan — or it is capped at ``verify.max_pairs`` either way."""
    good = [r for r in records if r.outcome is Outcome.OK and len(r.metrics.step_times_s) >= 2
            and r.metrics.step_time_s]
    if len(good) < MIN_REPEATS:
        return None
    try:
        profile = noise_profile([r.metrics.step_times_s for r in good],
                                figures=[r.metrics.step_time_s or 0.0 for r in good])
    except ValueError:
        return None
    spec = contract.verify
    dof = len(good) - 1
    upper = profile.sigma_log * math.sqrt(dof / chi2.ppf(NOISE_BOUND, dof))

    def pairs(sigma: float) -> int:
        return repeats_for_effect(sigma, spec.target_effect, spec.alpha, spec.power, min_effect=spec.min_effect,
                                  n_max=spec.max_pairs)

    now, worst = pairs(profile.sigma_log), pairs(upper)
    if now == worst:
        return (f"{len(good)} runs are enough: verification plans {now} pairs at the measured noise and would at "
                f"its plausible upper bound too")
    return None


def measured_window(profile: NoiseProfile, contract: Contract) -> tuple[int, str]:
    """How many steps a run times: enough that a run's figure is no noisier than half the run-to-run noise
    (its within-run spread over m steps, sd/sqrt(m)), between the contract's floor and ``measured_steps``."""
    timing = contract.timing
    floor, most = timing.window_floor, timing.measured_steps
    between = max(profile.sigma_log_between, 0.005)
    needed = math.ceil((profile.within_sigma_log / (0.5 * between)) ** 2) if profile.within_sigma_log > 0 else floor
    steps = max(floor, min(most, needed))
    if steps == most:
        return most, ""
    return steps, (f"the job's steps are steady (within a run {profile.within_sigma_log:.1%}, between runs "
                   f"{profile.sigma_log_between:.1%}): runs time {steps} measured steps, not {most} "
                   f"(timing.min_measured_steps = {floor} is the floor)")


def windowed(contract: Contract, doctor: DoctorReport) -> Contract:
    """``contract`` timing the doctor's measured window (unchanged when the doctor kept the contract's)."""
    if not doctor.measured_steps or doctor.measured_steps >= contract.timing.measured_steps:
        return contract
    from dataclasses import replace

    return replace(contract, timing=replace(contract.timing, measured_steps=doctor.measured_steps))


def band_for(band: LossBand, timing: Timing) -> LossBand:
    """``band`` over the steps a run with ``timing`` measures (the doctor's window may be shorter than the runs
    that calibrated it): per optimizer step for a band of the witness's losses, per step line for printed ones."""
    return band.window(timing.measured_steps, timing.steps_per_line)


def good_baseline_runs(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The baseline repeats that count; :class:`DoctorError` naming each failure when fewer than 2 do."""
    good = [r for r in records if r.outcome is Outcome.OK and len(r.metrics.step_times_s) >= 2]
    if len(good) < 2:
        reasons = "; ".join(f"trial {r.trial_no}: {r.outcome.value} {r.reason}" for r in records
                            if r.outcome is not Outcome.OK)
        raise DoctorError(f"only {len(good)} of {len(records)} baseline runs succeeded ({reasons or 'too few steps'})")
    untimed = [r.trial_no for r in good if max(r.metrics.step_times_s) <= 0]
    if untimed:
        raise DoctorError(f"the step lines of baseline trial {untimed[0]} arrived all at once, so no step can be "
                          "timed: the job buffers its output (print with flush=True, or log through an unbuffered "
                          "handler), or its steps take microseconds")
    return good


def tokens_note(declared: int, work: WorkReference | None) -> str | None:
    """What the doctor says when the witness's count of the tokens one optimizer step consumed (token ids that
    reached an embedding, or targets that reached the loss; over every rank) is not the contract's figure."""
    measured = work.tokens if work is not None else None
    if measured is None or measured == declared:
        return None
    return (f"tokens per step: the witness counted {measured:,} consumed in one optimizer step (token ids reaching "
            f"an embedding, or targets reaching the loss), the contract says {declared:,}: set "
            f"[workload] tokens_per_step = {measured} if the witness is right (MFU and tokens/s use it)")


def build_report(contract: Contract, records: Sequence[TrialRecord], *, run_id: str, created_at: float,
                 peak_flops: dict[str, float], peak_flops_method: str, fingerprint: dict[str, Any],
                 profiled_phases: dict[str, float] | None = None, work: WorkReference | None = None,
                 band: LossBand | None = None) -> DoctorReport:
    """Aggregate baseline repeats into the report; raises :class:`DoctorError` with fewer than 2 good runs."""
    good = good_baseline_runs(records)
    notes: list[str] = []
    runs = [r.metrics.step_times_s for r in good]
    profile = noise_profile(runs, figures=[r.metrics.step_time_s or 0.0 for r in good])
    window = measured_window(profile, contract)
    if window[1]:
        notes.append(window[1])
    spec = contract.verify
    pairs = repeats_for_effect(profile.sigma_log, spec.target_effect, spec.alpha, spec.power,
                               min_effect=spec.min_effect, n_max=spec.max_pairs)
    mde = minimum_detectable_effect(profile.sigma_log, pairs, spec.alpha, spec.power, min_effect=spec.min_effect)
    if not math.isfinite(mde) or mde > spec.target_effect:
        notes.append(f"the job is noisy: with {pairs} pairs (verify.max_pairs) verification detects only "
                     f"{mde:.1%} effects, not the {spec.target_effect:.0%} target")
    # the figure every trial is read against: each run's step time as measured (infrarsi.step_clock), not the
    # median of its intervals (which holding and pacing events could shrink)
    median = statistics.median(r.metrics.step_time_s or statistics.median(r.metrics.step_times_s) for r in good)

    phases, source, error = _phases(good, median, profiled_phases)
    peak_mem = int(statistics.median(r.metrics.peak_mem_bytes or 0 for r in good))
    gpu = {name: median_bytes(good, name) for name in ("device_peak_mem_bytes", "device_steady_mem_bytes",
                                                     "device_capacity_bytes")}
    dtype = baseline_dtype(contract)
    if work is not None and work.reports and work.reports[0].matmul_dtypes:
        dtype = compute_dtype(work.reports[0].matmul_dtypes, fallback=dtype)
    model_flops, flops_source = _model_flops(contract, good, work)
    figure = mfu_of(flops_per_step=model_flops, step_time_s=median, peaks=peak_flops, dtype=dtype) \
        if model_flops else None
    if figure is not None and figure.defect:
        notes.append(f"MFU defect: {figure.defect}")
    sheet = datasheet_peaks(fingerprint.get("gpu_model"))
    on_sheet = mfu_of(flops_per_step=model_flops, step_time_s=median, peaks=sheet[1], dtype=dtype,
                      peak_source="datasheet") if sheet and model_flops else None
    printed = [r.metrics.loss for r in good if r.metrics.loss]
    printed_band = calibrate_band(printed, rtol=contract.loss.rtol, final_rtol=contract.loss.final_rtol,
                                  dtype_deviation=band.dtype_deviation if band else ()) if printed else None
    if band is None:
        band = calibrate_band([r.metrics.loss for r in good], rtol=contract.loss.rtol,
                              final_rtol=contract.loss.final_rtol)
    if len(good) < len(records):
        notes.append(f"{len(records) - len(good)} of {len(records)} baseline runs failed and were left out")
    note = tokens_note(contract.workload.tokens_per_step, work)
    if note:
        notes.append(note)
    return DoctorReport(
        run_id=run_id, created_at=created_at, trials=tuple(r.trial_no for r in good), step_times_s=tuple(runs),
        median_s=median, cv_within=profile.within_cv, cv_between=profile.between_cv, sigma_log=profile.sigma_log,
        verify_pairs=pairs, mde=mde, alpha=spec.alpha, power=spec.power, phases_s=phases, phases_source=source,
        phases_sum_error=error, peak_mem_bytes=peak_mem, memory_limit_bytes=contract.budget.memory_limit_bytes,
        peak_flops=peak_flops, peak_flops_method=peak_flops_method, baseline_dtype=dtype,
        model_flops_per_step=model_flops, model_flops_source=flops_source,
        mfu=figure.value if figure else None, fingerprint=fingerprint, loss_band=band, notes=tuple(notes),
        work=work, mfu_defect=figure.defect if figure else None,
        datasheet_peak_flops=dict(sheet[1]) if sheet else None, datasheet_model=sheet[0] if sheet else None,
        mfu_datasheet=on_sheet.value if on_sheet else None, gpu_peak_bytes=gpu["device_peak_mem_bytes"],
        gpu_steady_bytes=gpu["device_steady_mem_bytes"], gpu_capacity_bytes=gpu["device_capacity_bytes"],
        printed_band=printed_band if band.source == "witness" else None,
        measured_steps=window[0], window_note=window[1])


def _phases(good: Sequence[TrialRecord], median: float,
            profiled: dict[str, float] | None) -> tuple[dict[str, float], str, float | None]:
    marked = [dict(r.metrics.phases_s) for r in good if r.metrics.phases_s]
    if marked:
        names = sorted({n for m in marked for n in m})
        phases = {n: statistics.median(m.get(n, 0.0) for m in marked) for n in names}
        source = "probe phase markers emitted by the locked harness (the job's clock)"
    elif profiled:
        total = sum(profiled.values()) or 1.0
        phases = {n: median * v / total for n, v in profiled.items()}
        return phases, "torch.profiler pass: shares of operator time, scaled to the bot-measured step time", 0.0
    else:
        return {}, "none (no phase markers and no profiler pass)", None
    # Per run, the job's phases against the bot's mean interval of the same steps.
    errors = [(sum(dict(r.metrics.phases_s).values()) - statistics.fmean(r.metrics.step_times_s))
              / statistics.fmean(r.metrics.step_times_s) for r in good if r.metrics.phases_s]
    return phases, source, statistics.median(errors) if errors else None


def _model_flops(contract: Contract, good: Sequence[TrialRecord],
                 work: WorkReference | None = None) -> tuple[float | None, str]:
    """Model FLOPs per step: the contract's, else counted on a real baseline step, else 6·N·tokens."""
    if contract.workload.model_flops_per_step:
        return contract.workload.model_flops_per_step, "the contract (workload.model_flops_per_step)"
    if work is not None and work.flops:
        step = work.reports[0].count_step
        return float(work.flops), (
            f"FlopCounterMode over optimizer step {step} of the witnessed baseline (forward, backward and "
            "optimizer of every micro-batch, as the baseline computes them; a candidate's recomputation, such "
            "as activation checkpointing, is hardware work and is not credited)")
    params = next((r.metrics.parameters for r in good if r.metrics.parameters), None)
    if params:
        embedding = next((r.metrics.embedding_parameters for r in good if r.metrics.embedding_parameters), None)
        flops = six_n_flops(parameters=params, tokens_per_step=contract.workload.tokens_per_step,
                            embedding_parameters=embedding or 0)
        what = (f"N = {params - embedding:,} parameters without the {embedding:,} of the embedding" if embedding
                else f"N = {params:,} parameters as the probe reported them (the job did not report "
                     "embedding_parameters, so the embedding is included: an overestimate)")
        return flops, f"6·N·tokens with {what}; no witnessed FLOP count"
    return None, "unknown (set workload.model_flops_per_step or report parameters with probe.info)"


def _band_rule(band: LossBand) -> str:
    if band.method != "calibrated":
        return (f"Calibrated from {band.runs} runs: per step, mean ± max(4 σ, {band.rtol:g} × |mean|); "
                f"the final loss may be at most {band.final_rtol:.1%} worse.")
    dev = (f"; a lower-dtype baseline run moved it by at most {max(band.dtype_deviation):.2e} relative"
           if band.dtype_deviation else "; no lower-dtype run (the contract has no dtype knob to lower)")
    return (f"Calibrated from {band.runs} runs: per step, mean ± max(4 σ, 3 × the dtype change's deviation, "
            f"1e-4) × |mean|, at most loss.rtol = {band.rtol:g}{dev}; the final loss may be at most "
            f"{band.final_rtol:.3%} worse.")


def _work_lines(work: WorkReference | None) -> list[str]:
    """What the witness saw in the baseline: the reference verification holds candidates to."""
    lines = ["", "## Work (witness)", ""]
    if work is None or not work.reports:
        return lines + ["No witnessed baseline run: the work invariants are off (docs/trials.md, \"The witness\")."]
    r = work.reports[0]
    lines += [f"- counted by FlopCounterMode over optimizer step {r.count_step}: "
              + (f"**{work.flops / 1e9:.4g} GFLOP**" if work.flops else "nothing")
              + " (" + ", ".join(f"{op} {n / 1e9:.3g}" for op, n in r.flops_by_op) + ")",
              f"- the optimizer holds {r.params} tensors ({r.param_elements:,} elements), {r.with_grad} receive a "
              f"gradient; {r.optimizer_steps} optimizer steps; matrix products in {', '.join(r.matmul_dtypes)}",
              f"- dtypes a candidate may compute in: {', '.join(work.allowed_dtypes)}"]
    for d in work.deviations:
        lines.append(f"- the baseline in {d.dtype} moved the step-1 loss by {d.first_loss:.1e}, gradient norms by "
                     f"{d.grad:.1e}, the weight update by {d.update:.1e} (relative)")
    return lines


def _gpu_memory_lines(r: DoctorReport) -> list[str]:
    """The GPU's memory (what runs out on a GPU; the search's memory model fits it), when the baseline had one."""
    if r.gpu_peak_bytes is None:
        return []
    cap = r.gpu_capacity_bytes
    return [f"- GPU: the allocator's peak {_mib(r.gpu_peak_bytes)}, held across steps "
            f"{_mib(r.gpu_steady_bytes)}, could grow to {_mib(cap)}"
            + (f" (headroom {_mib(cap - r.gpu_peak_bytes)})" if cap else "")]


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def render_markdown(report: DoctorReport) -> str:
    """doctor.md: the figures a person needs, with the two pictures."""
    r = report
    lines = [f"# Doctor report — run `{r.run_id}`", "",
             f"Baseline measured **{len(r.trials)} times** in fresh processes (trials {', '.join(map(str, r.trials))}).",
             "", "## Step time", "",
             f"- median **{r.median_s * 1000:.1f} ms** per step (bot-measured, warm-up excluded)",
             f"- coefficient of variation within runs {r.cv_within:.1%}, between runs {r.cv_between:.1%} "
             f"(noise σ of log run medians {r.sigma_log:.3f})",
             f"- verification will interleave **{r.verify_pairs} pairs**; minimum detectable effect "
             f"{r.mde:.1%} at α = {r.alpha:g}, power {r.power:.0%}", "",
             "```mermaid", "xychart-beta", '    title "Measured step times per baseline run (ms)"',
             "    x-axis [" + ", ".join(f'"run {i + 1}"' for i in range(len(r.step_times_s))) + "]",
             '    y-axis "ms"']
    medians = [statistics.median(run) * 1000 for run in r.step_times_s]
    lows = [min(run) * 1000 for run in r.step_times_s]
    highs = [max(run) * 1000 for run in r.step_times_s]
    lines += ["    bar [" + ", ".join(f"{m:.1f}" for m in medians) + "]",
              "    line [" + ", ".join(f"{v:.1f}" for v in lows) + "]",
              "    line [" + ", ".join(f"{v:.1f}" for v in highs) + "]", "```", "",
              "Bars: median per run; lines: fastest and slowest measured step of each run.", "",
              "## Where the time goes", ""]
    if r.phases_s:
        lines += ["```mermaid", f'pie showData title "Phases of one step ({r.median_s * 1000:.0f} ms)"']
        lines += [f'    "{name}" : {seconds * 1000:.1f}' for name, seconds in sorted(r.phases_s.items())]
        lines += ["```", "", "| phase | ms per step | share |", "|---|---:|---:|"]
        total = sum(r.phases_s.values()) or 1.0
        lines += [f"| {n} | {s * 1000:.1f} | {s / total:.0%} |" for n, s in sorted(r.phases_s.items())]
        err = f"{r.phases_sum_error:+.1%}" if r.phases_sum_error is not None else "n/a"
        ok = r.phases_sum_error is not None and abs(r.phases_sum_error) <= PHASE_TOLERANCE
        lines += ["", f"Source: {r.phases_source}. The phases sum to the step time within {err} "
                  f"(tolerance ±{PHASE_TOLERANCE:.0%}: {'ok' if ok else 'outside'})."]
    else:
        lines += [f"No phase breakdown: {r.phases_source}."]
    head = r.headroom_bytes
    lines += ["", "## Memory", "", f"- peak resident memory {_mib(r.peak_mem_bytes)}",
              f"- limit {_mib(r.memory_limit_bytes)}" + (f", headroom {_mib(head)}" if head is not None else
                                                         " (no budget.memory_limit in the contract)"),
              *_gpu_memory_lines(r),
              "", "## Compute efficiency", ""]
    lines += ["- measured peak: " + ", ".join(f"{k} {v / 1e9:,.0f} GFLOP/s" for k, v in r.peak_flops.items())
              + f" ({r.peak_flops_method})",
              "- model FLOPs per step: " + (f"{r.model_flops_per_step:.3g}" if r.model_flops_per_step else "unknown")
              + f" — from {r.model_flops_source}",
              f"- MFU against the measured {r.baseline_dtype} peak (the dtype the baseline's matrix products ran in): "
              + (f"**defect** — {r.mfu_defect}" if r.mfu_defect else f"**{r.mfu:.1%}**" if r.mfu is not None
                 else "n/a")]
    if r.datasheet_peak_flops:
        lines += [f"- datasheet dense peak of the {r.datasheet_model}: "
                  + ", ".join(f"{k} {v / 1e12:,.1f} TFLOP/s" for k, v in r.datasheet_peak_flops.items())
                  + (f"; MFU against it {r.mfu_datasheet:.1%}" if r.mfu_datasheet is not None else "")
                  + " (the figure above uses the measured peak)"]
    lines += [
              "", "## Loss band", "",
              _band_rule(r.loss_band), "",
              "| measured step | mean | band |", "|---:|---:|---|"]
    lines += [f"| {i} | {m:.4f} | [{lo:.4f}, {hi:.4f}] |" for i, (m, lo, hi) in
              enumerate(zip(r.loss_band.mean, r.loss_band.lower, r.loss_band.upper), start=1)]
    lines += _work_lines(r.work)
    if r.baseline_fails:
        lines += ["", "## Rows the baseline fails itself", "",
                  "Each witnessed baseline run was held to the rows of a verdict against the reference built from all "
                  "of them. These rows it fails, so they cannot tell a candidate from the baseline on this job: every "
                  "candidate of this run reads them *not checked: the baseline fails it too*, none is made invalid "
                  "and no patch is excluded on them, and they stop no promotion (the pull request lists them).", ""]
        lines += [f"- `{name}`: {why}" for name, why in r.baseline_fails]
    lines += ["", "## Fingerprint", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(r.fingerprint.items()) if not isinstance(v, dict)]
    for k, v in sorted(r.fingerprint.items()):
        if isinstance(v, dict):
            lines += [f"| {k} | " + ", ".join(f"{a}={b}" for a, b in v.items() if b not in (None, [], "")) + " |"]
    if r.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    return "\n".join(lines) + "\n"
