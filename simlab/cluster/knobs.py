"""The knobs and code patches the simulator understands, with their documented effects.

A *knob* is a launch setting (parallel sizes, micro-batch, ZeRO stage, ...); a
*patch* is a code change a tuner could apply (fused attention, fused
cross-entropy, ...), modelled as a boolean. ``time`` and ``memory`` say what
each one does in :mod:`simlab.cluster.cost` and :mod:`simlab.cluster.memory`; the
formulas and their sources are in ``docs/simulator.md``.

Data parallelism is not a knob: ``dp = world / (tp·pp)``. Expert parallelism
is carved out of dp (Megatron-LM's expert-data-parallel layout), so
``ep`` must divide ``dp`` and the expert count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Value = int | bool | str
Kind = Literal["int", "bool", "categorical"]
Role = Literal["knob", "patch"]

RECOMPUTE_LEVELS: tuple[str, ...] = ("none", "selective", "full")


@dataclass(frozen=True, kw_only=True, slots=True)
class Dimension:
    """One axis of the search space: its domain and what it does."""

    name: str
    kind: Kind
    values: tuple[Value, ...]
    role: Role
    time: str
    memory: str
    moe_only: bool = False

    def code(self, value: Value) -> int:
        """Index of ``value`` in the domain; ValueError if it is not in it."""
        for i, v in enumerate(self.values):
            if v == value and type(v) is type(value):
                return i
        raise ValueError(f"{self.name}={value!r} is not in the domain {list(self.values)}")


def _int(name: str, values: tuple[int, ...], time: str, memory: str, moe_only: bool = False) -> Dimension:
    return Dimension(name=name, kind="int", values=values, role="knob", time=time, memory=memory,
                     moe_only=moe_only)


def _flag(name: str, role: Role, time: str, memory: str, moe_only: bool = False) -> Dimension:
    return Dimension(name=name, kind="bool", values=(False, True), role=role, time=time, memory=memory,
                     moe_only=moe_only)


#: Every dimension, in enumeration order (the last one varies fastest).
DIMENSIONS: tuple[Dimension, ...] = (
    _int("tp", (1, 2, 4, 8),
         "splits every GEMM (smaller GEMMs run at lower efficiency) and attention heads; adds 4 activation "
         "all-reduces (or all-gather + reduce-scatter pairs) per layer per micro-batch on NVLink",
         "divides parameters, gradients, optimizer state and the TP-split activations by tp"),
    _int("pp", (1, 2, 4, 8),
         "divides layers into stages; adds the bubble (pp-1)/(vpp·m) and point-to-point sends per micro-batch",
         "divides parameters by pp; the first stage keeps min(m, pp) micro-batches of activations in flight"),
    _int("ep", (1, 2, 4, 8),
         "shards experts over ep ranks of the data-parallel group; adds 4 all-to-alls per MoE layer per "
         "micro-batch and routing imbalance; larger per-expert GEMMs",
         "divides expert parameters (and their gradient/optimizer state) by ep", moe_only=True),
    _int("micro_batch", (1, 2, 4, 8),
         "larger GEMMs (higher efficiency), fewer micro-batches m (larger pipeline bubble, fewer ZeRO-2/3 "
         "collectives)",
         "activations scale linearly with it"),
    _int("vpp", (1, 2, 4),
         "virtual pipeline stages (interleaved 1F1B): bubble divided by vpp, vpp times more p2p sends",
         "first-stage activations x (1 + (pp-1)/(pp·vpp))"),
    Dimension(name="recompute", kind="categorical", values=RECOMPUTE_LEVELS, role="knob",
              time="selective: re-runs core attention forward; full: re-runs the whole layer forward and its "
                   "TP/EP communication",
              memory="selective: drops the 5as/h attention-score term; full: keeps only each layer's input "
                     "(2sbh) plus one layer's working set"),
    _int("zero", (0, 1, 2, 3),
         "0: one gradient all-reduce per step; 1: reduce-scatter + all-gather per step; 2: reduce-scatter per "
         "micro-batch; 3: two parameter all-gathers and one reduce-scatter per micro-batch (FSDP full shard). "
         "1-3 shard the Adam update",
         "ZeRO paper: 16 bytes/param become 4+12/d (1), 2+14/d (2), 16/d (3) over the data-parallel degree d"),
    _flag("sequence_parallel", "knob",
          "splits norms, dropout and residual work over tp (no-op when tp=1); same communication volume",
          "divides the replicated activations (the 10sbh part) by tp"),
    _flag("overlap_grad_reduce", "knob",
          "gradient reduction hidden behind backward compute, except the last bucket",
          "none"),
    _flag("overlap_param_gather", "knob",
          "ZeRO-1/2: parameter all-gather hidden behind the next forward; ZeRO-3: prefetch of the next layer. "
          "Needs zero >= 1 and overlap_grad_reduce (as in Megatron-LM)",
          "ZeRO-3 keeps one more gathered layer"),
    _int("bucket_mb", (25, 100, 400),
         "more buckets pay more collective latency; the last bucket is never hidden",
         "2 x bucket of communication staging buffer"),
    _flag("flash_attention", "patch",
          "fused attention: no s x s score traffic in HBM, causal blocks skipped, runs at the cluster's "
          "flash efficiency",
          "drops the 5as/h attention-score term"),
    _flag("fused_cross_entropy", "patch",
          "cross-entropy traffic 8 instead of 24 bytes per logit",
          "logits memory 4 instead of 10 bytes per logit"),
    _flag("fused_norm", "patch",
          "RMSNorm traffic 12 instead of 40 bytes per element",
          "drops the 4sbh of fp32 norm intermediates kept by the unfused norm"),
    _flag("grouped_gemm", "patch",
          "all local experts in one grouped GEMM instead of a loop of small GEMMs (saves per-expert kernel "
          "overhead)",
          "none", moe_only=True),
    _flag("tp_comm_overlap", "patch",
          "TP all-gather/reduce-scatter overlapped with the GEMMs (hidden up to GEMM time, 10% residual); "
          "needs sequence_parallel when tp > 1 (as in Megatron-LM)",
          "none"),
)

#: What a user typically starts with: plain data parallelism over all GPUs with
#: FSDP/ZeRO-3 full sharding and full activation checkpointing, micro-batch 1,
#: PyTorch DDP's 25 MB bucket, no overlap flags and no patches.
DEFAULT: dict[str, Value] = {
    "tp": 1, "pp": 1, "ep": 1, "micro_batch": 1, "vpp": 1, "recompute": "full", "zero": 3,
    "sequence_parallel": False, "overlap_grad_reduce": False, "overlap_param_gather": False,
    "bucket_mb": 25, "flash_attention": False, "fused_cross_entropy": False, "fused_norm": False,
    "grouped_gemm": False, "tp_comm_overlap": False,
}


def dimensions(*, moe: bool) -> tuple[Dimension, ...]:
    """The dimensions that exist for a dense (``moe=False``) or MoE workload."""
    return tuple(d for d in DIMENSIONS if moe or not d.moe_only)
