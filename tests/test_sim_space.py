"""The simulator's search space and the configurations that crash."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from simlab.cluster import CLUSTERS, DEFAULT, WORKLOADS, SimulatedJob, cluster, space_for, workload
from simlab.cluster.workloads import Workload

SMALL = Workload(name="odd", layers=6, hidden=768, heads=12, kv_heads=12, ffn=3072, vocab=1000,
                 seq_len=1024, global_batch=12, gated_mlp=False, source="test")


def test_dimensions_domains_and_default():
    dense = space_for(workload("llama2-7b"), cluster("h100-1x8"))
    moe = space_for(workload("mixtral-8x7b"), cluster("h100-4x8"))
    assert "ep" not in dense.names and "grouped_gemm" not in dense.names
    assert {"ep", "grouped_gemm"} <= set(moe.names)
    assert dense.size == math.prod(len(d.values) for d in dense.dimensions)
    for space in (dense, moe):
        assert space.default() == {n: DEFAULT[n] for n in space.names}
        assert space.index_of(space.default()) >= 0
        described = space.describe()
        json.dumps(described)  # plain data a generic tuner can read
        assert [d["name"] for d in described] == list(space.names)
        assert all(d["kind"] in ("int", "bool", "categorical") for d in described)
        assert {d["role"] for d in described} == {"knob", "patch"}


def test_enumerate_is_in_index_order_and_matches_columns():
    space = space_for(workload("llama2-7b"), cluster("h100-1x8"))
    first = list(itertools.islice(space.enumerate(), 1000))
    assert first == [space.config_at(i) for i in range(1000)]
    cols = space.columns(0, 1000)
    for i in (0, 1, 17, 999):
        for name in space.names:
            value = first[i][name]
            if name == "recompute":
                value = ("none", "selective", "full").index(value)
            assert cols[name][i] == value


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_config_at_and_index_of_are_inverse(data):
    w = data.draw(st.sampled_from(WORKLOADS))
    space = space_for(w, CLUSTERS[0])
    i = data.draw(st.integers(0, space.size - 1))
    assert space.index_of(space.config_at(i)) == i


def test_malformed_config_is_rejected_not_simulated():
    job = SimulatedJob("llama2-7b", "h100-1x8")
    with pytest.raises(ValueError, match="unknown knobs"):
        job.run(dict(job.space.default(), warp_drive=True))
    with pytest.raises(ValueError, match="not in the domain"):
        job.run(dict(job.space.default(), tp=3))
    with pytest.raises(ValueError, match="missing knobs"):
        job.run({"tp": 1})
    assert job.trials == 0


@pytest.mark.parametrize(("w", "c", "knobs", "needle"), [
    ("llama2-7b", "h100-1x8", dict(tp=8, pp=2), "world size 8 is not divisible"),
    ("llama2-7b", "h100-1x8", dict(vpp=2), "virtual pipeline stages (2) need pipeline-model-parallel size > 1"),
    ("llama2-7b", "h100-1x8", dict(pp=2, zero=3), "ZeRO-2 and ZeRO-3 are incompatible with pipeline"),
    ("llama2-7b", "h100-1x8", dict(zero=0, overlap_grad_reduce=True, overlap_param_gather=True),
     "--overlap-param-gather only supported with distributed optimizer"),
    ("llama2-7b", "h100-1x8", dict(zero=1, overlap_param_gather=True),
     "Must use --overlap-param-gather with --overlap-grad-reduce"),
    ("llama2-7b", "h100-1x8", dict(tp=2, tp_comm_overlap=True),
     "can happen only when sequence parallelism is enabled"),
    ("llama2-70b", "h100-4x8", dict(tp=1, micro_batch=8), "global batch size (192) is not divisible"),
    ("llama2-70b", "h100-4x8", dict(tp=1, pp=8, vpp=4, zero=1), "number of layers (80)"),
    ("llama2-70b", "h100-4x8", dict(tp=1, pp=8, vpp=2, zero=1, micro_batch=4),
     "number of microbatches (12) is not divisible by pipeline-model-parallel size (8) when using interleaved"),
    ("mixtral-8x7b", "h100-2x8", dict(tp=8, pp=1, ep=4), "expert-parallel size (4) must divide"),
    ("deepseek-moe-16b", "h100-1x8", dict(tp=4, ep=4), "data-parallel size (2)"),
])
def test_invalid_combinations_crash_with_a_reason(w, c, knobs, needle):
    job = SimulatedJob(w, c)
    result = job.run(dict(job.space.default(), **knobs))
    assert result.outcome == "crash"
    assert needle in result.reason
    assert result.step_time_s is None and result.mfu is None and result.peak_mem_bytes == 0.0
    assert result.cost_s == job.crash_charge_s * job.cluster.world_size


def test_heads_not_divisible_by_tp_crash():
    job = SimulatedJob(SMALL, "h100-1x8")
    result = job.run(dict(job.space.default(), tp=8))
    assert result.outcome == "crash" and "attention heads (12)" in result.reason
    assert job.run(dict(job.space.default(), tp=4)).outcome != "crash"


def test_batch_not_divisible_crash_on_a_small_batch():
    job = SimulatedJob(SMALL, "h100-1x8")  # dp = 8 does not divide 12 sequences
    result = job.run(job.space.default())
    assert result.outcome == "crash" and "global batch size (12)" in result.reason
