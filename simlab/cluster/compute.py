"""Compute time of one average transformer layer and of the output head, per GPU and micro-batch.

GEMMs: a roofline (Williams, Waterman & Patterson 2009) whose compute roof is
a saturating efficiency curve::

    s(d)    = d / (d + d_half)
    t(GEMM) = max((F / s(d) + F_half) / (peak · gemm_eff), bytes / (hbm_bw · hbm_eff)) + t0

i.e. the achieved efficiency gemm_eff · F / (F/s(d) + F_half) rises with the
GEMM's FLOPs F and its smallest dimension d, and saturates at ``gemm_eff``:
GEMMs shrunk by tensor parallelism, small micro-batches and fine-grained
experts run further below peak. F_half = ``gemm_half_flops`` (a GEMM of that
size reaches half the ceiling) stands for wave quantisation and tail effects;
d_half = 128 is the tile width of cuBLAS's large kernels (thin operands waste
tiles; NVIDIA Deep Learning Performance Guide, "Matrix Multiplication
Background"); t0 = ``kernel_overhead_s`` is the launch cost. A GEMM of F forward FLOPs costs
2F more in the backward (input and weight gradients), with the same shape
efficiency. Memory-bound element-wise work costs bytes / (hbm_bw · hbm_eff).

Attention core: 4·b·s²·h/t forward FLOPs per layer (QKᵀ and AV, non-causal).
FlashAttention (Dao 2022; Dao 2023) skips masked blocks (half the FLOPs for
causal masks), recomputes QKᵀ in its backward (2.5x the forward matmuls instead
of 2x) and runs at the cluster's ``flash_eff``; unfused attention does the full
matmuls at GEMM efficiency and moves every score through HBM: 24 bytes per
score element forward and 48 backward (scores, mask, softmax, their gradients;
assumed; it gives ~53 TFLOP/s forward for unfused attention at s=4096, head
dim 128 on H100, against ~35 for "standard attention" in the FlashAttention-3
paper's benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simlab.cluster.hardware import Cluster
from simlab.cluster.space import Columns
from simlab.cluster.workloads import Workload

#: HBM bytes per element of one RMSNorm, forward + backward (assumed): fused kernel vs PyTorch eager.
NORM_BYTES_FUSED, NORM_BYTES_UNFUSED = 12.0, 40.0
#: HBM bytes per logit of the cross-entropy, forward + backward (assumed).
CE_TRAFFIC_FUSED, CE_TRAFFIC_UNFUSED = 8.0, 24.0
#: HBM bytes per attention score element of unfused attention (assumed).
SCORE_BYTES_FWD, SCORE_BYTES_BWD = 24.0, 48.0
#: Element-wise kernels per layer, forward + backward (assumed), and what an unfused norm adds.
KERNELS_PER_LAYER, KERNELS_UNFUSED_NORM, KERNELS_UNFUSED_ATTN = 60.0, 24.0, 10.0
#: Smallest GEMM dimension that reaches half the efficiency ceiling (assumed: cuBLAS tile width).
GEMM_DIM_HALF = 128.0
#: Kernels per local expert in a Python loop over experts (2 GEMMs + gather, activation, scatter), fwd+bwd.
KERNELS_PER_EXPERT_LOOP = 15.0
#: Share of the small-GEMM penalty (F_half per expert) a grouped GEMM still pays (assumed).
GROUPED_GEMM_HALF_SHARE = 0.25
#: HBM bytes per local parameter per micro-batch to accumulate its gradient in fp32 (read + write main_grad).
GRAD_ACCUM_BYTES = 8.0


def routing_imbalance(ep: np.ndarray) -> np.ndarray:
    """Busiest / mean expert-parallel rank load: 1 + 0.05·log2(ep) (assumed, balanced-loss routing)."""
    return 1.0 + 0.05 * np.log2(np.asarray(ep, dtype=float))


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerTime:
    """Seconds per micro-batch on one GPU (arrays)."""

    fwd: np.ndarray          # everything the forward runs
    bwd: np.ndarray          # everything the backward runs (without recomputation)
    gemm: np.ndarray         # GEMM share of fwd + bwd: what TP communication can hide behind
    attn_fwd: np.ndarray     # core attention forward: what selective recomputation re-runs


def _gemm(c: Cluster, flops: np.ndarray, bytes_: np.ndarray, kernels: np.ndarray | float,
          dim: np.ndarray | float, half_share: np.ndarray | float = 1.0) -> np.ndarray:
    """``kernels`` equal GEMMs of ``flops`` and ``bytes_`` in total, smallest dimension ``dim``.

    Each GEMM pays F_half (times ``half_share``: a grouped GEMM pays part of it), see the module doc.
    """
    shape = dim / (dim + GEMM_DIM_HALF)
    compute = (flops / shape + kernels * half_share * c.gemm_half_flops) / (c.peak_flops * c.gemm_eff)
    return np.maximum(compute, bytes_ / (c.hbm_bw * c.hbm_eff)) + kernels * c.kernel_overhead_s


def _mnk(m: np.ndarray, n: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bf16 bytes) of one forward GEMM with output m x n and inner dimension k."""
    return 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)


