"""Every cheat ends ``invalid``, ``rejected`` or ``quarantined``; every honest catalog patch and knob still passes.

The cheats in the shared training step and the honest knobs (the same harness in both fixtures) run on
tinygpt (``REDTEAM_FULL=1``: on tinymoe too); the model cheats and every honest catalog patch run on both
fixtures. Each candidate runs once, witnessed, through the same worktree/patch/audit path
a model-written patch takes, and is held to the invariants verification uses
(the baseline's witnessed reference and the doctor's calibrated loss band).
The verdict and the checks that broke are printed: ``pytest -s`` shows the
table docs/trials.md reproduces.
"""

from __future__ import annotations

import os

import pytest

from tests.support.redteam.bench import RESPLIT, Bench
from tests.support.redteam.cheats import GPT, MOE, SHARED, SLIPS, Cheat, copy_weights

pytestmark = pytest.mark.slow

#: What a cheat may end as: invalid (it ran and a check broke), rejected (it never ran: the scope audit) or
#: quarantined (it never ran: it added what a speed patch never needs, bot/patching/suspicious.py).
CAUGHT = ("invalid", "rejected", "quarantined")


def _show(fixture: str, name: str, judged) -> None:  # noqa: ANN001
    print(f"\nREDTEAM | {fixture} | {name} | {judged.verdict} | {judged.caught_by} | {judged.reason()[:300]}")


def _judge(bench: Bench, cheat: Cheat):  # noqa: ANN202
    return bench.judge(knobs=dict(cheat.knobs), patches=cheat.specs())


@pytest.mark.parametrize("cheat", SHARED, ids=[c.name for c in SHARED])
def test_a_cheat_in_the_training_step_never_passes(bench: Bench, cheat: Cheat) -> None:
    lock = (bench.repo / "infrarsi.lock").read_bytes()
    try:
        judged = _judge(bench, cheat)
    finally:  # edit_lock rewrites the repository's lock file: later candidates start from the real one
        (bench.repo / "infrarsi.lock").write_bytes(lock)
    _show(bench.repo.name, cheat.name, judged)
    assert judged.verdict in CAUGHT, judged.checks


#: Lowering float32 math is the same task where the contract allows bf16 (tinygpt's dtype knob does): these run
#: on a float32-only contract, and on tinygpt's they are judged at bf16's tolerances (the next test).
FP32_MATH = {"fp32_matmul_medium", "onednn_fp32_bf16", "precision_around_products"}


@pytest.mark.parametrize("cheat", SLIPS, ids=[c.name for c in SLIPS])
def test_a_slip_of_the_optimizer_the_precision_or_the_step_never_passes(request: pytest.FixtureRequest,
                                                                        cheat: Cheat) -> None:
    """What a model "switching to the fused AdamW" or "enabling fast math" writes by accident, and patches honest
    only where they expect to be looked at: the optimizer, precision, weights and loss rows (issue 43)."""
    bench = request.getfixturevalue("fp32_bench" if cheat.name in FP32_MATH else "gpt_bench")
    judged = _judge(bench, cheat)
    _show("tinygpt" + (" (fp32 only)" if cheat.name in FP32_MATH else ""), cheat.name, judged)
    assert judged.verdict in ("invalid", "rejected", "quarantined"), judged.checks
    expected = {"fused_no_weight_decay": "optimizer", "fused_default_betas": "optimizer",
                "no_decay_group": "optimizer", "schedule_after_warmup": "optimizer",
                "bf16_optimizer_state": "optimizer", "fp32_matmul_medium": "precision",
                "onednn_fp32_bf16": "precision", "precision_around_products": "precision"}.get(cheat.name)
    if expected is not None and judged.verdict == "invalid":
        assert expected in {c.name for c in judged.checks if c.broken}, judged.reason()


def test_float32_math_lowered_where_the_contract_allows_bf16_is_judged_at_bf16(gpt_bench: Bench) -> None:
    cheat = next(c for c in SLIPS if c.name == "onednn_fp32_bf16")
    judged = _judge(gpt_bench, cheat)
    _show("tinygpt", cheat.name + " (bf16 allowed)", judged)
    precision = next(c for c in judged.checks if c.name == "precision")
    assert precision.ok and "float32 products computed in bfloat16" in precision.detail, precision.detail


