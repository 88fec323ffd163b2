"""The dropout and MoE rows: what the witness saw of dropout sites and expert routing, held to the baseline's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infrarsi.invariants import WorkReference, work_invariants
from infrarsi.lever_rows import (dropout_check, lever_checks, mask_mismatch, moe_check, moe_expected_flops,
                                 routing_deviation)
from infrarsi.loss_band import calibrate_band
from infrarsi.trial_record import Candidate
from infrarsi.verdict import Reference, VerdictKind, judge, trial_invariants
from tests.support.witnessed import report, trial

ATTN = (0.2, (4, 16, 16), 4096, "keyed")
RESID = (0.2, (16, 64), 8192, "keyed")
DROPOUT = (ATTN, RESID)


def _layer(dropped: int, aux: tuple[float, ...] = (0.001, 0.01), assigned: int = 2048,
           capacity: tuple[int, ...] | None = None) -> dict:
    processed = [(assigned - dropped) // 8] * 8
    processed[0] += assigned - dropped - sum(processed)
    return {"layer": "MoELayer", "experts": 8, "tokens": assigned // 2, "assigned": assigned,
            "processed": processed, "dropped": dropped, "aux": [[w, 3.0, 4, 4] for w in aux],
            "capacity": list(capacity if capacity is not None else ((320,) if dropped else ()))}


def test_dropout_as_the_baseline_is_ok_and_a_probability_set_to_zero_is_named() -> None:
    base = report(dropout=DROPOUT)
    ok = dropout_check(report(dropout=DROPOUT), base, "trial 3")
    assert ok is not None and ok.ok and "p=0.2 on (4, 16, 16)" in ok.detail and "keyed" in ok.detail
    no_attn = dropout_check(report(dropout=(RESID,)), base, "trial 4")
    assert no_attn is not None and not no_attn.ok
    assert "dropout p=0.2 on (4, 16, 16): 0 elements here, 4,096 in the baseline's counted step" in no_attn.detail
    moved = dropout_check(report(dropout=(ATTN, (0.1, (16, 64), 8192, "keyed"))), base, "trial 5")
    assert moved is not None and not moved.ok and "p=0.1 on (16, 64)" in moved.detail


def test_a_job_without_dropout_gets_no_row_and_an_old_baseline_report_none_either() -> None:
    assert dropout_check(report(dropout=()), report(dropout=()), "t") is None
    assert dropout_check(report(dropout=DROPOUT), report(), "t") is None  # a baseline read before dropout was
    assert lever_checks(report(), [report()], dtype="float32", trial="t") == []


def test_masks_drawn_by_a_fused_kernel_against_keyed_ones_make_the_numeric_rows_not_checked() -> None:
    kernel = report(dropout=((0.2, (4, 16, 16), 4096, "kernel"), RESID))
    base = report(dropout=DROPOUT)
    assert mask_mismatch(kernel, base) is not None and mask_mismatch(base, base) is None
    band = calibrate_band([(5.0, 4.9)] * 2, rtol=0.02, final_rtol=0.01)
    work = WorkReference(reports=(base, base), first_loss=(5.0, 5.0), allowed_dtypes=("float32",))
    rows = trial_invariants(trial(7, 0.5, cand=Candidate(), loss=(5.0, 4.9), witness=kernel),
                            Reference(work=work, band=band))
    by_name = {r.name: r for r in rows}
    assert by_name["dropout"].ok  # the same sites: the same model
    for name in ("first_step", "weights"):
        assert not by_name[name].checked and "fused attention kernel" in by_name[name].detail


def test_moe_routing_as_the_baseline_is_ok_whatever_the_step_drops() -> None:
    """Which assignments overflow depends on the step's weights: 136 dropped at one step, 300 at another, the
    same capacity."""
    reports = [report(moe=(_layer(130),)), report(moe=(_layer(140),))]
    ok = moe_check(report(moe=(_layer(300),)), reports, dtype="float32", trial="trial 3")
    assert ok is not None and ok.ok and "capacity 320, 300 of its 2,048 token assignments dropped" in ok.detail, ok


def test_a_lowered_capacity_and_tokens_skipped_over_capacity_are_named() -> None:
    reports = [report(moe=(_layer(130),)), report(moe=(_layer(140),))]
    lowered = moe_check(report(moe=(_layer(700, capacity=(160,)),)), reports, dtype="float32", trial="trial 3")
    assert lowered is not None and not lowered.ok
    assert "MoE layer 0 (MoELayer) capped its experts at 160 assignments a forward, the baseline at 320" \
        in lowered.detail, lowered.detail
    none = [report(moe=(_layer(0),)), report(moe=(_layer(0),))]
    skipped = moe_check(report(moe=(_layer(1),)), none, dtype="float32", trial="trial 4")
    assert skipped is not None and not skipped.ok
    assert "dropped 1 of its 2,048 token assignments in optimizer step 2; the baseline dropped none" in skipped.detail


def test_an_auxiliary_loss_dropped_or_down_weighted_is_named() -> None:
    reports = [report(moe=(_layer(0),)), report(moe=(_layer(0),))]
    gone = moe_check(report(moe=(_layer(0, aux=(0.001, 0.0)),)), reports, dtype="float32", trial="t")
    assert gone is not None and not gone.ok and "auxiliary loss 2 never reached the loss" in gone.detail
    halved = moe_check(report(moe=(_layer(0, aux=(0.001, 0.005)),)), reports, dtype="float32", trial="t")
    assert halved is not None and "auxiliary loss 2 reached the loss at weight 0.005; the baseline's at weight 0.01" \
        in halved.detail
    missing = moe_check(report(moe=(_layer(0, aux=(0.001,)),)), reports, dtype="float32", trial="t")
    assert missing is not None and "1 auxiliary loss(es) left its forward, the baseline's 2" in missing.detail
    bf16 = moe_check(report(moe=(_layer(0, aux=(0.001, 0.01002)),)), reports, dtype="bfloat16", trial="t")
    assert bf16 is not None and bf16.ok, bf16


def test_the_work_of_an_moe_is_held_to_the_baselines_flops_per_processed_assignment() -> None:
    """Two baseline steps processed 1,918 and 1,908 assignments at 1.0e9 and 0.99e9 FLOPs; a candidate counted
    at a step processing 1,748 is expected at the line through them."""
    reports = [report(moe=(_layer(130),), flops=1_000_000_000), report(moe=(_layer(140),), flops=990_000_000)]
    expected = moe_expected_flops(report(moe=(_layer(300),)), reports)
    assert expected == pytest.approx(1_000_000_000 - 170 * 1_000_000)
    assert moe_expected_flops(report(moe=(_layer(300),)), reports[:1]) is None  # no second point: no line
    assert moe_expected_flops(report(), reports) is None


def test_the_doctors_routing_deviation_is_the_dropped_share_moved() -> None:
    reports = [report(moe=(_layer(130),)), report(moe=(_layer(140),))]
    assert routing_deviation(report(moe=(_layer(160),)), reports) == pytest.approx(25 / 2048)


def test_the_rows_reach_the_verdict() -> None:
    base = report(moe=(_layer(0),), dropout=DROPOUT)
    work = WorkReference(reports=(base, base), first_loss=(5.0, 5.0), allowed_dtypes=("float32",))
    rows = work_invariants(report(moe=(_layer(0, aux=(0.001, 0.0)),), dropout=(RESID,)), first_loss=5.0,
                           steps_seen=7, reference=work, trial=9)
    broken = {r.name for r in rows if r.broken}
    assert {"dropout", "moe"} <= broken
    band = calibrate_band([(5.0, 4.9)] * 2, rtol=0.02, final_rtol=0.01)
    base_runs = [trial(n, 1.0, cand=Candidate(), loss=(5.0, 4.9), witness=base) for n in (1, 3)]
    cheat = [trial(n, 0.5, cand=Candidate(), loss=(5.0, 4.9), witness=replace(base, dropout=(RESID,)))
             for n in (2, 4)]
    v = judge(base_runs, cheat, reference=Reference(work=work, band=band))
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("dropout:"), v.reason
