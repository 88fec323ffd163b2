"""A legitimate re-split of the global batch: the doctor measures what it moves, and candidates that re-split
are held to that (dropout masks follow the micro-batches), not to the fp32 step floors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from infrarsi.contract.load import parse_contract
from infrarsi.doctor import resplit_values
from infrarsi.invariants import DTYPE_MARGIN, SPLIT, DtypeDeviation, WorkReference, tolerance, work_invariants
from infrarsi.witness import WitnessReport


def _contract(tmp_path: Path, micro: int, accum: int, values=(1, 2, 4, 8)):
    (tmp_path / "train.py").write_text("")
    data = {"workload": {"command": "python train.py", "tokens_per_step": 64},
            "knobs": {"mb": {"flag": "--mb", "kind": "int", "values": list(values), "default": micro},
                      "acc": {"flag": "--acc", "kind": "int", "values": list(values), "default": accum}},
            "constraints": [{"kind": "product", "knobs": ["mb", "acc"], "value": micro * accum}]}
    return parse_contract(data, source=tmp_path / "infrarsi.toml", root=tmp_path)


def test_the_nearest_other_split_doubles_the_micro_batch_else_halves_it(tmp_path: Path) -> None:
    assert resplit_values(_contract(tmp_path, 4, 2)) == {"mb": 8, "acc": 1}
    assert resplit_values(_contract(tmp_path, 8, 1)) == {"mb": 4, "acc": 2}
    assert resplit_values(_contract(tmp_path, 1, 1, values=(1,))) == {}


def _report(grads: tuple[float, ...], update: tuple[float, ...]) -> WitnessReport:
    return WitnessReport(optimizer_steps=8, count_step=2, flops=10**9, flops_by_op=(("aten.mm", 10**9),),
                         matmul_dtypes=("float32",), counted_s=0.1, params=3, param_elements=300,
                         grad_norms=grads, weight_norms=(10.0, 5.0, 1.0), update_proj=update, tampered=(),
                         source_sha256="ab" * 32)


BASE = _report((1.0, 0.5, 0.01), (0.2, -0.1, 0.05))
SPLIT_DEV = DtypeDeviation(dtype=SPLIT, first_loss=0.01, grad=0.0625, update=0.04)
REFERENCE = WorkReference(reports=(BASE, BASE), first_loss=(4.8, 4.8), allowed_dtypes=("float32",),
                          deviations=(SPLIT_DEV, DtypeDeviation(dtype="bfloat16", first_loss=1e-3, grad=1e-3,
                                                                update=2e-2)))


def test_the_resplit_deviation_widens_only_a_resplit_candidate() -> None:
    assert tolerance(REFERENCE, "float32", "grad", split=True) == DTYPE_MARGIN * 0.0625
    assert tolerance(REFERENCE, "float32", "grad") == 5e-4  # the fp32 step floor
    assert tolerance(REFERENCE, "bfloat16", "grad") < DTYPE_MARGIN * 0.0625  # a dtype change ignores it


def _broken(report: WitnessReport, reference: WorkReference, split: bool) -> set[str]:
    return {c.name for c in work_invariants(report, first_loss=None, steps_seen=8, reference=reference,
                                            split=split) if not c.ok}


def test_a_resplit_with_dropout_passes_and_a_doubled_learning_rate_does_not() -> None:
    resplit = _report((1.06, 0.47, 0.0105), (0.204, -0.098, 0.051))  # other dropout masks: ~6% at step 1
    assert _broken(resplit, REFERENCE, split=True) == set()
    assert "first_step" in _broken(resplit, REFERENCE, split=False)
    assert "first_step" in _broken(resplit, replace(REFERENCE, deviations=()), split=True)  # not measured
    doubled_lr = replace(resplit, update_proj=(0.4, -0.2, 0.1))
    assert "weights" in _broken(doubled_lr, REFERENCE, split=True)