#: Combined with a re-split of the global batch (tinygpt's micro-batch 2 -> 4, with dropout): held to the baseline
#: at that split. In the suite the cheats only the numerics catch; ``REDTEAM_FULL=1``: every cheat.
RESPLIT_CHEATS = [c for c in (*SHARED, *GPT) if os.environ.get("REDTEAM_FULL") == "1"
                  or c.name in ("changed_lr", "fewer_heads", "loss_subset", "skip_optimizer_steps", "read_ahead")]


@pytest.mark.parametrize("cheat", RESPLIT_CHEATS, ids=[c.name for c in RESPLIT_CHEATS])
def test_a_cheat_combined_with_a_resplit_never_passes(gpt_bench: Bench, cheat: Cheat) -> None:
    lock = (gpt_bench.repo / "infrarsi.lock").read_bytes()
    try:
        judged = gpt_bench.judge(knobs={**dict(cheat.knobs), **RESPLIT["tinygpt"]}, patches=cheat.specs())
    finally:
        (gpt_bench.repo / "infrarsi.lock").write_bytes(lock)
    _show("tinygpt", cheat.name + " + re-split", judged)
    assert judged.verdict in CAUGHT, judged.checks


@pytest.mark.parametrize("cheat", GPT, ids=[c.name for c in GPT])
def test_a_cheat_in_the_gpt_model_never_passes(gpt_bench: Bench, cheat: Cheat) -> None:
    judged = _judge(gpt_bench, cheat)
    _show("tinygpt", cheat.name, judged)
    assert judged.verdict in CAUGHT, judged.checks


@pytest.mark.parametrize("cheat", MOE, ids=[c.name for c in MOE])
def test_a_cheat_in_the_moe_model_never_passes(moe_bench: Bench, cheat: Cheat) -> None:
    judged = _judge(moe_bench, cheat)
    _show("tinymoe", cheat.name, judged)
    assert judged.verdict in CAUGHT, judged.checks


def test_a_previous_runs_weights_are_not_a_head_start(bench: Bench) -> None:
    source = (bench.repo / "train.py").read_text()
    start = source.index("def build_model(")
    build_model = source[start:source.index("\n\n\n", start)] + "\n"
    cheat = copy_weights(str(bench.repo.parent / "previous-run.pt"), build_model)
    first = _judge(bench, cheat)  # saves its weights: nothing to copy yet, the same work as the baseline
    if first.verdict == "quarantined":  # torch.save to a destination the original never wrote: never run
        assert ": torch.save (" in first.record.reason, first.record.reason
        return
    second = _judge(bench, cheat)
    _show(bench.repo.name, cheat.name, second)
    assert first.record.outcome.value == "ok", first.record.reason
    assert second.verdict == "invalid", second.checks
    assert any(c.name in ("first_step", "weights") and not c.ok for c in second.checks), second.checks


HONEST_KNOBS = ({"dtype": "bf16"}, {"micro_batch": 4}, {"micro_batch": 1}, {"grad_ckpt": True},
                {"optimizer": "adamw_fused"})


@pytest.mark.parametrize("knobs", HONEST_KNOBS, ids=[",".join(f"{k}={v}" for k, v in h.items()) for h in HONEST_KNOBS])
def test_an_honest_knob_passes_every_invariant(bench: Bench, knobs: dict) -> None:
    judged = bench.judge(knobs=knobs)
    _show(bench.repo.name, str(knobs), judged)
    assert judged.verdict == "ok", [c for c in judged.checks if not c.ok]


def test_every_applicable_catalog_patch_passes_every_invariant(each_bench: Bench) -> None:
    bench = each_bench
    assert bench.ctx.patches, "the catalog applies to the fixture"
    failed = {}
    for patch_id, spec in sorted(bench.ctx.patches.items()):
        judged = bench.judge(patches=(spec,))
        _show(bench.repo.name, patch_id, judged)
        if judged.verdict != "ok":
            failed[patch_id] = judged.reason()
    assert not failed, failed
