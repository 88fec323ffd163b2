"""Configurations the training framework refuses: the simulated crashes.

Each rule is a vectorised predicate (True where the configuration crashes)
and the message the framework would print. The first failing rule, in table
order, is the crash reason. Sources: Megatron-LM argument checks
(``megatron/training/arguments.py``, ``schedules.py``) and DeepSpeed's
pipeline engine (``assert zero_optimization_stage() < 2``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simlab.cluster.hardware import Cluster
from simlab.cluster.space import Columns
from simlab.cluster.workloads import Workload


@dataclass(frozen=True, kw_only=True, slots=True)
class Derived:
    """Quantities every model needs, safe (>= 1) even where the configuration crashes."""

    dp: np.ndarray  # data-parallel degree = world / (tp·pp)
    m: np.ndarray   # micro-batches per step per data-parallel rank = global_batch / (dp·micro_batch)


def derive(cols: Columns, w: Workload, c: Cluster) -> Derived:
    world = c.world_size
    dp = np.maximum(world // (cols["tp"] * cols["pp"]), 1)
    m = np.maximum(w.global_batch // (dp * cols["micro_batch"]), 1)
    return Derived(dp=dp, m=m)


Predicate = Callable[[Columns, Derived, Workload, Cluster], np.ndarray]
Message = Callable[[dict[str, Any], Workload, Cluster], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    name: str
    crashes: Predicate
    message: Message
    source: str


def _nd(a: np.ndarray, b: Any) -> np.ndarray:
    """True where ``b`` does not divide ``a``."""
    return np.mod(a, b) != 0


RULES: tuple[Rule, ...] = (
    Rule(name="world_size",
         crashes=lambda k, d, w, c: _nd(np.full_like(k["tp"], c.world_size), k["tp"] * k["pp"]),
         message=lambda v, w, c: (f"world size {c.world_size} is not divisible by tensor-parallel size "
                                  f"({v['tp']}) times pipeline-parallel size ({v['pp']})"),
         source="Megatron-LM initialize_model_parallel"),
    Rule(name="tp_heads",
         crashes=lambda k, d, w, c: _nd(np.full_like(k["tp"], w.heads), k["tp"])
         | _nd(np.full_like(k["tp"], w.kv_heads), k["tp"]),
         message=lambda v, w, c: (f"number of attention heads ({w.heads}) / query groups ({w.kv_heads}) must be "
                                  f"divisible by tensor-parallel size ({v['tp']})"),
         source="Megatron-LM arguments.py / TransformerConfig"),
    Rule(name="tp_ffn",
         crashes=lambda k, d, w, c: _nd(np.full_like(k["tp"], w.ffn), k["tp"])
         | (_nd(np.full_like(k["tp"], w.expert_ffn), k["tp"]) if w.is_moe else False),
         message=lambda v, w, c: f"ffn hidden size is not divisible by tensor-parallel size ({v['tp']})",
         source="Megatron-LM ColumnParallelLinear (divide())"),
    Rule(name="vpp_needs_pp",
         crashes=lambda k, d, w, c: (k["vpp"] > 1) & (k["pp"] == 1),
         message=lambda v, w, c: (f"virtual pipeline stages ({v['vpp']}) need pipeline-model-parallel size "
                                  f"> 1 (got pp=1)"),
         source="Megatron-LM arguments.py (interleaved schedule)"),
    Rule(name="pp_layers",
         crashes=lambda k, d, w, c: _nd(np.full_like(k["pp"], w.layers), k["pp"] * k["vpp"]),
         message=lambda v, w, c: (f"number of layers ({w.layers}) is not divisible by pipeline-parallel size "
                                  f"({v['pp']}) x virtual stages ({v['vpp']})"),
         source="Megatron-LM arguments.py"),
    Rule(name="ep_experts",
         crashes=lambda k, d, w, c: (_nd(np.full_like(k["ep"], max(w.experts, 1)), k["ep"]) | _nd(d.dp, k["ep"]))
         if w.is_moe else np.zeros(k["ep"].shape, dtype=bool),
         message=lambda v, w, c: (f"expert-parallel size ({v['ep']}) must divide the number of experts "
                                  f"({w.experts}) and the data-parallel size ({v['dp']})"),
         source="Megatron-LM parallel_state (expert-data-parallel groups)"),
    Rule(name="batch",
         crashes=lambda k, d, w, c: _nd(np.full_like(k["tp"], w.global_batch), d.dp * k["micro_batch"]),
         message=lambda v, w, c: (f"global batch size ({w.global_batch}) is not divisible by micro batch size "
                                  f"({v['micro_batch']}) times data parallel size ({v['dp']})"),
         source="Megatron-LM microbatches calculator"),
    Rule(name="interleave_microbatches",
         crashes=lambda k, d, w, c: (k["vpp"] > 1) & _nd(d.m, k["pp"]),
         message=lambda v, w, c: (f"number of microbatches ({v['m']}) is not divisible by pipeline-model-parallel"
                                  f" size ({v['pp']}) when using interleaved schedule"),
         source="Megatron-LM schedules.py forward_backward_pipelining_with_interleaving"),
    Rule(name="zero_pipeline",
         crashes=lambda k, d, w, c: (k["zero"] >= 2) & (k["pp"] > 1),
         message=lambda v, w, c: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
         source="DeepSpeed runtime/pipe/engine.py"),
    Rule(name="param_gather_needs_zero",
         crashes=lambda k, d, w, c: k["overlap_param_gather"] & (k["zero"] == 0),
         message=lambda v, w, c: "--overlap-param-gather only supported with distributed optimizer",
         source="Megatron-LM arguments.py"),
    Rule(name="param_gather_needs_grad_overlap",
         crashes=lambda k, d, w, c: k["overlap_param_gather"] & ~k["overlap_grad_reduce"],
         message=lambda v, w, c: "Must use --overlap-param-gather with --overlap-grad-reduce",
         source="Megatron-LM arguments.py"),
    Rule(name="tp_overlap_needs_sp",
         crashes=lambda k, d, w, c: k["tp_comm_overlap"] & (k["tp"] > 1) & ~k["sequence_parallel"],
         message=lambda v, w, c: ("Tensor parallel communication/GEMM overlap can happen only when sequence "
                                  "parallelism is enabled"),
         source="Megatron-LM arguments.py"),
)


def crash_codes(cols: Columns, d: Derived, w: Workload, c: Cluster) -> np.ndarray:
    """Index+1 of the first failing rule per configuration, 0 where none fails."""
    code = np.zeros(cols["tp"].shape, dtype=np.int16)
    for i in range(len(RULES) - 1, -1, -1):
        bad = np.asarray(RULES[i].crashes(cols, d, w, c), dtype=bool)
        code = np.where(bad, i + 1, code)
    return code


def crash_message(code: int, values: dict[str, Any], w: Workload, c: Cluster) -> str:
    rule = RULES[code - 1]
    return f"{rule.message(values, w, c)} [{rule.name}]"
