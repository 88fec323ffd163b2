"""``infrarsi doctor``: run the baseline several times and write doctor.json and doctor.md for the run."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.stages.run.candidate import TrialContext
from bot.executors.environment import scrubbed_environment
from bot.executors.job_python import job_python
from bot.stages.doctor.autocast_calibration import policy_runs
from bot.stages.doctor.device_cache import cached_probe, run_probe
from bot.stages.doctor.project_metadata import project_metadata
from infrarsi.quiet import DisturbanceGuard, MachineBusy, QuietWait
from infrarsi.disturbance import disturbance
from bot.stages.run.run_trial import trial_spec
from infrarsi.doctor import (DoctorError, DoctorReport, allowed_dtypes, build_report, enough_repeats,
                             good_baseline_runs, lower_dtype_values, render_markdown)
from infrarsi.invariants import WorkReference, build_reference, loss_window, window_loss
from infrarsi.loss_band import LossBand, calibrate_band
from infrarsi.contract.model import Contract
from infrarsi.rundir import RunDir, read_json, write_text
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.verdict import Reference, rows_the_baseline_fails


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-%H%M%S", time.gmtime())


#: Knobs that set torch's thread count; the peak is measured with the baseline's value.
THREAD_KNOBS = ("threads", "num_threads", "torch_threads", "intra_op_threads")


def job_threads(contract: Contract) -> int | None:
    """The torch thread count the baseline sets through a knob (None: torch's default, as the job leaves it)."""
    for knob in contract.knobs:
        if knob.name in THREAD_KNOBS and isinstance(knob.default, int) and not isinstance(knob.default, bool) \
                and knob.default > 0:
            return knob.default
    return None


def measure_device(timeout_s: float = 300.0, *, env: dict[str, str] | None = None,
                   threads: int | None = None, remeasure: bool = False, python: str | None = None) -> dict[str, Any]:
    """Peak FLOP/s per dtype and the hardware/software fingerprint, from a fresh process of ``python`` (the job's
    interpreter; the bot imports no torch) in ``env`` (the job's environment, so its thread settings hold) with
    ``threads`` torch threads when the job sets them; a measurement of this machine from the last hours is reused
    unless ``remeasure`` (device_cache.py)."""
    probe_env = scrubbed_environment(env or {})
    interpreter = python or sys.executable
    return cached_probe(lambda: run_probe(interpreter, probe_env, threads=threads, timeout_s=timeout_s),
                        env=probe_env, threads=threads, remeasure=remeasure, python=interpreter)


def profile_phases(ctx: TrialContext, candidate: Candidate, timeout_s: float) -> dict[str, float] | None:
    """Phase shares from one torch.profiler pass over the job's measured steps (for harnesses without phase
    markers); the pass ends after the contract's warm-up and measured optimizer steps, as a trial does."""
    spec = trial_spec(ctx.contract, candidate, tree=ctx.repo, memory_limit_bytes=None, timeout_s=timeout_s)
    argv = list(spec.argv)
    if not Path(argv[0]).name.startswith("python") or len(argv) < 2:
        return None  # only Python entry points can be wrapped
    with tempfile.TemporaryDirectory(prefix="infrarsi-profile-") as tmp:
        out = Path(tmp) / "phases.json"
        cmd = [argv[0], "-m", "bot.stages.doctor.profile_job", str(out),
               "--steps", str(ctx.contract.timing.total_steps), *argv[1:]]
        try:
            subprocess.run(cmd, cwd=spec.cwd, env=scrubbed_environment(dict(spec.env)), capture_output=True,
                           timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            return None
        if not out.exists():
            return None
        return {k: float(v) for k, v in json.loads(out.read_text())["phases_s"].items()}


def calibrate_work(ctx: TrialContext, *, run_id: str, records: list[TrialRecord],
                   progress: Callable[[str], None] = lambda _: None,
                   ran: list[int] | None = None,
                   peaks: dict[str, float] | None = None) -> tuple[WorkReference | None, LossBand, list[str]]:
    """The witnessed reference and the loss band from the baseline's repeats, plus one witnessed run per
    lower dtype the contract's dtype knob permits, and per lower dtype its ``[precision]`` policy allows under
    the catalog's autocast patch where ``peaks`` do not say the device emulates it (what a legitimate dtype
    change moves); the trial number of each such run is appended to ``ran``."""
    contract = ctx.contract
    lower: list[tuple[str, TrialRecord]] = []
    notes: list[str] = []
    for knob, value, dtype in lower_dtype_values(contract):
        progress(f"baseline with {knob}={value}: what a dtype change legitimately moves")
        run = ctx.run(run_id, Candidate.of({**contract.defaults(), knob: value}), witness=True)
        if ran is not None:
            ran.append(run.trial_no)
        if run.outcome is Outcome.OK:
            lower.append((dtype, run))
        else:
            notes.append(f"the baseline with {knob}={value} did not run ({run.outcome.value}: {run.reason[:200]}); "
                         f"candidates in {dtype} are held to assert_close's defaults only")
    for policy in policy_runs(ctx, run_id=run_id, peaks=peaks, progress=progress):
        if policy.record is not None and ran is not None:
            ran.append(policy.record.trial_no)
        if policy.record is not None and policy.record.outcome is Outcome.OK:
            lower.append((policy.dtype, policy.record))
        if policy.note:
            notes.append(policy.note)
    window = measured_window(contract, [r for r in records if r.outcome is Outcome.OK])
    reference = build_reference(records, allowed_dtypes=allowed_dtypes(contract), lower=lower, window=window)
    if reference is None:
        notes.append("no witnessed baseline run: the witnessed rows of every verdict are not checked, so nothing "
                     "is promoted unless [verify] waive names them")
    # A candidate that splits the global batch otherwise is held to a band of its own (bot/stages/run/references.py)
    deviations = [d.loss for d in (reference.deviations if reference else ()) if d.loss]
    per_step = [max(d[i] for d in deviations) for i in range(min(map(len, deviations)))] if deviations else []
    band = baseline_band(records, contract, reference, per_step)
    return reference, band, notes


def baseline_self_check(report: DoctorReport, records: list[TrialRecord],
                        progress: Callable[[str], None] = lambda _: None) -> tuple[tuple[str, str], ...]:
    """Every verdict row, each witnessed baseline repeat against the reference built from them all (an A/A check):
    a row the baseline itself fails (a job whose updates or losses a row cannot see) reads "not checked: the
    baseline fails it too" for every candidate of the run, and convicts none (infrarsi.verdict)."""
    if report.work is None:
        return ()
    fails = rows_the_baseline_fails(records, Reference(work=report.work, band=report.loss_band))
    for name, why in fails:
        progress(f"the baseline fails the {name} row itself ({why[:200]}): not checked for any candidate of this run")
    return fails


def measured_window(contract: Contract, records: list[TrialRecord]) -> tuple[int, int]:
    """(first optimizer step, steps) of the measured window, as far as every witnessed record reached."""
    timing = contract.timing
    return loss_window(timing.warmup_steps, timing.measured_steps, timing.steps_per_line, records)


def baseline_band(records: list[TrialRecord], contract: Contract, reference: WorkReference | None,
                  deviation: list[float] | tuple[float, ...]) -> LossBand | None:
    """The loss band from the baseline's good runs: over the losses the witness saw reach backward() in the
    measured optimizer steps when every run has them (what the step computed, whatever the job prints), else
    over the printed losses (None: neither)."""
    good = [r for r in records if r.outcome is Outcome.OK]
    first, steps = measured_window(contract, good)
    curves = [window_loss(r, first, steps) for r in good] if steps else []
    if reference is not None and reference.loss_source == "witness" and curves and all(curves):
        band = calibrate_band([c for c in curves if c], rtol=contract.loss.rtol,
                              final_rtol=contract.loss.final_rtol, dtype_deviation=deviation)
        return replace(band, source="witness", first_step=first)
    printed = [r.metrics.loss for r in good if r.metrics.loss]
    if not printed:
        return None
    return calibrate_band(printed, rtol=contract.loss.rtol, final_rtol=contract.loss.final_rtol,
                          dtype_deviation=deviation)


def run_doctor(ctx: TrialContext, *, run_id: str, repeats: int = 5,
               progress: Callable[[str], None] = lambda _: None,
               remeasure_device: bool = False) -> tuple[DoctorReport, Path]:
    """Run the baseline up to ``repeats`` times — from the third on, only while another run could change the
    verification plan (infrarsi.doctor.enough_repeats) — measure the device, and write the report files. A run
    disturbed from outside is run again, as verification does (infrarsi/quiet.py): the noise estimate
    every later decision reads must not be one burst of someone else's load."""
    contract = ctx.contract
    baseline = Candidate.of(contract.defaults())
    ctx.journal.ensure_run(run_id, kind="run", base_commit=ctx.base)
    records: list[TrialRecord] = []
    quiet = QuietWait(budget_s=contract.verify.quiet_wait_s, progress=progress, busy=ctx.executor.host_busy)
    quiet.calibrate()
    guard = DisturbanceGuard(rerun_budget=max(2, repeats // 2), wait=quiet, progress=progress)
    busy: str | None = None
    for i in range(repeats):
        if (enough := enough_repeats(records, contract)) is not None:
            progress(enough)
            break
        progress(f"baseline {i + 1} (of at most {repeats}: repeats stop when more cannot change verification's "
                 "plan)")
        try:
            r = guard.run(lambda: ctx.run(run_id, baseline, witness=True),
                          lambda: [x for x in records if x.outcome is Outcome.OK], alone=False)
            if len(records) == 1 and disturbance(records[0], [r]) is not None:
                # the first run had nothing to be judged against: against the second, it was disturbed
                guard.reruns.append(records[0].trial_no)
                guard.disturbed.append(records[0].trial_no)
                progress(f"disturbed from outside, run again: {disturbance(records[0], [r])}")
                records = [r]
                r = guard.run(lambda: ctx.run(run_id, baseline, witness=True),
                              lambda: [x for x in records if x.outcome is Outcome.OK], alone=False)
        except MachineBusy as exc:
            busy = str(exc)
            break
        records.append(r)
        progress(f"baseline {i + 1}: {r.outcome.value}"
                 + (f", {r.metrics.step_time_s * 1000:.1f} ms/step" if r.metrics.step_time_s else f" {r.reason}"))
    disturbed_notes = []
    if guard.reruns:
        disturbed_notes.append(f"{len(guard.reruns)} baseline run(s) disturbed from outside were run again, not "
                               f"counted (trial(s) {', '.join(map(str, guard.reruns))})")
    if busy is not None:
        if len([r for r in records if r.outcome is Outcome.OK]) < 2:
            raise DoctorError(f"{busy}; run the doctor again when the machine is quiet")
        disturbed_notes.append(f"{busy}: profiled from the {len(records)} undisturbed run(s) made before it")
    good_baseline_runs(records)  # a baseline that does not run fails here, before a minute of device probing
    progress("measuring peak FLOP/s and the fingerprint")
    spec = trial_spec(contract, baseline, tree=ctx.repo, memory_limit_bytes=None, timeout_s=300.0)
    device = measure_device(env=dict(spec.env), threads=job_threads(contract), remeasure=remeasure_device,
                            python=job_python(spec.argv))
    fingerprint = dict(device["fingerprint"])
    fingerprint["world_size"] = 1
    fingerprint["executor"] = ctx.executor.name
    metadata = project_metadata(contract.root)
    if metadata is not None:
        fingerprint["project"] = metadata.to_dict()
    profiled = None
    if not any(r.metrics.phases_s for r in records):
        progress("no phase markers: one torch.profiler pass")
        # Bounded by the baseline's own runs: a job whose steps the pass cannot count (no torch.optim
        # optimizer) must not hold the doctor for the whole trial timeout.
        longest = max((r.metrics.wall_s or 0.0 for r in records), default=0.0)
        profiled = profile_phases(ctx, baseline, min(contract.budget.trial_timeout_s, max(60.0, 3 * longest)))
    calibration: list[int] = []
    work, band, notes = calibrate_work(ctx, run_id=run_id, records=records, progress=progress, ran=calibration,
                                       peaks=device["peak_flops"])
    report = build_report(contract, records, run_id=run_id, created_at=time.time(),
                          peak_flops=device["peak_flops"], peak_flops_method=device["peak_flops_method"],
                          fingerprint=fingerprint, profiled_phases=profiled, work=work, band=band)
    report = replace(report, notes=report.notes + tuple(notes) + tuple(disturbed_notes),
                     calibration_trials=tuple(calibration))
    report = replace(report, baseline_fails=baseline_self_check(report, records, progress))
    out = RunDir(contract.root, run_id)
    write_text(out.doctor_json, report.to_json())
    write_text(out.doctor_md, render_markdown(report))
    return report, out.path


def load_doctor(root: Path, run_id: str) -> DoctorReport | None:
    data = read_json(RunDir(root, run_id).doctor_json)
    return None if data is None else DoctorReport.from_dict(data)
