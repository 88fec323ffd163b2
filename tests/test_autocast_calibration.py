"""With bf16 in ``[precision] allow`` and no dtype flag, the doctor measures a bf16 baseline run under the catalog's
autocast patch; where the device emulates bf16, or no autocast patch applies, it says so instead."""

from __future__ import annotations

from pathlib import Path

from bot.stages.doctor.autocast_calibration import autocast_patch, policy_runs
from bot.stages.run.candidate import TrialContext
from infrarsi.patches import Effect, PatchSpec
from infrarsi.contract import load_contract
from tests.support.contracts import BASE, write_contract

EFFECT = Effect(time_ratio=0.6, time_sigma=0.2, mem_ratio=1.0, mem_sigma=0.1, source="test")
NO_DTYPE_FLAG = BASE.replace('values = ["fp32", "bf16"]', 'values = ["fp32"]')


def _spec(pid: str) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="", targets=("model.py::GPT.forward",), effect=EFFECT,
                     kind="codemod", codemod=pid, decides=("compute_dtype",))


def _ctx(root: Path, patches: dict[str, PatchSpec]) -> TrialContext:
    write_contract(root)
    (root / "infrarsi.toml").write_text(NO_DTYPE_FLAG + '\n[precision]\nallow = ["float32", "bfloat16"]\n')
    contract = load_contract(root)
    return TrialContext(contract=contract, lock=None, repo=root, executor=None, journal=None,  # type: ignore[arg-type]
                        patches=patches)


def test_the_training_loops_autocast_is_preferred_to_the_models() -> None:
    both = {p: _spec(p) for p in ("autocast_forward_bf16", "autocast_bf16")}
    assert autocast_patch(both, "bfloat16").id == "autocast_bf16"  # type: ignore[union-attr]
    assert autocast_patch({"autocast_forward_bf16": both["autocast_forward_bf16"]}, "bfloat16").id \
        == "autocast_forward_bf16"  # type: ignore[union-attr]
    assert autocast_patch({}, "bfloat16") is None


def test_an_emulated_dtype_is_not_calibrated_and_the_note_says_why(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"autocast_bf16": _spec("autocast_bf16")})
    [run] = policy_runs(ctx, run_id="r", peaks={"fp32": 100e9, "bf16": 7e9})
    assert run.record is None and run.dtype == "bfloat16" and "emulates it" in run.note


def test_without_an_applicable_autocast_patch_the_note_says_what_bf16_candidates_are_held_to(tmp_path: Path) -> None:
    [run] = policy_runs(_ctx(tmp_path, {}), run_id="r", peaks={"fp32": 100e9, "bf16": 400e9})
    assert run.record is None and "no catalog autocast patch applies" in run.note


def test_a_dtype_knob_that_offers_bf16_needs_no_policy_run(tmp_path: Path) -> None:
    contract = write_contract(tmp_path, '\n[precision]\nallow = ["float32", "bfloat16"]\n')  # BASE's knob has bf16
    ctx = TrialContext(contract=contract, lock=None, repo=tmp_path, executor=None, journal=None,  # type: ignore[arg-type]
                       patches={"autocast_bf16": _spec("autocast_bf16")})
    assert policy_runs(ctx, run_id="r") == []
