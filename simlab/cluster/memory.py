"""Peak memory per GPU: model states (ZeRO paper) plus activations (Korthikanti et al. 2022).

Model states, mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, §3.1 and
Fig. 1): 2 bytes of bf16 parameters, 2 of bf16 gradients and K=12 of optimizer
state (fp32 master copy, momentum, variance) per parameter; stage 1 shards the
12, stage 2 also the gradients, stage 3 also the parameters, over the
data-parallel degree (experts: over the expert-data-parallel degree dp/ep).

Activations per layer and micro-batch (Korthikanti et al. 2022, §4, Table 2),
in bytes, with s sequence, b micro-batch, h hidden, a heads, t tp:

* no parallelism:           sbh(34 + 5as/h)
* tensor parallel:          sbh(10 + 24/t + 5as/(ht))
* tensor + sequence par.:   sbh/t (34 + 5as/h)
* selective recompute:      the 5as/h term is dropped
* full recompute:           2sbh per layer (the layer input; /t with SP), plus one layer's working set

The 24 is generalised to GQA and other MLP widths as in Megatron-LM's
``theoretical_memory_usage.py`` (18 + 4·ffn/h at ffn=4h): attention 4 + 4·kv/h,
MLP 2·(g+1)·ffn/h with g=2 up-projections for a gated MLP. MoE layers store
the routed experts' MLP activations top_k times plus 2·top_k sbh of permuted
token copies. Pipeline (Megatron-LM): the first stage holds min(m, pp)
micro-batches of its L/pp layers, times 1 + (pp-1)/(pp·vpp) when interleaved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simlab.cluster.hardware import Cluster
from simlab.cluster.rules import Derived
from simlab.cluster.space import Columns
from simlab.cluster.workloads import Workload

MiB: float = float(1 << 20)

#: Bytes per parameter of mixed-precision Adam (ZeRO paper): bf16 params, bf16 grads, 12 of fp32 state.
PARAM_BYTES, GRAD_BYTES, OPTIM_BYTES = 2.0, 2.0, 12.0
#: Bytes per logit kept for the backward: bf16 logits + fp32 copy + fp32 softmax (unfused), fp32 (fused).
CE_BYTES_UNFUSED, CE_BYTES_FUSED = 10.0, 4.0
#: Extra sbh kept per layer by an unfused RMSNorm (bf16 normalised intermediate of each of the two norms).
UNFUSED_NORM_SBH = 4.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Memory:
    """Per-GPU bytes on the most loaded pipeline stage (arrays, one entry per configuration)."""

    params: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    buffers: np.ndarray      # communication staging and ZeRO-3 gathered layers
    activations: np.ndarray  # transformer layers, embedding and logits of the peak stage
    total: np.ndarray


def stage_params(cols: Columns, w: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dense params per GPU, expert params per GPU, dense per layer per GPU, expert per layer per GPU)."""
    tp, pp, ep = cols["tp"], cols["pp"], cols["ep"]
    dense_layer, expert_layer = w.mean_layer_params()
    layers = w.layers / pp
    embeddings = np.where(pp == 1, 2.0, 1.0) * w.embedding_params  # input embedding and/or output head
    dense = (layers * dense_layer + embeddings) / tp
    expert = layers * expert_layer / (tp * ep)
    return dense, expert, dense_layer / tp, expert_layer / (tp * ep)


def layer_activation_sbh(cols: Columns, w: Workload) -> tuple[np.ndarray, np.ndarray]:
    """(bytes/sbh stored per layer per micro-batch, bytes/sbh of one layer's working set).

    Both are already divided by tp as Korthikanti et al. prescribe.
    """
    tp = cols["tp"].astype(float)
    t_sp = np.where(cols["sequence_parallel"], tp, 1.0)
    h, g = w.hidden, w.gate_factor
    replicated = 10.0 + np.where(cols["fused_norm"], 0.0, UNFUSED_NORM_SBH)
    attn = 4.0 + 4.0 * w.kv_dim / h
    if w.is_moe:
        f_moe = w.moe_layers / w.layers
        moe_mlp = 2.0 * (g + 1) * (w.top_k + w.shared_experts) * w.expert_ffn / h + 2.0 * w.top_k
        mlp = f_moe * moe_mlp + (1 - f_moe) * 2.0 * (g + 1) * w.ffn / h
    else:
        mlp = 2.0 * (g + 1) * w.ffn / h
    scores = 5.0 * w.heads * w.seq_len / h
    keep_scores = ~cols["flash_attention"] & (cols["recompute"] == 0)
    working = replicated / t_sp + (attn + mlp) / tp + np.where(cols["flash_attention"], 0.0, scores / tp)
    no_recompute = replicated / t_sp + (attn + mlp) / tp + np.where(keep_scores, scores / tp, 0.0)
    stored = np.where(cols["recompute"] == 2, 2.0 / t_sp, no_recompute)
    return stored, np.where(cols["recompute"] == 2, working, 0.0)


def memory(cols: Columns, d: Derived, w: Workload, c: Cluster) -> Memory:
    tp, pp, ep, zero = cols["tp"], cols["pp"], cols["ep"], cols["zero"]
    dp = d.dp.astype(float)
    dp_expert = np.maximum(dp / ep, 1.0)
    dense, expert, dense_layer, expert_layer = stage_params(cols, w)

    def shard(stage_min: int) -> tuple[np.ndarray, np.ndarray]:
        return np.where(zero >= stage_min, dp, 1.0), np.where(zero >= stage_min, dp_expert, 1.0)

    p_d, p_e = shard(3)
    g_d, g_e = shard(2)
    o_d, o_e = shard(1)
    params = PARAM_BYTES * (dense / p_d + expert / p_e)
    grads = GRAD_BYTES * (dense / g_d + expert / g_e)
    optimizer = OPTIM_BYTES * (dense / o_d + expert / o_e)

    # Staging buffers: double-buffered gradient bucket; ZeRO-3 also holds gathered layers
    # (the one computing, its gradient before reduce-scatter, and a prefetched one when overlapping).
    gathered_units = 2.0 + cols["overlap_param_gather"].astype(float)
    buffers = 2.0 * cols["bucket_mb"] * MiB + np.where(
        zero == 3, gathered_units * PARAM_BYTES * (dense_layer + expert_layer), 0.0)

    s, b, h = w.seq_len, cols["micro_batch"].astype(float), w.hidden
    sbh = s * b * h
    t_sp = np.where(cols["sequence_parallel"], tp, 1).astype(float)
    stored, working = layer_activation_sbh(cols, w)
    layers = w.layers / pp
    penalty = np.where(cols["vpp"] > 1, 1.0 + (pp - 1) / (pp * cols["vpp"]), 1.0)
    in_flight_first = np.where(pp == 1, 1.0, np.minimum(d.m, pp)) * penalty
    in_flight_last = penalty
    embedding = (8.0 * s * b + sbh / t_sp) * in_flight_first  # token ids (int64) + embedding dropout
    ce_bytes = np.where(cols["fused_cross_entropy"], CE_BYTES_FUSED, CE_BYTES_UNFUSED)
    logits = s * b * w.vocab / tp * ce_bytes + 2.0 * sbh / t_sp  # logits + final-norm output
    first = sbh * (stored * layers * in_flight_first + working) + embedding
    last = sbh * (stored * layers * in_flight_last + working) + logits
    activations = np.where(pp == 1, first + logits, np.maximum(first, last))
    states = params + grads + optimizer + buffers
    return Memory(params=params, grads=grads, optimizer=optimizer, buffers=buffers,
                  activations=activations, total=states + activations)
