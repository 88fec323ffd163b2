"""The three tools the model answers through: their JSON schemas and the validators behind them.

A validator turns a tool input into the record the rest of the bot uses, or
raises :class:`~bot.proposers.llm.InvalidAnswer` with a message the model can
act on. Nothing is taken on trust: the entry command must be the human's,
knob flags must exist in the entry script, a drafted contract must pass the
strict loader, a prior may only name a feature of the search space with a
value inside the contract's domain, a patch must be one parseable definition
whose target is a repo-relative ``path.py::Qual.name``. Whether the target is
editable is the scope audit's call, made on the actual tree (as for catalog
patches), so there is one judge of scope, not two that could disagree.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path, PurePosixPath
from typing import Any

from bot.patching.replace import parse_replacement
from bot.patching.results import Broken
from bot.proposers.llm import InvalidAnswer, Tool
from infrarsi.seams.proposer import RepoSummary
from infrarsi.contract.entry import command_and_args, split_command, strip_flags
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import CONTRACT_FILE, parse_contract
from infrarsi.contract.model import CONTRACT_VERSION, Contract
from infrarsi.patches import Effect, PatchSpec

MAX_PATCHES = 3
_RATIO = {"type": "number", "exclusiveMinimum": 0, "maximum": 20}
_SIGMA = {"type": "number", "minimum": 0, "maximum": 3}
_EFFECT_PROPS = {"time_ratio": _RATIO, "time_sigma": _SIGMA, "mem_ratio": _RATIO, "mem_sigma": _SIGMA}

DRAFT_KEYS: dict[str, str] = {  # dotted key → what it is (shown to the model)
    "workload.command": "entry command as an array, e.g. [\"python\", \"train.py\"]",
    "workload.args": "the fixed arguments of the human's command, minus every knob flag and its value",
    "workload.tokens_per_step": "tokens each optimizer step processes (global batch x sequence length)",
    "workload.family": "\"dense\" or \"moe\"",
    "timing.source": "\"probe\" if the repo reports steps through infrarsi.probe, else \"stdout\"",
    "timing.warmup_steps": "steps excluded from timing (>= 1)",
    "timing.measured_steps": "steps measured (>= 2); warm-up + measured = the job's steps",
    "timing.stdout_regex": "for source \"stdout\": a regex with named groups loss (and step, tokens)",
    "loss.rtol": "per-step relative loss tolerance (e.g. 0.02)",
    "scope.editable": "qualified symbols patches may change, e.g. \"model.py::MLP\"",
    "scope.locked": "files whose bytes must never change: timing, loss reporting, data, the launcher",
    "scope.allow_imports": "whether patches may add module-level imports (false unless needed)",
    "budget.trials": "trials per run",
    "budget.trial_timeout_s": "seconds after which a trial is killed",
    "verify.min_effect": "optional: the smallest speedup worth promoting, as a fraction (default 0.01)",
    "verify.max_pairs": "optional: interleaved A/B pairs at most when verifying (>= 4, default 12)",
    "verify.top_k": "optional: candidates re-verified at the end of a run (default 3)",
}
CONSTRAINT_KINDS = ("divides", "product", "forbid")
REQUIRED_DRAFT_KEYS = ("workload.command", "workload.args", "workload.tokens_per_step", "timing.source",
                       "timing.warmup_steps", "timing.measured_steps", "loss.rtol", "scope.editable",
                       "scope.locked", "scope.allow_imports", "budget.trials", "budget.trial_timeout_s")

DRAFT_TOOL = Tool(
    name="draft_contract",
    description="Draft the InfraRSI contract for the training command: every field with the value and a one-line "
                "rationale a reviewer can check against the repository.",
    schema={
        "type": "object",
        "properties": {
            "fields": {"type": "array", "items": {
                "type": "object",
                "properties": {"key": {"type": "string", "enum": sorted(DRAFT_KEYS)}, "value": {},
                               "rationale": {"type": "string", "minLength": 1}},
                "required": ["key", "value", "rationale"]}},
            "knobs": {"type": "array", "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
                               "kind": {"type": "string", "enum": ["categorical", "int", "float", "bool"]},
                               "flag": {"type": "string"}, "values": {"type": "array"},
                               "low": {"type": "number"}, "high": {"type": "number"}, "default": {},
                               "switch": {"type": "boolean"}, "rationale": {"type": "string", "minLength": 1}},
                "required": ["name", "kind", "flag", "default", "rationale"]}},
            "constraints": {"type": "array", "description": "known constraints between knobs, e.g. the micro-batch "
                            "must divide the global batch (kind divides: knob, value); knob values that multiply to "
                            "a fixed value (kind product: knobs, value); a forbidden combination (kind forbid: when)",
                            "items": {
                "type": "object",
                "properties": {"kind": {"type": "string", "enum": list(CONSTRAINT_KINDS)},
                               "knob": {"type": "string"}, "knobs": {"type": "array", "items": {"type": "string"}},
                               "value": {"type": "number"}, "when": {"type": "object"},
                               "rationale": {"type": "string", "minLength": 1}},
                "required": ["kind", "rationale"]}},
        },
        "required": ["fields", "knobs"],
    },
)

PRIORS_TOOL = Tool(
    name="state_priors",
    description="For each listed search-space feature, the expected multiplicative effect on step time and on peak "
                "memory (ratio to the baseline) and the standard deviation of its log, with where the figure "
                "comes from.",
    schema={
        "type": "object",
        "properties": {"effects": {"type": "array", "items": {
            "type": "object",
            "properties": {"feature": {"type": "string"}, **_EFFECT_PROPS,
                           "rationale": {"type": "string", "minLength": 1}},
            "required": ["feature", *_EFFECT_PROPS, "rationale"]}}},
        "required": ["effects"],
    },
)

PATCH_TOOL = Tool(
    name="propose_patches",
    description=f"Propose up to {MAX_PATCHES} code patches. Each replaces exactly one editable function or class "
                "with a faster definition that computes the same thing: the full source of the new definition.",
    schema={
        "type": "object",
        "properties": {"patches": {"type": "array", "maxItems": MAX_PATCHES, "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,40}$"},
                           "title": {"type": "string"},
                           "target": {"type": "string", "description": "path.py::Qualified.name"},
                           "replacement": {"type": "string", "description": "full source of one def or class"},
                           "rationale": {"type": "string", "minLength": 1},
                           "evidence": {"type": "string", "description": "the profile figures or trials it answers"},
                           **_EFFECT_PROPS},
            "required": ["name", "title", "target", "replacement", "rationale", "evidence", *_EFFECT_PROPS]}}},
        "required": ["patches"],
    },
)


# -- helpers ---------------------------------------------------------------------------

def _list(data: dict[str, Any], key: str) -> list[Any]:
    if key not in data:
        raise InvalidAnswer(f"missing required field {key!r}")
    value = data[key]
    if isinstance(value, str):  # a model sometimes sends a nested array as a JSON string
        try:
            value = json.loads(value)
        except ValueError as e:
            raise InvalidAnswer(f"{key}: invalid JSON ({e})") from None
    if not isinstance(value, list):
        raise InvalidAnswer(f"{key}: expected an array, got {type(value).__name__}")
    return value


def _item(value: Any, where: str, required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidAnswer(f"{where}: expected an object, got {type(value).__name__}")
    missing = [k for k in required if k not in value]
    if missing:
        raise InvalidAnswer(f"{where}: missing required field(s) {', '.join(missing)}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidAnswer(f"{where}: expected a non-empty string")
    return value.strip()


def _effect(item: dict[str, Any], where: str, source: str) -> Effect:
    values = {}
    for key, (low, high) in {"time_ratio": (0.0, 20.0), "mem_ratio": (0.0, 20.0), "time_sigma": (-1e-12, 3.0),
                             "mem_sigma": (-1e-12, 3.0)}.items():
        v = item.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low < v <= high:
            raise InvalidAnswer(f"{where}.{key}: expected a number in ({max(low, 0)}, {high}], got {v!r}")
        values[key] = float(v)
    return Effect(source=source, **values)


# -- draft -----------------------------------------------------------------------------

def human_command(command: str) -> tuple[list[str], list[str]]:
    """(entry command, the human's arguments) as the built-in drafter splits them."""
    return command_and_args(split_command(command))


def validate_draft(data: dict[str, Any], *, command: str, summary: RepoSummary, model: str
                   ) -> tuple[dict[str, Any], dict[str, str]]:
    table: dict[str, Any] = {}
    rationale: dict[str, str] = {}
    for i, raw in enumerate(_list(data, "fields")):
        item = _item(raw, f"fields[{i}]", ("key", "value", "rationale"))
        key = item["key"]
        if key not in DRAFT_KEYS:
            raise InvalidAnswer(f"fields[{i}].key: {key!r} is not a contract field this tool sets")
        if key in rationale:
            raise InvalidAnswer(f"fields[{i}].key: {key!r} given twice")
        section, name = key.split(".")
        table.setdefault(section, {})[name] = item["value"]
        rationale[key] = _text(item["rationale"], f"fields[{i}].rationale")
    missing = [k for k in REQUIRED_DRAFT_KEYS if k not in rationale]
    if missing:
        raise InvalidAnswer(f"fields: missing required field(s) {', '.join(missing)}")

    flags = {f.flag: f for f in summary.flags}
    knobs: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(_list(data, "knobs")):
        item = _item(raw, f"knobs[{i}]", ("name", "kind", "flag", "default", "rationale"))
        name = item["name"]
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in knobs:
            raise InvalidAnswer(f"knobs[{i}].name: {name!r} is not a new lower_snake_case name")
        if item["flag"] not in flags:
            raise InvalidAnswer(f"knobs[{i}].flag: {item['flag']!r} is not an argument of the entry script "
                                f"(its flags: {', '.join(sorted(flags)) or 'none'})")
        knob = {k: item[k] for k in ("flag", "kind", "values", "low", "high", "default", "switch") if k in item}
        knobs[name] = knob
        rationale[f"knobs.{name}"] = _text(item["rationale"], f"knobs[{i}].rationale")
    if knobs:
        table["knobs"] = knobs
    constraints = []
    for i, raw in enumerate(_list(data, "constraints") if "constraints" in data else []):
        item = _item(raw, f"constraints[{i}]", ("kind", "rationale"))
        if item["kind"] not in CONSTRAINT_KINDS:
            raise InvalidAnswer(f"constraints[{i}].kind: expected one of {', '.join(CONSTRAINT_KINDS)}, "
                                f"got {item['kind']!r}")
        why = _text(item["rationale"], f"constraints[{i}].rationale")
        constraints.append({**{k: item[k] for k in ("kind", "knob", "knobs", "value", "when") if k in item},
                            "reason": why})
    if constraints:
        table["constraints"] = constraints
        rationale["constraints"] = "; ".join(c["reason"] for c in constraints)
    table = {"version": CONTRACT_VERSION, **table}

    prog, user_args = human_command(command)
    if table["workload"]["command"] != prog:
        raise InvalidAnswer(f"workload.command must be the human's entry command {prog!r}, "
                            f"got {table['workload']['command']!r}")
    expected = strip_flags(user_args, {k["flag"] for k in knobs.values()})
    if table["workload"]["args"] != expected:
        raise InvalidAnswer(f"workload.args must be the human's arguments minus the knob flags, i.e. {expected!r}; "
                            f"got {table['workload']['args']!r}")
    try:
        parse_contract(table, source=summary.root / CONTRACT_FILE, root=summary.root)
    except ContractError as e:
        raise InvalidAnswer(f"the contract does not load: {e}") from None
    del model
    return table, rationale


# -- priors ----------------------------------------------------------------------------

def validate_priors(data: dict[str, Any], *, features: tuple[str, ...], contract: Contract, model: str
                    ) -> tuple[dict[str, Effect], dict[str, str]]:
    allowed = set(features)
    knobs = {k.name: k for k in contract.knobs}
    effects: dict[str, Effect] = {}
    rationale: dict[str, str] = {}
    for i, raw in enumerate(_list(data, "effects")):
        item = _item(raw, f"effects[{i}]", ("feature", *_EFFECT_PROPS, "rationale"))
        feature = item["feature"]
        if feature not in allowed:
            name, _, value = str(feature).partition("=")
            knob = knobs.get(name)
            if knob is not None and value and not any(value == knob.codec.to_cli(v) or feature == knob.codec.feature(v)
                                                      for v in (knob.values or ())):
                raise InvalidAnswer(f"effects[{i}].feature: {value!r} is outside the contract's domain of knob "
                                    f"{name!r} ({knob.domain_text()})")
            raise InvalidAnswer(f"effects[{i}].feature: {feature!r} is not a feature of the search space "
                                f"(features: {', '.join(features)})")
        effects[feature] = _effect(item, f"effects[{i}]", f"prior stated by {model}")
        rationale[feature] = _text(item["rationale"], f"effects[{i}].rationale")
    return effects, rationale


# -- patches ---------------------------------------------------------------------------

_TARGET = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\.py::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def validate_patches(data: dict[str, Any], *, model: str) -> list[PatchSpec]:
    items = _list(data, "patches")
    if len(items) > MAX_PATCHES:
        raise InvalidAnswer(f"patches: at most {MAX_PATCHES}, got {len(items)}")
    out: list[PatchSpec] = []
    for i, raw in enumerate(items):
        where = f"patches[{i}]"
        item = _item(raw, where, ("name", "title", "target", "replacement", "rationale", "evidence",
                                  *_EFFECT_PROPS))
        name = item["name"]
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{2,40}", name):
            raise InvalidAnswer(f"{where}.name: expected lower_snake_case of 3 to 41 characters, got {name!r}")
        target = item["target"]
        path = str(target).partition("::")[0]
        if (not isinstance(target, str) or not _TARGET.match(target) or ".." in PurePosixPath(path).parts
                or Path(path).is_absolute()):
            raise InvalidAnswer(f"{where}.target: expected a repo-relative 'path.py::Qual.name', got {target!r}")
        replacement = item["replacement"]
        if not isinstance(replacement, str):
            raise InvalidAnswer(f"{where}.replacement: expected the source of one definition as a string")
        parsed = parse_replacement(replacement)
        if isinstance(parsed, Broken):
            raise InvalidAnswer(f"{where}.replacement: {parsed.error}")
        leaf = target.rsplit("::", 1)[1].rsplit(".", 1)[-1]
        if parsed.name.value != leaf:
            raise InvalidAnswer(f"{where}.replacement defines {parsed.name.value!r} but the target is {leaf!r}")
        digest = hashlib.sha256(f"{target}\n{replacement}".encode()).hexdigest()[:8]
        out.append(PatchSpec(id=f"llm_{name}_{digest}", title=_text(item["title"], f"{where}.title"),
                             rationale=_text(item["rationale"], f"{where}.rationale"), targets=(target,),
                             effect=_effect(item, where, f"expected by {model}"), kind="replacement",
                             replacement=replacement, evidence=str(item["evidence"])))
    return out
