"""Read a training repo statically with libcst: its argparse flags and what each file does.

Nothing here imports the user's code: ``init`` must be safe on any repo.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import libcst as cst

from bot.progress import Ticker
from infrarsi.contract.knob_codec import python_literal
from infrarsi.rundir import STATE_DIR
from infrarsi.seams.proposer import ArgFlag, FileSummary, RepoSummary
from infrarsi.source_text import read_source

_SKIP_DIRS = {".git", STATE_DIR, ".venv", "venv", "env", "__pycache__", "node_modules", "build", "dist",
              ".tox", ".mypy_cache", ".pytest_cache", "site-packages"}
_TIMING_NAMES = ("perf_counter", "time.time", "monotonic", "infrarsi", "probe.step")


def _literal(node: cst.BaseExpression) -> tuple[bool, Any]:
    """The value of a literal expression (numbers, strings, lists, negatives), or (False, None)."""
    return python_literal(cst.Module(body=[]).code_for_node(node))


def _name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


class _ArgparseVisitor(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider,)

    def __init__(self) -> None:
        self.flags: list[ArgFlag] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "add_argument"):
            return
        positional = [a for a in node.args if a.keyword is None]
        names = [v for ok, v in (_literal(a.value) for a in positional) if ok and isinstance(v, str)]
        long = [n for n in names if n.startswith("--")] or [n for n in names if n.startswith("-")]
        if not long:
            return
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        flag = long[0]
        dest = flag.lstrip("-").replace("-", "_")
        if "dest" in keywords:
            ok, value = _literal(keywords["dest"])
            dest = value if ok and isinstance(value, str) else dest
        has_default, default = _literal(keywords["default"]) if "default" in keywords else (False, None)
        choices = None
        if "choices" in keywords:
            ok, value = _literal(keywords["choices"])
            choices = tuple(value) if ok and isinstance(value, list | tuple) else None
        action = None
        if "action" in keywords:
            ok, value = _literal(keywords["action"])
            action = value if ok else None
        help_text = ""
        if "help" in keywords:
            ok, value = _literal(keywords["help"])
            help_text = value if ok and isinstance(value, str) else ""
        type_name = _name(keywords["type"]) if "type" in keywords else None
        pos = self.get_metadata(cst.metadata.PositionProvider, node)
        self.flags.append(ArgFlag(flag=flag, dest=dest, type=type_name, default=default, has_default=has_default,
                                  choices=choices, action=action, help=help_text, line=pos.start.line,
                                  aliases=tuple(n for n in names if n != flag and n.startswith("-"))))


def scan_flags(source: str) -> tuple[ArgFlag, ...]:
    """Every ``add_argument("--flag", ...)`` call in ``source``."""
    wrapper = cst.metadata.MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    visitor = _ArgparseVisitor()
    wrapper.visit(visitor)
    return tuple(visitor.flags)


#: Code that trains or builds what trains: a backward pass, an optimizer or a data loader made, the parameters
#: handed over (pytorch/examples' ``main_worker`` and ``train``, torchvision references' ``train_one_epoch``).
_TRAINING_CODE = re.compile(r"\.backward\(|\boptim\.[A-Z]\w*\(|\bDataLoader\(|\.parameters\(\)")


def summarize_file(root: Path, path: Path) -> FileSummary | None:
    rel = path.relative_to(root).as_posix()
    try:
        source = read_source(path)
        module = cst.parse_module(source)
    except (UnicodeError, cst.ParserSyntaxError, OSError):
        return None
    classes, modules, functions, class_bases, trains = [], [], [], [], []
    imported = imported_from(module)
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            classes.append(stmt.name.value)
            bases = [module.code_for_node(b.value) for b in stmt.bases if b.keyword is None]
            class_bases.append((stmt.name.value, tuple(bases)))
            if any(_is_module_base(b, imported) for b in bases):
                modules.append(stmt.name.value)
        elif isinstance(stmt, cst.FunctionDef):
            functions.append(stmt.name.value)
            if _TRAINING_CODE.search(module.code_for_node(stmt)):
                trains.append(stmt.name.value)
    return FileSummary(path=rel, modules=tuple(modules), classes=tuple(classes), functions=tuple(functions),
                       trains=tuple(trains), is_script=bool(_READS_COMMAND_LINE.search(source)),
                       uses_timing=any(n in source for n in _TIMING_NAMES),
                       uses_probe="infrarsi" in source and "probe" in source,
                       lines=source.count("\n") + 1, class_bases=tuple(class_bases))


#: A file that reads its own command line is an entry script (train_*.py, scripts/*.py), not model code.
_READS_COMMAND_LINE = re.compile(r"\.parse_args\(|\.parse_known_args\(|\bFire\(|@hydra\.main|\bLightningCLI\(|"
                                 r"\.merge_from_args\(\s*sys\.argv|typer\.run\(|@click\.command|"
                                 r"parse_args_into_dataclasses\(|exec\(open\(")


# Libraries whose classes a training command subclasses as its model (nn.Module subclasses).
_MODEL_LIBRARIES = ("torch", "transformers", "lightning", "pytorch_lightning", "timm", "peft", "diffusers",
                    "torchvision", "open_clip", "x_transformers", "flash_attn", "mamba_ssm", "torchtune", "litgpt")


_NOT_MODULES = re.compile(r"(Trainer|Arguments|Config|DataModule|Dataset|Callback|Tokenizer|Processor|Collator|"
                          r"Sampler|Logger|Scheduler|Optimizer|CLI|Loader|Mixin|Output)$")
_MODEL_LEAF = re.compile(r"(Model|Module|For[A-Z]\w*|Transformer|Net|Encoder|Decoder|Block|Layer|Attention|MLP|Head|"
                         r"Embedding|Norm)$")


def imported_from(module: cst.Module) -> dict[str, str]:
    """Local name -> the module it was imported from (``from transformers import GPT2LMHeadModel``)."""
    out: dict[str, str] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names,
                                                                                               cst.ImportStar):
                source = cst.Module(body=[]).code_for_node(small.module)
                for alias in small.names:
                    name = alias.asname.name if alias.asname else alias.name  # type: ignore[union-attr]
                    out[cst.Module(body=[]).code_for_node(name)] = source
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    full = cst.Module(body=[]).code_for_node(alias.name)
                    name = alias.asname.name if alias.asname else alias.name  # type: ignore[union-attr]
                    out[cst.Module(body=[]).code_for_node(name).split(".")[0]] = full
    return out


def _is_module_base(base: str, imported: dict[str, str]) -> bool:
    """Whether a base class expression names an ``nn.Module`` subclass of a model library.

    ``nn.Module``, ``nn.Transformer``, ``torch.nn.Sequential``, ``PreTrainedModel``,
    ``GPT2LMHeadModel``, ``L.LightningModule``... — judged from where the name was
    imported, not only from how it ends.
    """
    head = base.split("[", 1)[0].split(".")[0]
    leaf = base.split("[", 1)[0].split(".")[-1]
    origin = imported.get(head, "")
    if _NOT_MODULES.search(leaf):
        return False
    if leaf == "Module" or re.match(r"^(torch\.)?nn\.[A-Z]", base) or origin.endswith("torch.nn"):
        return True
    if origin.split(".")[0] in _MODEL_LIBRARIES and origin.split(".")[0] != "torch":
        return bool(_MODEL_LEAF.search(leaf))
    return base.endswith("Module")


def _with_local_modules(files: tuple[FileSummary, ...]) -> tuple[FileSummary, ...]:
    """Classes deriving from the repo's own module classes are modules too (to a fixed point)."""
    known = {c for f in files for c in f.modules}
    changed = True
    while changed:
        changed = False
        for f in files:
            for name, bases in f.class_bases:
                if name not in known and any(b.split(".")[-1] in known for b in bases):
                    known.add(name)
                    changed = True
    return tuple(replace(f, modules=tuple(c for c in f.classes if c in known)) for f in files)


def python_files(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if any(part in _SKIP_DIRS for part in path.relative_to(root).parts[:-1]):
            continue
        out.append(path)
    return out


def scan_repo(root: Path, entry: str | None, *, outside_git: Mapping[str, str] | None = None) -> RepoSummary:
    """Summarise every Python file; read the entry script's flags. ``outside_git``: what git does not track in
    ``root`` (the workspace's :meth:`~infrarsi.seams.workspace.Workspace.outside_git`), where ``[data]`` is drafted
    from; none outside git."""
    root = root.resolve()
    paths = python_files(root)
    ticker = Ticker(label="init: reading the repo's Python files")
    summaries = []
    for i, p in enumerate(paths):
        ticker.tick(i, len(paths), "files")
        summaries.append(summarize_file(root, p))
    ticker.done(f"{len(paths)} files read")
    files = _with_local_modules(tuple(s for s in summaries if s is not None))
    flags: tuple[ArgFlag, ...] = ()
    if entry is not None and (root / entry).is_file():
        try:
            flags = scan_flags(read_source(root / entry))
        except cst.ParserSyntaxError:
            flags = ()
    return RepoSummary(root=root, entry=entry, flags=flags, files=files, outside_git=dict(outside_git or {}))
