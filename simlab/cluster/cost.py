"""Step time, memory and outcome of every configuration, vectorised over numpy columns.

Step time (per optimizer step, the slowest rank)::

    t_step = t_mb · (m + (pp - 1)/vpp)           pipeline with its bubble (Narayanan et al. 2021, §2.2)
           + m · exposed ZeRO-2/3 collectives per micro-batch
           + exposed once-per-step data-parallel collectives
           + optimizer update (memory-bound Adam)

    t_mb   = L/pp · (layer fwd + bwd + recomputation + exposed TP comm + EP all-to-all)
           + output head + cross-entropy + 2·vpp pipeline sends

m = global_batch / (dp · micro_batch) micro-batches per step. Communication
costs come from :mod:`simlab.cluster.comm`; overlapped communication is hidden
up to the compute it runs under (Megatron-LM overlap_grad_reduce /
overlap_param_gather / tp_comm_overlap), except for the last bucket.
Outcomes: ``crash`` (first failing rule of :mod:`simlab.cluster.rules`), else
``oom`` when the peak exceeds the usable HBM, else ``ok``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simlab.cluster import comm
from simlab.cluster.compute import head_time, layer_time, routing_imbalance
from simlab.cluster.hardware import Cluster
from simlab.cluster.memory import MiB, Memory, memory, stage_params
from simlab.cluster.rules import crash_codes, derive
from simlab.cluster.space import Columns
from simlab.cluster.workloads import Workload

OK, OOM, CRASH = 0, 1, 2
OUTCOMES: tuple[str, ...] = ("ok", "oom", "crash")
#: HBM bytes per locally updated parameter of a fused Adam step: fp32 master, m, v read and written,
#: bf16 gradient read, bf16 parameter written.
ADAM_BYTES = 28.0
#: Share of overlapped TP communication that stays exposed (imperfect pipelining of chunks; assumed).
TP_OVERLAP_RESIDUAL = 0.1
#: Compute slow-down per second of hidden communication: NCCL kernels take SMs and HBM bandwidth (assumed).
OVERLAP_SLOWDOWN = 0.15


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """Noiseless figures for a batch of configurations (arrays of equal length)."""

    outcome: np.ndarray      # OK / OOM / CRASH
    crash_code: np.ndarray   # 1-based index into rules.RULES, 0 where it does not crash
    step_time_s: np.ndarray  # meaningful where outcome == OK
    mfu: np.ndarray          # model FLOPs utilisation, meaningful where outcome == OK
    memory: Memory
    dp: np.ndarray
    microbatches: np.ndarray


def evaluate(cols: Columns, w: Workload, c: Cluster) -> Evaluation:
    d = derive(cols, w, c)
    crash = crash_codes(cols, d, w, c)
    mem = memory(cols, d, w, c)
    step = step_time(cols, w, c).total
    outcome = np.where(crash > 0, CRASH, np.where(mem.total > c.usable_hbm_bytes, OOM, OK))
    mfu = w.model_flops_per_step / (step * c.world_size * c.peak_flops)
    return Evaluation(outcome=outcome, crash_code=crash, step_time_s=step, mfu=mfu, memory=mem,
                      dp=d.dp, microbatches=d.m)


@dataclass(frozen=True, kw_only=True, slots=True)
class StepTime:
    """Where the seconds of one step go on the slowest rank (arrays; they add up to ``total``)."""

    compute: np.ndarray    # m micro-batches of layers, head and recomputation
    bubble: np.ndarray     # (pp - 1)/vpp idle micro-batch slots
    tp_comm: np.ndarray    # exposed tensor-parallel collectives (inside the pipeline, bubble excluded)
    ep_comm: np.ndarray    # expert-parallel all-to-alls
    pp_comm: np.ndarray    # pipeline sends
    dp_comm: np.ndarray    # exposed data-parallel / ZeRO collectives
    contention: np.ndarray  # compute slowed down by the communication it hides
    optimizer: np.ndarray
    total: np.ndarray


def step_time(cols: Columns, w: Workload, c: Cluster) -> StepTime:
    d = derive(cols, w, c)
    tp, pp, ep, vpp, zero = cols["tp"], cols["pp"], cols["ep"], cols["vpp"], cols["zero"]
    recompute = cols["recompute"]
    tokens = w.seq_len * cols["micro_batch"].astype(float)
    layers = w.layers / pp
    act_bytes = 2.0 * tokens * w.hidden  # one bf16 activation tensor of the micro-batch

    # --- one layer: compute, recomputation, TP and EP communication ---------
    lt = layer_time(cols, w, c)
    full = recompute == 2
    recompute_t = np.where(full, lt.fwd, np.where(recompute == 1, lt.attn_fwd, 0.0))
    tp_bw, tp_alpha = comm.group_link(c, tp, 1)
    tp_calls = 4.0 + np.where(full, 2.0, 0.0)  # 2 fwd + 2 bwd (+2 re-run forward) all-reduce equivalents
    tp_comm = tp_calls * comm.all_reduce(act_bytes, tp, tp_bw, tp_alpha)
    tp_overlap = cols["tp_comm_overlap"] & (tp > 1)
    tp_exposed = np.where(tp_overlap, np.maximum(tp_comm - lt.gemm, 0.0) + TP_OVERLAP_RESIDUAL * tp_comm,
                          tp_comm)
    tp_hidden = tp_comm - tp_exposed
    if w.is_moe:
        a2a_bytes = act_bytes * w.top_k * routing_imbalance(ep) / tp
        a2a_calls = 4.0 + np.where(full, 2.0, 0.0)
        a2a = (w.moe_layers / w.layers) * a2a_calls * comm.all_to_all(c, a2a_bytes, ep, tp)
    else:
        a2a = np.zeros(1)

    # --- one micro-batch on the slowest (last) stage --------------------------
    head_f, head_b = head_time(cols, w, c)
    inter_node_pp = c.world_size > c.gpus_per_node
    p2p = np.where(pp > 1, 2.0 * vpp * comm.point_to_point(c, act_bytes / tp, inter_node_pp), 0.0)
    compute_mb = layers * (lt.fwd + lt.bwd + recompute_t) + head_f + head_b
    t_mb = compute_mb + layers * (tp_exposed + a2a) + p2p
    fwd_mb = layers * lt.fwd + head_f
    bwd_mb = layers * lt.bwd + head_b
    slots = d.m + (pp - 1) / vpp  # micro-batch slots, bubble included

    # --- data-parallel / ZeRO collectives ------------------------------------
    dense, expert, _, _ = stage_params(cols, w)
    bucket = cols["bucket_mb"] * MiB
    dp = d.dp.astype(float)
    dp_e = np.maximum(dp / ep, 1.0)
    bw_d, a_d = comm.group_link(c, dp, tp)
    bw_e, a_e = comm.group_link(c, dp_e, tp * ep)
    g_d, g_e = 2.0 * dense, 2.0 * expert  # bf16 gradients == bf16 parameters, bytes
    nb_d, nb_e = np.ceil(g_d / bucket), np.maximum(np.ceil(g_e / bucket), 1.0)

    def ar(scale: np.ndarray | float = 1.0) -> np.ndarray:
        return comm.all_reduce(g_d * scale, dp, bw_d, a_d, nb_d * scale) + \
            comm.all_reduce(g_e * scale, dp_e, bw_e, a_e, nb_e * scale)

    def rs(scale: np.ndarray | float = 1.0) -> np.ndarray:
        """Reduce-scatter of the gradients; an all-gather of the parameters costs the same."""
        return comm.gather_or_scatter(g_d * scale, dp, bw_d, a_d, nb_d * scale) + \
            comm.gather_or_scatter(g_e * scale, dp_e, bw_e, a_e, nb_e * scale)

    one_bucket = np.minimum(bucket, g_d) / np.maximum(g_d, 1.0)  # share of the gradients in one bucket
    ogr, opg = cols["overlap_grad_reduce"], cols["overlap_param_gather"]
    z01, z12 = zero <= 1, (zero == 1) | (zero == 2)

    # once per step: ZeRO-0 all-reduce or ZeRO-1 reduce-scatter (hidden behind the last backward),
    # ZeRO-1/2 parameter all-gather (hidden behind the next forward)
    grad_once = np.where(z01, np.where(zero == 0, ar(), rs()), 0.0)
    grad_tail = np.where(zero == 0, ar(one_bucket), rs(one_bucket))
    grad_once_exp = np.where(z01, np.where(ogr, np.maximum(grad_once - bwd_mb, 0.0) + grad_tail, grad_once), 0.0)
    gather_once = np.where(z12, rs(), 0.0)
    gather_once_exp = np.where(z12, np.where(opg, np.maximum(gather_once - fwd_mb, 0.0) + rs(one_bucket),
                                             gather_once), 0.0)

    # per micro-batch: ZeRO-2 reduce-scatter; ZeRO-3 all-gather (fwd), all-gather + reduce-scatter (bwd)
    rs_mb = rs()
    ag_mb = (comm.gather_or_scatter(g_d, dp, bw_d, a_d, layers)
             + comm.gather_or_scatter(g_e, dp_e, bw_e, a_e, layers))  # one all-gather per layer
    ag_first_layer = ag_mb / layers
    z2_exp = np.where(ogr, np.maximum(rs_mb - bwd_mb, 0.0) + rs(one_bucket), rs_mb)
    z3_fwd_exp = np.where(opg, np.maximum(ag_mb - fwd_mb, 0.0) + ag_first_layer, ag_mb)
    hidden_bwd = np.where(opg, ag_mb, 0.0) + np.where(ogr, rs_mb, 0.0)
    z3_bwd_exp = (np.where(opg, 0.0, ag_mb) + np.where(ogr, 0.0, rs_mb)
                  + np.maximum(hidden_bwd - bwd_mb, 0.0) + np.where(ogr, rs(one_bucket), 0.0))
    per_mb_comm = np.where(zero == 2, rs_mb, np.where(zero == 3, 2.0 * ag_mb + rs_mb, 0.0))
    per_mb_exp = np.where(zero == 2, z2_exp, np.where(zero == 3, z3_fwd_exp + z3_bwd_exp, 0.0))
    dp_total = d.m * per_mb_comm + grad_once + gather_once
    dp_exposed = d.m * per_mb_exp + grad_once_exp + gather_once_exp
    dp_hidden = np.maximum(dp_total - dp_exposed, 0.0)

    # --- optimizer update on the local shard -----------------------------------
    shard_d = np.where(zero >= 1, dp, 1.0)
    shard_e = np.where(zero >= 1, dp_e, 1.0)
    optimizer = (dense / shard_d + expert / shard_e) * ADAM_BYTES / (c.hbm_bw * c.hbm_eff)

    contention = OVERLAP_SLOWDOWN * (dp_hidden + d.m * layers * tp_hidden)
    parts = dict(
        compute=d.m * compute_mb,
        bubble=(pp - 1) / vpp * t_mb,
        tp_comm=d.m * layers * tp_exposed,
        ep_comm=d.m * layers * a2a,
        pp_comm=d.m * p2p,
        dp_comm=dp_exposed,
        contention=contention,
        optimizer=optimizer,
    )
    total = slots * t_mb + dp_exposed + contention + optimizer
    return StepTime(**parts, total=total)
