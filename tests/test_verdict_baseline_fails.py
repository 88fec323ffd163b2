"""A row the baseline itself fails never convicts: the doctor's A/A check of every row (issue 47).

A job that updates its parameters in a way a row cannot see (no torch.optim optimizer, before the witness counted
hand-written updates) showed "0 optimizer steps for 7 reported steps (baseline 0)" as broken for every candidate,
and every patch tried was excluded as if it had cheated. The doctor now holds each baseline repeat to every row
against the reference built from them all; a row the baseline fails reads "not checked: the baseline fails it
too" for the whole run, convicts no candidate, excludes no patch and stops no promotion.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from bot.stages.doctor.baseline import baseline_self_check
from bot.stages.run.references import References
from infrarsi.contract.model import Timing
from infrarsi.doctor import DoctorReport, render_markdown
from infrarsi.invariants import CheckStatus, WorkReference
from infrarsi.loss_band import calibrate
from infrarsi.report.model import Invariant
from infrarsi.report.render import _invariant_table
from infrarsi.search.blame import Judgements
from infrarsi.trial_record import Candidate
from infrarsi.verdict import (Reference, VerdictKind, excuse_from_baselines, judge, missing_checks,
                              rows_the_baseline_fails, trial_invariants)
from tests.support.reports import sample_doctor
from tests.support.witnessed import report, trial

LOSS = (5.0, 4.8, 4.6, 4.5, 4.4, 4.3)
BAND = calibrate([LOSS, tuple(v + 0.001 for v in LOSS)], rtol=0.02, final_rtol=0.01)
BASE = Candidate.of({"dtype": "fp32"})
PATCHED = Candidate.of({"dtype": "fp32"}, ("zero_grad_set_to_none",))
#: What the witness saw of a job whose updates it could not see: no optimizer step at all.
UNSEEN = report(optimizer_steps=0)


def _reference() -> Reference:
    return Reference(work=WorkReference(reports=(UNSEEN, UNSEEN), first_loss=(5.0, 5.0), allowed_dtypes=("float32",)),
                     band=BAND)


def test_the_doctor_finds_the_rows_its_own_repeats_fail() -> None:
    repeats = [trial(n, 1.0, cand=BASE, loss=LOSS, witness=UNSEEN) for n in (1, 2, 3)]
    fails = rows_the_baseline_fails(repeats, _reference())
    assert [name for name, _ in fails] == ["optimizer_steps"]
    assert "0 optimizer steps for 7 reported steps" in fails[0][1]
    # an honest baseline fails nothing: the check excuses no row of an ordinary job
    honest = report()
    ordinary = Reference(work=WorkReference(reports=(honest, honest), first_loss=(5.0, 5.0),
                                            allowed_dtypes=("float32",)), band=BAND)
    assert rows_the_baseline_fails([trial(n, 1.0, cand=BASE, loss=LOSS) for n in (1, 2)], ordinary) == ()


def test_a_row_the_baseline_fails_never_convicts_and_no_patch_is_excluded_on_it() -> None:
    repeats = [trial(n, 1.0, cand=BASE, loss=LOSS, witness=UNSEEN) for n in (1, 2, 3)]
    reference = replace(_reference(), baseline_fails=rows_the_baseline_fails(repeats, _reference()))
    base = [trial(10 + 2 * i, s, cand=BASE, loss=LOSS, witness=UNSEEN) for i, s in enumerate([1.0, 1.01, 0.99, 1.0])]
    cand = [trial(11 + 2 * i, s, cand=PATCHED, loss=LOSS, witness=UNSEEN)
            for i, s in enumerate([0.6, 0.61, 0.59, 0.6])]

    without = judge(base, cand, reference=_reference())
    assert without.kind is VerdictKind.INVALID and without.reason.startswith("optimizer_steps")

    verdict = judge(base, cand, reference=reference)
    assert verdict.kind is VerdictKind.PROMOTED, verdict.reason
    rows = [c for c in verdict.invariants if c.name == "optimizer_steps"]
    assert rows and all(c.status is CheckStatus.NOT_CHECKED and c.baseline_fails for c in rows)
    assert "not checked: the baseline fails it too (trial 1: 0 optimizer steps" in rows[0].detail
    assert not missing_checks(verdict.invariants)  # it stops no promotion

    # what the search does with a verdict: only an invalid one blames its patches
    judged = Judgements()
    if verdict.kind is VerdictKind.INVALID:
        judged.judge(PATCHED, verdict.reason)
    assert judged.excludes(PATCHED) is None and not judged.patches

    # a candidate that breaks another row is still convicted by that row
    worse = [trial(11 + 2 * i, s, cand=PATCHED, loss=LOSS, witness=replace(UNSEEN, flops=500_000_000))
             for i, s in enumerate([0.6, 0.61, 0.59, 0.6])]
    assert judge(base, worse, reference=reference).reason.startswith("work")


def test_the_pull_request_lists_such_a_row_with_its_reason() -> None:
    rows = [Invariant(name="optimizer_steps", ok=False, status="not_checked", baseline_fails=True,
                      detail="trial 11: not checked: the baseline fails it too (trial 1: 0 optimizer steps)"),
            Invariant(name="work", ok=True, status="ok", detail="trial 11: counted 1 GFLOP")]
    text = "\n".join(_invariant_table(rows))
    assert "| optimizer_steps | ⚠️ not checked in 1/1 runs (the baseline fails it too) |" in text
    assert "Not checked, because the baseline's own runs fail it too" in text
    assert "- `optimizer_steps`: trial 11: not checked: the baseline fails it too (trial 1: 0 optimizer steps)" in text


def test_the_doctor_names_the_rows_and_keeps_them_for_the_run() -> None:
    doctor = sample_doctor({"fp32": 1e12})
    repeats = [trial(n, 1.0, cand=BASE, loss=LOSS, witness=UNSEEN) for n in (1, 2, 3)]
    unseen = replace(doctor, work=_reference().work, loss_band=BAND)
    fails = baseline_self_check(unseen, repeats)
    assert [n for n, _ in fails] == ["optimizer_steps"]
    kept = DoctorReport.from_dict(replace(unseen, baseline_fails=fails).to_dict())
    assert kept.baseline_fails == fails
    text = render_markdown(kept)
    assert "## Rows the baseline fails itself" in text and "- `optimizer_steps`: trial 1: 0 optimizer steps" in text
    ctx = SimpleNamespace(contract=SimpleNamespace(timing=Timing(warmup_steps=2, measured_steps=6)))
    reference = References(ctx=ctx, run_id="r", doctor=kept).baseline()  # type: ignore[arg-type]
    assert reference.baseline_fails == fails


def test_a_row_a_verification_baseline_run_fails_too_is_excused_from_then_on() -> None:
    # the doctor's repeats all stepped their optimizer; verification's own baseline run shows the job sometimes
    # does not (as an unseeded job's first step sometimes leaves the doctor's tolerance): the candidate's same
    # break is excused, its other rows still convict, and a candidate at another split is left to its own reference
    cand = trial(11, 0.6, cand=PATCHED, loss=LOSS, witness=UNSEEN)
    honest = report()
    ordinary = Reference(work=WorkReference(reports=(honest, honest), first_loss=(5.0, 5.0),
                                            allowed_dtypes=("float32",)), band=BAND)
    broken = [c for c in trial_invariants(cand, ordinary) if c.broken]
    assert [c.name for c in broken] == ["optimizer_steps"]
    steady = [trial(10, 1.0, cand=BASE, loss=LOSS)]
    assert excuse_from_baselines(broken, steady, ordinary) is ordinary
    wayward = [*steady, trial(12, 1.0, cand=BASE, loss=LOSS, witness=UNSEEN)]
    excusing = excuse_from_baselines(broken, wayward, ordinary)
    assert [n for n, _ in excusing.baseline_fails] == ["optimizer_steps"]
    assert not [c for c in trial_invariants(cand, excusing) if c.broken]
    split = replace(ordinary, split=(("micro_batch", 4),))
    assert excuse_from_baselines(broken, wayward, split) is split
