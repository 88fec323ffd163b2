"""A candidate that splits the global batch otherwise is held to the baseline run at its own split
(bot/stages/run/references.py), at the same strict tolerances as any candidate: nothing the doctor measured
under another split widens them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from infrarsi.contract.load import parse_contract
from infrarsi.contract.precision import PrecisionPolicy
from infrarsi.invariants import DTYPE_MARGIN, SPLIT, DtypeDeviation, WorkReference, tolerance
from infrarsi.loss_band import calibrate_band
from infrarsi.trial_record import Candidate
from infrarsi.verdict import VerdictKind, judge
from bot.stages.run.references import candidate_split, split_knobs, split_reference
from tests.support.witnessed import report, trial

LOSS = (5.0, 4.8, 4.6, 4.5, 4.4, 4.3)


TIMING = SimpleNamespace(warmup_steps=1, measured_steps=6, steps_per_line=1)

def _contract(tmp_path: Path, knobs: dict, constraints: list) -> object:
    (tmp_path / "train.py").write_text("")
    data = {"workload": {"command": "python train.py", "tokens_per_step": 128}, "knobs": knobs,
            "constraints": constraints}
    return parse_contract(data, source=tmp_path / "infrarsi.toml", root=tmp_path)


def test_the_knobs_that_split_the_global_batch_are_found_however_the_contract_couples_them(tmp_path: Path) -> None:
    values = [1, 2, 4, 8]
    pair = _contract(tmp_path, {"mb": {"flag": "--mb", "kind": "int", "values": values, "default": 4},
                                "acc": {"flag": "--acc", "kind": "int", "values": values, "default": 2},
                                "lr_warm": {"flag": "--w", "kind": "int", "values": values, "default": 1}},
                     [{"kind": "product", "knobs": ["mb", "acc"], "value": 8}])
    assert split_knobs(pair) == ("acc", "mb")
    assert candidate_split(pair, Candidate.of({"mb": 8, "acc": 1, "lr_warm": 2})) == {"mb": 8, "acc": 1}
    assert candidate_split(pair, Candidate.of({"mb": 4, "acc": 2, "lr_warm": 2})) == {}
    single = _contract(tmp_path, {"micro_batch": {"flag": "--micro-batch", "kind": "int", "values": values,
                                                  "default": 2}}, [])
    assert split_knobs(single) == ("micro_batch",)  # named as a micro-batch: tinygpt's knob
    divides = _contract(tmp_path, {"bs": {"flag": "--bs", "kind": "int", "values": values, "default": 2}},
                        [{"kind": "divides", "knob": "bs", "value": 8}])
    assert split_knobs(divides) == ("bs",)


def _doctor(band):  # noqa: ANN001, ANN202
    base = report()
    split_dev = DtypeDeviation(dtype=SPLIT, first_loss=0.5, grad=1.25, update=1.25)  # an old doctor's re-split
    work = WorkReference(reports=(base, base), first_loss=(5.0, 5.0), allowed_dtypes=("float32",),
                         deviations=(split_dev,))
    return SimpleNamespace(work=work, loss_band=band, baseline_fails=())


def test_an_old_doctors_resplit_deviation_widens_nothing() -> None:
    work = _doctor(None).work
    assert tolerance(work, "float32", "grad") == 5e-4 and tolerance(work, "float32", "update") == 5e-2
    assert DTYPE_MARGIN * 1.25 > 1  # what it would have allowed: a doubled learning rate


def test_a_resplit_is_held_to_the_baseline_at_its_split_strictly(tmp_path: Path) -> None:
    contract = SimpleNamespace(loss=SimpleNamespace(rtol=0.02, final_rtol=0.01), knobs=(), constraints=(), timing=TIMING,
                               precision=PrecisionPolicy())
    band = calibrate_band([LOSS, LOSS], rtol=0.02, final_rtol=0.01)
    doctor = _doctor(band)
    # at micro_batch 4 dropout draws other masks: the step-1 gradients moved 6%, the printed loss 1.3%
    at_split = report(grad_norms=(1.06, 0.47, 0.0105), update_proj=(0.204, -0.098, 0.051))
    split_loss = tuple(v * 1.013 for v in LOSS)
    cand = Candidate.of({"micro_batch": 4})
    runs = [trial(n, 1.0, cand=cand, loss=split_loss, witness=at_split, first_loss=5.065) for n in (11, 12)]
    reference, row = split_reference(runs, doctor=doctor, contract=contract, split={"micro_batch": 4},
                                     text="micro_batch=4")
    assert row.ok, row.detail
    assert reference.split == (("micro_batch", 4),) and reference.work.deviations == doctor.work.deviations
    base = [trial(n, 1.0, cand=Candidate(), loss=LOSS) for n in (1, 3, 5, 7)]

    honest = [trial(n, 0.6, cand=cand, loss=split_loss, witness=at_split, first_loss=5.065) for n in (2, 4, 6, 8)]
    v = judge(base, honest, reference=reference, extra=(row,))
    assert v.kind is VerdictKind.PROMOTED, v.reason

    doubled_lr = report(grad_norms=at_split.grad_norms, update_proj=(0.408, -0.196, 0.102))
    cheat = [trial(n, 0.6, cand=cand, loss=split_loss, witness=doubled_lr, first_loss=5.065) for n in (2, 4)]
    v = judge(base, cheat, reference=reference, extra=(row,))
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("weights:"), v.reason


def test_a_split_knob_that_changes_the_job_is_caught_on_the_split_baseline(tmp_path: Path) -> None:
    contract = SimpleNamespace(loss=SimpleNamespace(rtol=0.02, final_rtol=0.01), knobs=(), constraints=(), timing=TIMING,
                               precision=PrecisionPolicy())
    doctor = _doctor(calibrate_band([LOSS, LOSS], rtol=0.02, final_rtol=0.01))
    half = report(flops=500_000_000, flops_by_op=(("aten.mm", 500_000_000),))
    runs = [trial(n, 1.0, cand=Candidate.of({"micro_batch": 4}), loss=LOSS, witness=half) for n in (11, 12)]
    reference, row = split_reference(runs, doctor=doctor, contract=contract, split={"micro_batch": 4},
                                     text="micro_batch=4")
    assert row.broken and "is not the same job as at the defaults" in row.detail and "less work" in row.detail
    base = [trial(n, 1.0, cand=Candidate(), loss=LOSS) for n in (1, 3)]
    v = judge(base, runs, reference=reference, extra=(row,))
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("split_reference:")


def test_a_split_baseline_that_did_not_run_leaves_the_candidate_unverified() -> None:
    contract = SimpleNamespace(loss=SimpleNamespace(rtol=0.02, final_rtol=0.01), knobs=(), constraints=(), timing=TIMING,
                               precision=PrecisionPolicy())
    doctor = _doctor(None)
    from infrarsi.trial_record import Outcome

    oom = [trial(11, 1.0, cand=Candidate.of({"micro_batch": 16}), loss=LOSS, outcome=Outcome.OOM,
                 reason="peak memory reached the limit")]
    reference, row = split_reference(oom, doctor=doctor, contract=contract, split={"micro_batch": 16},
                                     text="micro_batch=16")
    assert not row.checked and "did not run witnessed" in row.detail and reference.work is None
    base = [trial(n, 1.0, cand=Candidate(), loss=LOSS) for n in (1, 3, 5, 7)]
    cand = [trial(n, 0.6, cand=Candidate.of({"micro_batch": 16}), loss=LOSS) for n in (2, 4, 6, 8)]
    v = judge(base, cand, reference=reference, extra=(row,))
    assert v.kind is VerdictKind.UNVERIFIED and "split_reference" in v.reason
