"""Time model of the simulator: alpha-beta collectives, GEMM efficiency, pipeline bubble, overlap."""

from __future__ import annotations

import numpy as np
import pytest

from simlab.cluster import SimulatedJob, cluster, space_for, workload
from simlab.cluster import comm
from simlab.cluster.compute import _gemm
from simlab.cluster.cost import step_time

H1, H4 = cluster("h100-1x8"), cluster("h100-4x8")


def test_ring_collectives_alpha_beta():
    n, bw, alpha = 1e9, 100e9, 5e-6
    assert comm.all_reduce(n, 4, bw, alpha) == pytest.approx(2 * 3 / 4 * n / bw + 2 * 3 * alpha)
    assert comm.gather_or_scatter(n, 4, bw, alpha) == pytest.approx(3 / 4 * n / bw + 3 * alpha)
    assert comm.all_reduce(n, 1, bw, alpha) == 0.0
    assert comm.all_reduce(n, 8, bw, alpha, calls=10) == pytest.approx(2 * 7 / 8 * n / bw + 2 * 7 * alpha * 10)


def test_group_links_follow_the_rank_layout():
    bw, alpha = comm.group_link(H4, 8, 1)         # tp = 8: one node, NVLink
    assert bw == pytest.approx(H4.intra_bw * H4.coll_eff) and alpha == H4.intra_latency_s
    bw, _ = comm.group_link(H4, 4, 8)             # dp = 4 across nodes, one GPU per node: one NIC
    assert bw == pytest.approx(H4.inter_bw * H4.coll_eff)
    bw, alpha = comm.group_link(H4, 32, 1)        # dp = 32: 8 rings, one per NIC, capped by NVLink
    assert bw == pytest.approx(min(H4.intra_bw, 8 * H4.inter_bw) * H4.coll_eff)
    assert alpha == H4.inter_latency_s
    bw, _ = comm.group_link(H4, 16, 2)            # dp = 16 with tp = 2: 4 members per node
    assert bw == pytest.approx(4 * H4.inter_bw * H4.coll_eff)


def test_gemm_efficiency_rises_with_size_and_saturates():
    sizes = [2 ** k for k in range(8, 15)]
    effs = []
    for d in sizes:
        f, b = 2.0 * d ** 3, 2.0 * 3 * d * d
        t = _gemm(H1, f, b, 1.0, d)
        effs.append(f / (t * H1.peak_flops))
    assert all(a < b for a, b in zip(effs, effs[1:]))
    assert effs[-1] < H1.gemm_eff and effs[-1] > 0.95 * H1.gemm_eff
    assert effs[0] < 0.5 * H1.gemm_eff


def test_tensor_parallel_shrinks_gemms_and_costs_efficiency():
    job = SimulatedJob("llama2-7b", "h100-1x8")
    base = dict(job.space.default(), zero=1, recompute="none", flash_attention=True, sequence_parallel=True)
    compute = [job.breakdown(dict(base, tp=tp))["time_compute_s"] for tp in (1, 2, 4, 8)]
    # the same FLOPs per step and GPU, spread over smaller GEMMs: each doubling of tp costs compute time
    assert all(a < b for a, b in zip(compute, compute[1:]))


def test_pipeline_bubble_is_pp_minus_1_over_vpp_m():
    w, c = workload("llama2-70b"), H4
    space = space_for(w, c)
    for pp, vpp, mb in [(4, 1, 1), (4, 2, 1), (2, 2, 2), (2, 1, 4)]:
        config = dict(space.default(), tp=8, pp=pp, vpp=vpp, micro_batch=mb, zero=1)
        st = step_time(space.columns_of(config), w, c)
        dp = c.world_size // (8 * pp)
        m = w.global_batch // (dp * mb)
        busy = st.compute + st.tp_comm + st.ep_comm + st.pp_comm
        assert float(st.bubble[0] / busy[0]) == pytest.approx((pp - 1) / (vpp * m))


def test_step_parts_add_up():
    job = SimulatedJob("mixtral-8x7b", "h100-4x8")
    for config in (job.space.default(), job.ground_truth().config):
        parts = job.breakdown(config)
        total = sum(v for k, v in parts.items() if k.startswith("time_") and k != "time_total_s")
        assert total == pytest.approx(parts["time_total_s"])
        assert parts["time_total_s"] == pytest.approx(job.expected(config).step_time_s)


def test_overlap_hides_gradient_reduction_across_nodes():
    job = SimulatedJob("llama2-7b", "h100-4x8")
    base = dict(job.space.default(), zero=1, recompute="selective", flash_attention=True, micro_batch=1)
    plain = job.breakdown(base)
    overlapped = job.breakdown(dict(base, overlap_grad_reduce=True, overlap_param_gather=True))
    assert overlapped["time_dp_comm_s"] < 0.5 * plain["time_dp_comm_s"]
    assert job.expected(dict(base, overlap_grad_reduce=True)).step_time_s < job.expected(base).step_time_s


def test_zero3_communicates_every_micro_batch():
    job = SimulatedJob("llama2-7b", "h100-4x8")
    base = dict(job.space.default(), recompute="selective", flash_attention=True)
    comm_by_mb = {mb: job.breakdown(dict(base, micro_batch=mb))["time_dp_comm_s"] for mb in (1, 2, 4)}
    assert comm_by_mb[1] > comm_by_mb[2] > comm_by_mb[4]  # fewer micro-batches, fewer all-gathers


def test_code_patches_help_where_they_should():
    ds = SimulatedJob("deepseek-moe-16b", "h100-1x8")
    best = ds.ground_truth().config
    slower = ds.expected(dict(best, grouped_gemm=False)).step_time_s
    assert slower > 1.05 * ds.ground_truth().step_time_s  # 64 small experts: the loop costs
    mx = SimulatedJob("mixtral-8x7b", "h100-4x8")
    mbest = mx.ground_truth().config
    assert mx.expected(dict(mbest, grouped_gemm=False)).step_time_s < 1.05 * mx.ground_truth().step_time_s
    dense = SimulatedJob("llama2-7b", "h100-1x8")
    base = dict(dense.space.default(), zero=1, recompute="full")
    for patch in ("fused_cross_entropy", "fused_norm", "flash_attention"):
        on, off = dense.expected(dict(base, **{patch: True})), dense.expected(base)
        assert on.step_time_s < off.step_time_s and on.peak_mem_bytes <= off.peak_mem_bytes


def test_mfu_never_exceeds_the_gemm_ceiling():
    for name, cl in (("llama2-7b", "a100-2x8"), ("mixtral-8x7b", "h100-4x8")):
        job = SimulatedJob(name, cl)
        outcome, step = job.landscape()
        mfu = job.workload.model_flops_per_step / (step[outcome == 0] * job.cluster.world_size
                                                   * job.cluster.peak_flops)
        assert np.all(mfu > 0) and mfu.max() < job.cluster.gemm_eff
