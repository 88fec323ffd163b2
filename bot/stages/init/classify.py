"""Sort discovered settings: free speed knobs, values that define the task, coupled pairs.

A speed knob changes how the job runs, not what it computes (precision, compile,
activation checkpointing, data-loader workers, fused kernels...). A task-defining
value (sequence length, global batch, learning rate, steps, seed, model size,
dataset, dropout, label smoothing...) is never offered: it is fixed. A micro-batch
and a gradient-accumulation setting are a coupled pair: free only together, their
product held at the fixed global batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bot.stages.init.setting import Setting

_FREE: tuple[tuple[str, str], ...] = (
    (r"^(dtype|precision|amp|autocast|mixed_precision|amp_dtype|bf16|fp16|tf32|use_amp|half|use_bf16|"
     r"use_fp16|allow_tf32|tensorcores|use_tensorcores|tensor_cores)$", "numeric precision"),
    (r"^(compile|torch_compile|use_compile|compile_model|torchcompile)$", "torch.compile"),
    (r"^(threads|num_threads|nthreads|torch_threads|intra_op_threads|omp_num_threads)$", "thread count"),
    (r"^(optim)$", "optimizer implementation"),
    (r"^(grad_ckpt|gradient_checkpointing|activation_checkpointing|checkpoint_activations|recompute|"
     r"use_gradient_checkpointing|grad_checkpointing)$", "activation checkpointing"),
    (r"^(num_workers|workers|dataloader_workers|dataloader_num_workers|n_workers|loader_workers)$",
     "data-loader workers"),
    (r"^(pin_memory|pin_mem|dataloader_pin_memory|persistent_workers|dataloader_persistent_workers)$",
     "data-loader memory"),
    (r"^(fused|foreach|flash|use_flash|sdpa|fused_adam|flash_attn|use_flash_attn|use_fused_adam|"
     r"attn_implementation)$", "fused kernels"),
    (r"^(benchmark|cudnn_benchmark|channels_last)$", "kernel selection"),
)
_MICRO = re.compile(r"^(micro_?batch(_size)?|mbs|micro_bs|per_device_(train_)?batch_size|device_batch_size|"
                    r"train_micro_batch_size_per_gpu|local_batch_size)$")
_BATCH = re.compile(r"^(batch_size|train_batch_size|bs|batch)$")
_ACCUM = re.compile(r"^(gradient_accumulation_steps|grad_accum(_steps)?|accumulate_grad_batches|accum(_steps|_iter)?|"
                    r"accumulation_steps|gradient_accumulation|grad_acc(_steps)?|gradient_accumulate_every|"
                    r"grad_accum_every|accum_every|accumulate_every)$")
_GLOBAL = re.compile(r"^(global_batch(_size)?|total_batch(_size)?|gbs|effective_batch_size)$")
_FIXED: tuple[tuple[str, str], ...] = (
    (r"(^|_)(lr|learning_rate)$|^(min_lr|max_lr|base_lr|lr_.*|.*_lr)$", "learning rate"),
    (r"^(steps|max_steps|iters|max_iters|num_steps|train_steps|total_steps|num_train_epochs|epochs|max_epochs|"
     r"num_epochs|lr_decay_iters|n_steps|num_iterations|max_iterations|train_iters|num_batches|"
     r"num_train_steps|training_steps)$", "training length"),
    (r"^(seed|data_seed|random_seed|manual_seed)$", "seed"),
    (r"^(block_size|seq_len|seq_length|max_seq_len|max_seq_length|context_length|sequence_length|max_length|"
     r"n_ctx|n_positions|ctx_len|context_len|context_size|max_position_embeddings|max_len|bptt)$", "sequence length"),
    (r"^(n_layer|n_layers|num_layers|num_hidden_layers|depth|n_head|n_heads|num_heads|num_attention_heads|n_embd|"
     r"d_model|hidden_size|dim|emb_dim|vocab_size|intermediate_size|ffn_dim|model_name_or_path|model_name|"
     r"model_type|config_name|model_size|model|arch|init_from|bias|n_kv_heads|num_key_value_heads|nlayers|nhead|"
     r"nheads|nhid|emsize|embed_dim|embedding_dim|hidden_dim|n_hidden|d_ff|mlp_ratio|num_classes)$", "model"),
    (r"^(dataset|dataset_name|dataset_config_name|data|data_dir|data_path|train_file|validation_file|"
     r"tokenizer|tokenizer_name|data_root|train_data|data_files|dataset_path)$", "data"),
    (r"dropout|pdrop|drop_rate|drop_path", "dropout"),
    (r"label_smoothing", "label smoothing"),
    (r"^(weight_decay|wd|beta1|beta2|betas|adam_beta1|adam_beta2|adam_epsilon|eps|momentum|grad_clip|max_grad_norm|"
     r"gradient_clip_val|clip_grad|clip|warmup|warmup_steps|warmup_iters|warmup_ratio|lr_scheduler_type|"
     r"scheduler|decay_lr|optimizer)$", "optimisation"),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Coupled:
    """A micro-batch and an accumulation setting whose product is the fixed global batch."""

    micro: Setting
    accum: Setting
    global_batch: int | None  # None when a current value is unknown


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenBatch:
    """A global batch given in tokens (llm.c's ``--total_batch_size``, "in units of #tokens") beside a
    per-forward ``batch_size``: accumulation is derived (total / (batch x sequence length)), so the batch is
    free as long as it divides the total."""

    micro: Setting | None  # None: the per-forward batch is not a setting (build-nanogpt's `B = 64`)
    total: Setting


@dataclass(kw_only=True)
class Classified:
    free: list[tuple[Setting, str]] = field(default_factory=list)
    fixed: list[tuple[Setting, str]] = field(default_factory=list)
    coupled: list[Coupled] = field(default_factory=list)
    token_batch: TokenBatch | None = None

    def names(self) -> dict[str, list[str]]:
        """``{"free": [...], "fixed": [...], "coupled": ["micro*accum"]}``, for tables and reports."""
        return {"free": sorted(s.key for s, _ in self.free), "fixed": sorted(s.key for s, _ in self.fixed),
                "coupled": sorted(f"{c.micro.key}*{c.accum.key}" for c in self.coupled)}


def free_reason(leaf: str) -> str | None:
    for pattern, reason in _FREE:
        if re.match(pattern, leaf):
            return reason
    return None


def fixed_reason(leaf: str) -> str | None:
    if _GLOBAL.match(leaf):
        return "global batch"
    for pattern, reason in _FIXED:
        if re.search(pattern, leaf):
            return reason
    return None


def current(setting: Setting, given: dict[str, str]) -> Any:
    """The value the baseline runs with: the command's, else the code's default."""
    raw = given.get(setting.token, given.get(setting.key))
    if raw is None:
        return setting.default if setting.has_default else None
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    low = raw.lower()
    if low in ("true", "false") or setting.type == "bool" and low in ("1", "0", "yes", "no"):
        return low in ("true", "1", "yes")
    return raw


def classify(settings: list[Setting], given: dict[str, str]) -> Classified:
    """Each setting's role. ``given``: values on the user's command, keyed by token or key."""
    out = Classified()
    groups: dict[str, list[Setting]] = {}
    for s in settings:
        groups.setdefault(s.convention, []).append(s)
    taken: set[str] = set()
    for members in groups.values():
        accum = next((s for s in members if _ACCUM.match(s.leaf)), None)
        micro = next((s for s in members if _MICRO.match(s.leaf)), None) or (
            next((s for s in members if _BATCH.match(s.leaf)), None) if accum else None)
        if accum and micro:
            m, a = current(micro, given), current(accum, given)
            gb = m * a if isinstance(m, int) and isinstance(a, int) and not isinstance(m, bool) else None
            out.coupled.append(Coupled(micro=micro, accum=accum, global_batch=gb))
            taken |= {micro.key, accum.key}
    if not out.coupled:
        out.token_batch = _token_batch(settings, given)
    if out.token_batch is not None:
        out.fixed.append((out.token_batch.total, "global batch in tokens"))
        taken.add(out.token_batch.total.key)
        if out.token_batch.micro is not None:
            out.free.append((out.token_batch.micro, "micro-batch size (accumulation = the token batch / "
                             "(batch x sequence length))"))
            taken.add(out.token_batch.micro.key)
    for s in settings:
        if s.key in taken:
            continue
        leaf = s.leaf
        if _BATCH.match(leaf):
            out.fixed.append((s, "global batch (no gradient accumulation setting to keep it fixed)"))
            continue
        fixed = fixed_reason(leaf)
        free = free_reason(leaf)
        if fixed and not free:
            out.fixed.append((s, fixed))
        elif free or _MICRO.match(leaf):
            out.free.append((s, free or "micro-batch size"))
        # anything else (output paths, logging intervals, wandb...) is neither offered nor fixed here
    return out


_TOKEN_TOTAL = re.compile(r"^(total_batch_size|total_batch_tokens|global_batch_tokens|batch_tokens|tokens_per_batch|"
                          r"total_tokens_per_step)$")


def _token_batch(settings: list[Setting], given: dict[str, str]) -> TokenBatch | None:
    """The llm.c convention, where the total's name or help says it counts tokens."""
    for total in settings:
        value = current(total, given)
        if not (_TOKEN_TOTAL.match(total.leaf) and type(value) is int and value > 0):
            continue
        if "token" not in total.leaf and not re.search(r"\btokens?\b|#tokens", total.help, re.I):
            continue
        micro = next((s for s in settings if s.convention == total.convention
                      and (_BATCH.match(s.leaf) or _MICRO.match(s.leaf))  # nanochat: --device-batch-size
                      and type(current(s, given)) is int), None)
        return TokenBatch(micro=micro, total=total)
    return None
