"""From classified settings to contract entries: knob tables, coupled-pair constraints, tokens per step.

A knob enters the contract only in a passing style the contract can express
(``--name VALUE``, a bare switch, an environment variable). Settings passed
another way (``--name=VALUE`` through a configurator, Hydra ``a.b=VALUE``, a
literal in the code) are listed in a note with their style, so nothing found is
dropped silently.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from bot.stages.init.classify import Classified, Coupled, TokenBatch, current
from bot.stages.init.cores import usable_cores
from bot.stages.init.setting import Setting
from bot.stages.init.framework_rules import hf_precision_rules, machine_has_gpu

EXPRESSIBLE = ("flag-space", "flag-equals", "hydra", "switch", "env")
_LIGHTNING_PRECISION = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
_SEQ = re.compile(r"^(block_size|seq_len|seq_length|max_seq_len|max_seq_length|context_length|sequence_length|"
                  r"max_length|n_ctx|ctx_len|context_len|context_size|bptt)$")


def knob_name(setting: Setting) -> str:
    return re.sub(r"\W", "_", setting.key).strip("_") or "knob"


@dataclass(kw_only=True)
class KnobPlan:
    knobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # knobs.<name> -> note
    constraints: list[dict[str, Any]] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # "key (style)" found but not expressible today
    fixed: list[str] = field(default_factory=list)  # "key = value (reason)"


def passing_table(setting: Setting) -> dict[str, Any]:
    if setting.passing == "env":
        return {"env": setting.token}
    if setting.passing == "switch":
        return {"flag": setting.token, "switch": True}
    if setting.passing == "flag-equals":  # a configurator's `--key=value`, read back with ast.literal_eval
        return {"flag": setting.token, "form": "equals"}
    if setting.passing == "hydra":
        return {"override": setting.token}
    return {"flag": setting.token}


#: Free-setting reasons whose 0/1 int is on/off (not a count: threads, workers, micro-batch).
_TOGGLES = {"numeric precision", "torch.compile", "activation checkpointing", "data-loader memory", "fused kernels",
            "kernel selection"}


def _domain(setting: Setting, value: Any, reason: str) -> dict[str, Any] | None:
    leaf = setting.leaf
    if setting.choices:
        choices = list(setting.choices)
        if value not in choices:
            return None
        return {"kind": "categorical", "values": choices, "default": value}
    if isinstance(value, bool) or setting.type == "bool":
        if value is None or not isinstance(value, bool):
            return None
        if setting.passing == "switch" and value:
            return None  # a switch that is on cannot be turned off by leaving it out
        return {"kind": "bool", "default": value}
    if leaf == "optim" and isinstance(value, str):
        return {"kind": "categorical", "values": sorted({value, "adamw_torch", "adamw_torch_fused"}), "default": value}
    if leaf == "precision" and (setting.convention.startswith("lightning") or str(value) in _LIGHTNING_PRECISION):
        v = str(value)
        return {"kind": "categorical", "values": sorted({v, "32-true", "bf16-mixed"}), "default": v}
    if leaf == "attn_implementation" and isinstance(value, str):
        return {"kind": "categorical", "values": sorted({value, "eager", "sdpa"}), "default": value}
    if reason == "numeric precision" and isinstance(value, str) and value in ("float32", "bfloat16", "float16"):
        return {"kind": "categorical", "values": sorted({value, "float32", "bfloat16"}), "default": value}
    if reason == "numeric precision" and isinstance(value, str) and value in ("fp32", "bf16", "fp16"):
        return {"kind": "categorical", "values": sorted({value, "fp32", "bf16"}), "default": value}
    if isinstance(value, int) and "thread" in reason:
        cores = usable_cores()
        return {"kind": "int", "values": sorted({value, *[v for v in (1, 2, 4, 8, 16, 32, 64) if v <= cores]}),
                "default": value}
    if isinstance(value, int) and "worker" in reason:
        return {"kind": "int", "values": sorted({value, 0, 1, 2, 4}), "default": value}
    if type(value) is int and value in (0, 1) and reason in _TOGGLES:
        # an int used as a toggle: llm.c's `--compile 0`, `--flash 0`, `--tensorcores 0` (never a batch of 1)
        return {"kind": "int", "values": [0, 1], "default": value}
    return None


def _powers_of_two_dividing(n: int) -> list[int]:
    return [v for v in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if v <= n and n % v == 0]


def plan_knobs(classified: Classified, given: dict[str, str], *, taken: set[str]) -> KnobPlan:
    """Knob tables for every free setting and coupled pair not already ``taken`` (by name)."""
    plan = KnobPlan()
    for s, reason in classified.fixed:
        value = current(s, given)
        plan.fixed.append(f"{s.key} = {value!r} ({reason})")
    token_micro = classified.token_batch.micro if classified.token_batch is not None else None
    for s, reason in classified.free:
        name = knob_name(s)
        if name in taken or s.key in taken or s is token_micro:
            continue
        if s.passing not in EXPRESSIBLE:
            plan.deferred.append(f"{s.key} ({reason}; passed as {_style(s)})")
            continue
        domain = _domain(s, current(s, given), reason)
        if domain is None:
            plan.deferred.append(f"{s.key} ({reason}; its current value {current(s, given)!r} gives no safe domain)")
            continue
        plan.knobs[name] = {**passing_table(s), **domain}
        if s.passing == "flag-equals" and domain.get("kind") == "bool":
            plan.knobs[name]["bool_text"] = ["True", "False"]  # ast.literal_eval reads these, not 1/0
        plan.notes[f"knobs.{name}"] = (f"guessed: {s.token} ({s.convention}) looks like a knob for {reason}"
                                       + (f" (line {s.line} of the entry script)" if s.line else ""))
    for pair in classified.coupled:
        _couple(plan, pair, given, taken)
    if classified.token_batch is not None and classified.token_batch.micro is not None:
        _token_micro(plan, classified.token_batch, settings_seq(classified, given), given, taken)
    before = set(plan.knobs)
    plan.constraints += hf_precision_rules(plan.knobs, classified, given, has_gpu=machine_has_gpu())
    for name in set(plan.knobs) - before:
        plan.notes[f"knobs.{name}"] = "guessed: Hugging Face TrainingArguments needs it for bf16 on this GPU-less machine"
    return plan


def _couple(plan: KnobPlan, pair: Coupled, given: dict[str, str], taken: set[str]) -> None:
    micro, accum, gb = pair.micro, pair.accum, pair.global_batch
    names = (knob_name(micro), knob_name(accum))
    if any(n in taken or n in plan.knobs for n in names):
        return
    if gb is None or any(s.passing not in EXPRESSIBLE or s.passing == "switch" for s in (micro, accum)):
        plan.deferred.append(f"{micro.key} x {accum.key} (coupled pair; passed as {_style(micro)}"
                             + (", current values unknown" if gb is None else "") + ")")
        return
    m, a = current(micro, given), current(accum, given)
    micros = _powers_of_two_dividing(gb)
    if m not in micros:
        micros = sorted({*micros, m})
    plan.knobs[names[0]] = {**passing_table(micro), "kind": "int", "values": micros, "default": m}
    plan.knobs[names[1]] = {**passing_table(accum), "kind": "int", "values": sorted({gb // v for v in micros}), "default": a}
    plan.notes[f"knobs.{names[0]}"] = (f"guessed: {micro.token} and {accum.token} are a coupled pair: their product "
                                       f"is the global batch ({m} x {a} = {gb}), fixed by a constraint")
    plan.constraints.append({"kind": "product", "knobs": list(names), "value": gb,
                             "reason": "micro-batch x gradient accumulation = the fixed global batch"})


def settings_seq(classified: Classified, given: dict[str, str]) -> int | None:
    """The sequence length among the fixed settings (the token batch's divisor)."""
    seq = next((s for s, _ in classified.fixed if _SEQ.match(s.leaf) and type(current(s, given)) is int), None)
    return current(seq, given) if seq is not None else None


def _token_micro(plan: KnobPlan, pair: TokenBatch, seq: int | None, given: dict[str, str], taken: set[str]) -> None:
    """The batch of a token-sized global batch: powers of two whose batch x sequence length divides it."""
    micro = pair.micro
    assert micro is not None
    name = knob_name(micro)
    total, m = current(pair.total, given), current(micro, given)
    if name in taken or name in plan.knobs or seq is None or micro.passing not in EXPRESSIBLE:
        plan.deferred.append(f"{micro.key} (micro-batch of the token batch {pair.total.key}; "
                             + ("no sequence length found" if seq is None else f"passed as {_style(micro)}") + ")")
        return
    values = sorted({m, *[v for v in _powers_of_two_dividing(total // seq) if total % (v * seq) == 0]})
    plan.knobs[name] = {**passing_table(micro), "kind": "int", "values": values, "default": m}
    plan.notes[f"knobs.{name}"] = (f"guessed: {micro.token} is the batch of one forward; the global batch is "
                                   f"{pair.total.token} = {total} tokens, so accumulation follows "
                                   f"({total} / ({m} x {seq}) = {total // (m * seq)} now)")


def _style(s: Setting) -> str:
    return {"flag-equals": f"{s.token}=VALUE", "hydra": f"{s.token}=VALUE (Hydra override)",
            "code": "a literal in the code", "flag-space": f"{s.token} VALUE", "switch": s.token,
            "env": f"${s.token}"}[s.passing]


def infer_tokens(settings: list[Setting], classified: Classified, given: dict[str, str],
                 data_seq: tuple[int, str] | None = None) -> tuple[int, str] | None:
    """Tokens per optimizer step: micro x accumulation x sequence length, or global batch x sequence length.

    Without a sequence-length setting, ``data_seq`` is the length the job takes from its data (the longest
    example + 1, read from the file). A job with a batch and neither (an image classifier: timm's ``train.py``)
    counts samples: each one is a token, so throughput reads as samples per second."""
    seq = next((s for s in settings if _SEQ.match(s.leaf) and isinstance(current(s, given), int)
                and not isinstance(current(s, given), bool) and current(s, given) > 0), None)
    seq_len = current(seq, given) if seq is not None else data_seq[0] if data_seq is not None else 1
    per = f" x {seq.token} ({seq_len})" if seq is not None else \
        f" x the sequence length {seq_len}: {data_seq[1]}" if data_seq is not None else \
        " samples (no sequence length found: each sample counts as one token)"
    for pair in classified.coupled:
        if pair.global_batch:
            return pair.global_batch * seq_len, f"guessed: {pair.micro.token} x {pair.accum.token} " \
                f"({pair.global_batch}){per}"
    if classified.token_batch is not None:
        total = classified.token_batch.total
        return current(total, given), f"guessed: {total.token}, a global batch counted in tokens"
    batch = next((s for s, r in classified.fixed if r.startswith("global batch")
                  and isinstance(current(s, given), int)), None)
    if batch is not None:
        b = current(batch, given)
        return b * seq_len, f"guessed: {batch.token} ({b}){per}"
    return None


def render_args(args: list[str]) -> str:
    return shlex.join(args)
