"""Draft ``[scope]`` from what the entry point runs: the repo's own model code is editable, the rest stays locked.

A repo whose model is a package inside it (karpathy/minGPT's ``mingpt/``,
nanochat's ``nanochat/``, lucidrains' ``x_transformers/``) also holds tests,
other entry scripts (``projects/adder``, ``scripts/chat_sft.py``,
``train_copy.py``) and helpers. Only what the command reaches (the reach analysis,
:mod:`bot.patching.reach`) is a candidate, never ``tests/`` and never another entry
script; within it the ``nn.Module`` classes and the functions that train are
editable. Functions that build or split the dataset, evaluate, log, save
checkpoints, time steps or schedule the learning rate decide what the job computes
or reports, not how fast: they stay locked, each named with its reason.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass

from bot.patching.reach import Reach
from infrarsi.seams.proposer import RepoSummary
from infrarsi.source_text import read_source

#: (reason, name pattern) in the order they are tried: the first that matches a function's name says why it is
#: locked. LR schedules and data readers beside model classes (build-nanogpt's ``get_lr``, ``load_tokens``) too.
_ROLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("schedules the learning rate", re.compile(r"(^|_)(lr|learning_rate|schedule|scheduler|warmup)(_|$)")),
    ("builds or splits the dataset", re.compile(
        r"(^|_)(datasets?|corpus|vocab|collate|download|preprocess)(_|$)|^tokeni[sz]e|^(batch|batches|data)$"
        r"|^(load|read|get|make|create|build|prepare|split)_(data|dataset|datasets|batch|batches|tokens?|shards?|"
        r"words|splits?|corpus|text|examples)(_|$)")),
    # not a bare `log` (a model's math helper: `log(t, eps)`, `log_prob`), but what writes a log
    ("logs or prints", re.compile(r"(^|_)(logging|logger|print0|wandb|tensorboard|writer|report|banner)(_|$)"
                                  r"|^print(_|$)|^log_(metrics?|stats?|scalars?|images?|samples?|results?|progress|"
                                  r"step|info|config|params|to_\w+)(_|$)")),
    ("evaluates", re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|val|test|estimate_loss|metrics?|"
                             r"accuracy|bpb|perplexity|core_metric)(_|$)")),
    ("saves or loads checkpoints", re.compile(r"(^|_)(save|saving|ckpt|checkpoint|resume|export|serialize|"
                                              r"load_state)(_|$)")),
    ("times steps", re.compile(r"(^|_)(timer|timing|throughput|mfu|flops|benchmark|profile|stopwatch)(_|$)"
                               r"|^(step_)?time(_|$)")),
)
#: Files whose whole content reads data, evaluates, logs or checkpoints (DeiT's datasets.py, nanochat's
#: loss_eval.py and checkpoint_manager.py): locked as files, so their hash is checked too.
_LOCKED_FILE = re.compile(r"data|dataset|loader|harness|metric|eval|checkpoint|ckpt|logger|logging|tokeni[sz]er")
_ENTRY_NAMES = re.compile(r"(^build_|^make_|step|optimi[sz]er|^create_)")
_TIMING = re.compile(r"perf_counter|time\.time\(|monotonic\(|synchronize\(")
_TEST = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$")
_MAX_NAMED = 30


@dataclass(frozen=True, kw_only=True, slots=True)
class DraftedScope:
    """``scope.editable``, ``scope.locked`` and the notes that say why."""

    editable: list[str]
    locked: list[str]
    editable_note: str
    locked_note: str


def is_test_file(path: str) -> bool:
    return bool(_TEST.search(path))


def role_of(name: str, body: str = "") -> str | None:
    """Why a function stays locked, or None when it may be editable: its name, or a body that reads the clock
    without training (a step timer)."""
    low = name.lower()
    for reason, pattern in _ROLES:
        if pattern.search(low) and not (reason.startswith("builds") and "loader" in low):
            return reason  # a loader's builder stays editable: its workers and pinning are a patch's
    if body and _TIMING.search(body) and ".backward(" not in body:
        return "times steps"
    return None


def draft_scope(summary: RepoSummary, reach: Reach) -> DraftedScope:
    """The scope of the job ``summary`` was scanned for, from what ``reach`` says it runs."""
    known = reach.modules is not None and summary.entry is not None and summary.entry in reach.modules
    editable: list[str] = []
    locked: list[str] = []
    kept: list[str] = []  # "path::name: reason"
    for f in summary.files:
        if is_test_file(f.path) or (f.path != summary.entry and f.is_script):
            continue  # tests and other entry scripts are never patched
        if known and not reach.reaches_file(f.path):
            continue
        name = posixpath.basename(f.path)
        if f.path != summary.entry and not f.modules and (f.uses_timing or f.uses_probe or _LOCKED_FILE.search(name)):
            locked.append(f.path)
            continue
        bodies = _function_bodies(summary, f.path)
        reached = (lambda sym: f"{f.path}::{sym}" in reach.symbols) if known else (lambda sym: True)
        if f.modules:
            editable += [f"{f.path}::{c}" for c in f.modules if reached(c)]
            candidates = [fn for fn in f.functions if not fn.startswith("_")]
        elif f.path == summary.entry:
            named = [fn for fn in f.functions if _ENTRY_NAMES.search(fn)]
            # no builder or step function by name (pytorch/examples' imagenet: main_worker, train): the
            # functions that run the backward pass or build the optimizer and loader
            candidates = [fn for fn in named or f.trains if not fn.startswith("_")]
        else:
            # a training-loop module beside the entry point (DeiT's and torchvision references' engine.py:
            # train_one_epoch): where autocast, the scaler and the step are
            candidates = [fn for fn in f.trains if not fn.startswith("_")]
        for fn in candidates:
            if not reached(fn):
                continue
            reason = role_of(fn, bodies.get(fn, ""))
            if reason is None:
                editable.append(f"{f.path}::{fn}")
            else:
                kept.append(f"{f.path}::{fn}: {reason}")
        if not f.modules:  # what else of the file runs and why it is not offered
            kept += [f"{f.path}::{fn}: {reason}" for fn in f.functions if fn not in candidates and reached(fn)
                     and (reason := role_of(fn, bodies.get(fn, ""))) is not None]
    where = f"what {summary.entry} runs" if known else "the repo's files (what the entry point runs is unknown)"
    editable_note = (f"guessed: from {where}: the nn.Module classes of the repo's own model code and the functions "
                     "that build or step the model; never tests/ or another entry script")
    locked_note = ("guessed: files that time steps, report loss or load data; everything not editable is implicitly "
                   "locked too")
    if kept:
        shown = kept[:_MAX_NAMED] + ([f"and {len(kept) - _MAX_NAMED} more"] if len(kept) > _MAX_NAMED else [])
        locked_note += ", among them these functions the job runs, locked by default:\n" + "\n".join(
            f"  {line}" for line in shown)
    return DraftedScope(editable=editable, locked=locked, editable_note=editable_note, locked_note=locked_note)


def _function_bodies(summary: RepoSummary, path: str) -> dict[str, str]:
    """Top-level function name -> its source, for the body checks of :func:`role_of`."""
    try:
        source = read_source(summary.root / path)
        tree = ast.parse(source)
    except (OSError, UnicodeError, SyntaxError, ValueError):
        return {}
    return {node.name: ast.get_source_segment(source, node) or "" for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
