"""Simulated training workloads: decoder-only transformers, dense and MoE.

Shapes are those of published models (``source`` per row); sequence length and
global batch (in sequences) are fixed per workload, as a training recipe fixes
them. Parameter counts follow the layer formulas of Megatron-LM's
``theoretical_memory_usage.py`` (attention 2h·h·(1 + kv/heads) with GQA, gated
MLP 3·h·ffn, RMSNorm h per norm, untied input and output embeddings V·h each).
Model FLOPs follow PaLM (Chowdhery et al. 2022, App. B): 6·N per token for the
matmul parameters plus 12·L·h·s per token for attention (non-causal count).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A model shape plus the fixed parts of its training recipe.

    Dense models have ``experts == 0``. MoE layers replace the MLP by
    ``experts`` routed experts of width ``expert_ffn`` (top-``top_k``) plus
    ``shared_experts`` always-active experts of the same width; the first
    ``dense_layers`` layers keep a dense MLP of width ``ffn``.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    global_batch: int  # sequences per optimizer step
    gated_mlp: bool = True  # SwiGLU: gate, up and down projections
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    source: str

    # ----- shapes -------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def gate_factor(self) -> int:
        """Up-projection outputs per MLP width: 2 for a gated MLP (gate and up), else 1."""
        return 2 if self.gated_mlp else 1

    # ----- parameters ---------------------------------------------------
    def mlp_params(self, width: int) -> int:
        return (self.gate_factor + 1) * self.hidden * width

    @property
    def attn_params(self) -> int:
        h = self.hidden
        return h * (h + 2 * self.kv_dim) + h * h  # QKV + output projection

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden  # two RMSNorms per layer

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden  # each of input embedding and output head (untied)

    def mean_layer_params(self) -> tuple[float, float]:
        """(replicated-over-ep params, expert params) of an average layer.

        Pipeline stages hold ``layers/pp`` average layers: the simulator does
        not place DeepSeekMoE's single dense layer on a particular stage.
        """
        base = self.attn_params + self.norm_params
        if not self.is_moe:
            return float(base + self.mlp_params(self.ffn)), 0.0
        f_moe = self.moe_layers / self.layers
        dense = (base + f_moe * (self.router_params + self.shared_experts * self.mlp_params(self.expert_ffn))
                 + (1 - f_moe) * self.mlp_params(self.ffn))
        return float(dense), float(f_moe * self.experts * self.mlp_params(self.expert_ffn))

    @property
    def total_params(self) -> int:
        dense, expert = self.mean_layer_params()
        return round(self.layers * (dense + expert)) + 2 * self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (routed experts counted top_k times)."""
        dense, _ = self.mean_layer_params()
        active_experts = self.moe_layers * self.top_k * self.mlp_params(self.expert_ffn)
        return round(self.layers * dense + active_experts) + 2 * self.embedding_params + self.hidden

    # ----- FLOPs --------------------------------------------------------
    @property
    def model_flops_per_token(self) -> float:
        """PaLM App. B: 6·N_matmul + 12·L·h·s; N_matmul excludes the input embedding lookup."""
        n_matmul = self.active_params - self.embedding_params
        return 6.0 * n_matmul + 12.0 * self.layers * self.hidden * self.seq_len

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def model_flops_per_step(self) -> float:
        return self.model_flops_per_token * self.tokens_per_step


WORKLOADS: tuple[Workload, ...] = (
    Workload(name="llama2-7b", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000,
             seq_len=4096, global_batch=256,
             source="Touvron et al. 2023, Llama 2 (Table 1/config): 32 layers, h=4096, 32 heads, ffn=11008, V=32000"),
    Workload(name="llama2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
             seq_len=4096, global_batch=192,
             source="Touvron et al. 2023, Llama 2 70B config: 80 layers, h=8192, 64 heads, 8 KV heads (GQA), "
                    "ffn=28672, V=32000"),
    Workload(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
             seq_len=4096, global_batch=256, experts=8, top_k=2, expert_ffn=14336,
             source="Jiang et al. 2024, Mixtral of Experts (config): 32 layers, h=4096, 32 heads, 8 KV heads, "
                    "8 experts top-2 of ffn=14336, V=32000; 46.7B total, 12.9B active"),
    Workload(name="deepseek-moe-16b", layers=28, hidden=2048, heads=16, kv_heads=16, ffn=10944, vocab=102400,
             seq_len=4096, global_batch=384, experts=64, top_k=6, expert_ffn=1408, shared_experts=2,
             dense_layers=1,
             source="Dai et al. 2024, DeepSeekMoE (deepseek-moe-16b-base config.json): 28 layers, h=2048, "
                    "16 heads, 64 routed experts top-6 + 2 shared of ffn=1408, first layer dense ffn=10944, "
                    "V=102400; 16.4B total, 2.8B active"),
)


def workload(name: str) -> Workload:
    """The workload of that name; ValueError names the known ones."""
    for row in WORKLOADS:
        if row.name == name:
            return row
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")