def _gemms_fwd(c: Cluster, shapes: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    total = 0.0
    for m, n, k in shapes:
        f, b = _mnk(m, n, k)
        total = total + _gemm(c, f, b, 1.0, np.minimum(np.minimum(m, n), k))
    return total


def layer_time(cols: Columns, w: Workload, c: Cluster) -> LayerTime:
    tp = cols["tp"].astype(float)
    ep = cols["ep"].astype(float)
    t_sp = np.where(cols["sequence_parallel"], tp, 1.0)
    tokens = w.seq_len * cols["micro_batch"].astype(float)
    h, g = float(w.hidden), w.gate_factor
    bw = c.hbm_bw * c.hbm_eff

    # --- GEMMs (forward); the backward costs twice as much -----------------
    attn = _gemms_fwd(c, [(tokens, (h + 2 * w.kv_dim) / tp, h), (tokens, h, h / tp)])
    dense_mlp = _gemms_fwd(c, [(tokens, g * w.ffn / tp, h), (tokens, h, w.ffn / tp)])
    if w.is_moe:
        f_moe = w.moe_layers / w.layers
        imb = routing_imbalance(cols["ep"])
        shared = w.shared_experts * w.expert_ffn
        moe = _gemms_fwd(c, [(tokens, np.full_like(tp, w.experts), h)])  # router
        if shared:
            moe = moe + _gemms_fwd(c, [(tokens, g * shared / tp, h), (tokens, h, shared / tp)])
        local = w.experts / ep
        rows = tokens * ep * w.top_k / w.experts * imb  # tokens per local expert on the busiest rank
        f_up, b_up = _mnk(rows, g * w.expert_ffn / tp, h)
        f_dn, b_dn = _mnk(rows, h, w.expert_ffn / tp)
        grouped = cols["grouped_gemm"]
        dim = np.minimum(np.minimum(rows, w.expert_ffn / tp), h)
        n_gemms = 2.0 * local
        experts = _gemm(c, local * (f_up + f_dn), local * (b_up + b_dn), n_gemms, dim,
                        np.where(grouped, GROUPED_GEMM_HALF_SHARE, 1.0))
        # a grouped GEMM launches 2 kernels instead of 2 per local expert
        moe = moe + experts - np.where(grouped, n_gemms - 2.0, 0.0) * c.kernel_overhead_s
        loop_overhead = np.where(cols["grouped_gemm"], 0.0,
                                 (KERNELS_PER_EXPERT_LOOP - 6.0) * local * c.kernel_overhead_s)
        mlp = f_moe * moe + (1 - f_moe) * dense_mlp
        act_elems = f_moe * (tokens * w.top_k * imb * w.expert_ffn + tokens * shared) / tp \
            + (1 - f_moe) * tokens * w.ffn / tp
        permute = f_moe * tokens * w.top_k * imb * h / tp * 8.0  # permute + unpermute, fwd + bwd
        mlp_extra = f_moe * loop_overhead
    else:
        mlp = dense_mlp
        act_elems = tokens * w.ffn / tp
        permute = 0.0
        mlp_extra = 0.0
    gemm_fwd = attn + mlp
    gemm = 3.0 * gemm_fwd

    # --- attention core -------------------------------------------------------
    f_core = 4.0 * cols["micro_batch"] * float(w.seq_len) ** 2 * h / tp
    flash_fwd = 0.5 * f_core / (c.peak_flops * c.flash_eff)
    scores = cols["micro_batch"] * (w.heads / tp) * float(w.seq_len) ** 2
    unfused_fwd = f_core / (c.peak_flops * c.gemm_eff) + scores * SCORE_BYTES_FWD / bw
    unfused_bwd = 2.0 * f_core / (c.peak_flops * c.gemm_eff) + scores * SCORE_BYTES_BWD / bw
    flash = cols["flash_attention"]
    core_fwd = np.where(flash, flash_fwd, unfused_fwd)
    core_bwd = np.where(flash, 2.5 * flash_fwd, unfused_bwd)

    # --- memory-bound element-wise work (fwd + bwd; 1/3 of it in the forward) --
    norm_bytes = np.where(cols["fused_norm"], NORM_BYTES_FUSED, NORM_BYTES_UNFUSED)
    elem_bytes = (2.0 * tokens * h / t_sp * norm_bytes          # two RMSNorms
                  + tokens * h / t_sp * 16.0                   # residual adds
                  + tokens * (h + w.kv_dim) / tp * 12.0        # rotary embedding on q, k
                  + act_elems * (16.0 if g == 2 else 12.0)     # SwiGLU / GeLU
                  + permute)
    kernels = KERNELS_PER_LAYER + np.where(cols["fused_norm"], 0.0, KERNELS_UNFUSED_NORM) \
        + np.where(flash, 0.0, KERNELS_UNFUSED_ATTN)
    elem = elem_bytes / bw + kernels * c.kernel_overhead_s + mlp_extra
    dense_p, expert_p = w.mean_layer_params()
    grad_accum = (dense_p / tp + expert_p / (tp * ep)) * GRAD_ACCUM_BYTES / bw  # backward only

    fwd = gemm_fwd + core_fwd + elem / 3.0
    bwd = 2.0 * gemm_fwd + core_bwd + 2.0 * elem / 3.0 + grad_accum
    return LayerTime(fwd=fwd, bwd=bwd, gemm=gemm, attn_fwd=core_fwd)


def head_time(cols: Columns, w: Workload, c: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the output projection and cross-entropy per micro-batch."""
    tp = cols["tp"].astype(float)
    tokens = w.seq_len * cols["micro_batch"].astype(float)
    f, b = _mnk(tokens, w.vocab / tp, np.full_like(tp, w.hidden))
    proj = _gemm(c, f, b, 1.0, np.minimum(np.minimum(tokens, w.vocab / tp), w.hidden))
    traffic = np.where(cols["fused_cross_entropy"], CE_TRAFFIC_FUSED, CE_TRAFFIC_UNFUSED)
    ce = tokens * w.vocab / tp * traffic / (c.hbm_bw * c.hbm_eff)
    return proj + ce / 3.0, 2.0 * proj + 2.0 * ce / 3.0
