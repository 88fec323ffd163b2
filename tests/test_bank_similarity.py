"""Similarity of fingerprints and the ranking of transfers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.bank import as_pairs, hardware_similarity, same_hardware, transfer, workload_similarity
from infrarsi.bank.records import workload_fingerprint
from tests.support.findings import A100, CPU, H100, dense, make_finding, moe


def test_identical_is_one() -> None:
    assert workload_similarity(dense(), dense()) == 1.0
    assert workload_similarity(moe(), moe()) == 1.0
    assert hardware_similarity(H100, H100) == 1.0
    assert hardware_similarity(CPU, CPU) == 1.0


def test_different_family_is_zero() -> None:
    assert workload_similarity(dense(8_000_000_000), moe(8_000_000_000)) == 0.0
    assert workload_similarity(dense(), workload_fingerprint(family=None, parameters=1_300_000_000)) == 0.0


def test_closer_parameter_counts_rank_higher() -> None:
    base = dense(1_000_000_000)
    sims = [workload_similarity(base, dense(p)) for p in
            (1_000_000_000, 1_300_000_000, 3_000_000_000, 13_000_000_000, 175_000_000_000)]
    assert sims == sorted(sims, reverse=True) and len(set(sims)) == len(sims)
    # a log scale: 2x bigger and 2x smaller are equally far
    assert workload_similarity(base, dense(2_000_000_000)) == pytest.approx(workload_similarity(base, dense(500_000_000)))


def test_device_and_gpu_model_weigh_most() -> None:
    assert hardware_similarity(H100, A100) > hardware_similarity(H100, CPU)
    other_torch = {**H100, "torch": "2.1.0", "cuda": "11.8"}
    assert hardware_similarity(H100, other_torch) > hardware_similarity(H100, A100)
    assert hardware_similarity(H100, CPU) < 0.5
    assert same_hardware(H100, {**H100, "torch": "2.5.0"}) and not same_hardware(H100, A100)


def test_transfer_ranks_by_similarity_times_effect() -> None:
    near_small = make_finding(1, workload=dense(1_300_000_000), knobs={"a": 1}, time_ratio=0.95)
    near_big = make_finding(2, workload=dense(1_300_000_000), knobs={"b": 1}, time_ratio=0.7)
    far_big = make_finding(3, workload=dense(100_000_000_000), knobs={"c": 1}, time_ratio=0.7)
    got = transfer([near_small, far_big, near_big], H100, dense(1_300_000_000), top=3)
    assert [t.candidate for t in got] == [near_big.candidate, far_big.candidate, near_small.candidate]
    assert as_pairs(got)[0] == (near_big.candidate, 1.0)


def test_other_hardware_is_a_discounted_prior() -> None:
    f = make_finding(1, hardware=A100)
    (t,) = transfer([f], H100, dense())
    assert not t.same_hardware
    assert t.weight <= 0.5 * hardware_similarity(A100, H100)


def test_same_candidate_keeps_its_best_support() -> None:
    a = make_finding(1, knobs={"a": 1}, time_ratio=0.9, run_id="r1")
    b = make_finding(1, knobs={"a": 1}, time_ratio=0.8, run_id="r2")
    (t,) = transfer([a, b], H100, dense())
    assert t.time_ratio == 0.8 and t.finding_ids == (b.id, a.id)


def test_baseline_never_transfers() -> None:
    assert transfer([make_finding(1, knobs={})], H100, dense()) == []


sizes = st.one_of(st.none(), st.integers(min_value=1, max_value=10**12))


@settings(max_examples=60, deadline=None)
@given(p1=sizes, p2=sizes, s1=sizes, s2=sizes, b1=sizes, b2=sizes, fam=st.sampled_from(["dense", "moe"]))
def test_workload_similarity_is_bounded_and_symmetric(p1, p2, s1, s2, b1, b2, fam) -> None:
    a = workload_fingerprint(family=fam, parameters=p1, sequence_length=s1, global_batch=b1)
    b = workload_fingerprint(family=fam, parameters=p2, sequence_length=s2, global_batch=b2)
    s = workload_similarity(a, b)
    assert 0.0 <= s <= 1.0 and s == workload_similarity(b, a)
    assert workload_similarity(a, a) == 1.0
