"""Settings a training job can be launched with, found statically in every common config convention.

Each reader turns one convention into :class:`Setting` records — argparse flags,
``HfArgumentParser`` dataclasses (with the fields of ``transformers.TrainingArguments``),
module globals overridden by a configurator (``--key=value``), Hydra/OmegaConf YAML
trees (``key.sub=value``), Lightning ``Trainer(...)`` arguments and ``LightningCLI``
(``--trainer.key value``), click/typer options and the environment variables the
code reads. A setting says how it is passed (``passing``); :mod:`bot.stages.init.classify`
decides whether it is a speed knob, part of the task, or half of a coupled pair.
The user's code is parsed, never imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import libcst as cst

from bot.stages.init.scan import scan_flags
from bot.stages.init.setting import Setting, code_text, literal, type_of
from infrarsi.source_text import read_source

# --- argparse -----------------------------------------------------------------------------------------------


def read_argparse(source: str) -> list[Setting]:
    out = []
    for f in scan_flags(source):
        switch = f.action in ("store_true", "store_false")
        out.append(Setting(key=f.dest, convention="argparse", passing="switch" if switch else "flag-space",
                           token=f.flag, default=f.default if not switch else f.action == "store_false",
                           has_default=f.has_default or switch, type="bool" if switch else f.type,
                           choices=f.choices, line=f.line, help=f.help))
    return out


# --- HfArgumentParser dataclasses and TrainingArguments -----------------------------------------------------

# The TrainingArguments fields InfraRSI reasons about, with transformers' defaults.
TRAINING_ARGUMENTS: dict[str, Any] = {
    "bf16": False, "fp16": False, "tf32": None, "torch_compile": False, "gradient_checkpointing": False,
    "optim": "adamw_torch", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "dataloader_num_workers": 0, "dataloader_pin_memory": True, "dataloader_persistent_workers": False,
    "learning_rate": 5e-5, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0, "num_train_epochs": 3.0, "max_steps": -1, "lr_scheduler_type": "linear",
    "warmup_ratio": 0.0, "warmup_steps": 0, "seed": 42, "data_seed": None, "label_smoothing_factor": 0.0,
    "logging_steps": 500, "output_dir": None,
}


class _Dataclasses(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider,)

    def __init__(self) -> None:
        self.fields: dict[str, list[Setting]] = {}

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if not any("dataclass" in code_text(d.decorator) for d in node.decorators):
            return
        fields = []
        for stmt in node.body.body:
            if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.AnnAssign)):
                continue
            ann = stmt.body[0]
            if not isinstance(ann.target, cst.Name):
                continue
            ok, default = literal(ann.value)
            if not ok and isinstance(ann.value, cst.Call) and code_text(ann.value.func).endswith("field"):
                kw = {a.keyword.value: a.value for a in ann.value.args if a.keyword is not None}
                ok, default = literal(kw.get("default"))
            name = ann.target.value
            fields.append(Setting(key=name, convention="hf", passing="flag-space", token=f"--{name}",
                                  default=default, has_default=ok,
                                  type=type_of(default) or code_text(ann.annotation.annotation),
                                  line=self.get_metadata(cst.metadata.PositionProvider, stmt).start.line))
        self.fields[node.name.value] = fields


def read_hf(source: str, module: cst.Module) -> list[Setting]:
    if "HfArgumentParser" not in source:
        return []
    visitor = _Dataclasses()
    cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).visit(visitor)
    out = [s for fields in visitor.fields.values() for s in fields]
    parser = re.search(r"HfArgumentParser\(\s*\(?([^)]*)\)?", source)
    names = set(re.findall(r"\w+", parser.group(1))) if parser else set()
    if "TrainingArguments" in names or "Seq2SeqTrainingArguments" in names or re.search(
            r"class\s+\w+\(\s*(transformers\.)?(Seq2Seq)?TrainingArguments\s*\)", source):
        have = {s.key for s in out}
        out += [Setting(key=k, convention="hf", passing="flag-space", token=f"--{k}", default=v, has_default=True,
                        type=type_of(v)) for k, v in TRAINING_ARGUMENTS.items() if k not in have]
    return out


# --- module globals overridden by a configurator ------------------------------------------------------------


_CONFIGURATOR = re.compile(r"exec\(\s*open\(|for\s+\w+\s+in\s+sys\.argv\[1:\].*globals\(\)", re.S)


def read_globals(source: str, module: cst.Module) -> list[Setting]:
    """nanoGPT style: literal module globals, then ``exec(open('configurator.py').read())`` (``--key=value``)."""
    if not _CONFIGURATOR.search(source) or "configurator" not in source and "globals()" not in source:
        return []
    out = []
    for stmt in module.body:
        if "exec(" in code_text(stmt) and "configurator" in code_text(stmt) or "exec(open" in code_text(stmt):
            break  # only globals defined before the configurator runs can be overridden
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target,
                                                                                         cst.Name):
                name = small.targets[0].target.value
                ok, value = literal(small.value)
                if name.startswith("_") or name.isupper() and not ok:
                    continue
                out.append(Setting(key=name, convention="globals", passing="flag-equals", token=f"--{name}",
                                   default=value if ok else code_text(small.value), has_default=ok,
                                   type=type_of(value) if ok else None))
    return out


# --- Hydra / OmegaConf ----------------------------------------------------------------------------------------


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(tree, dict):
        return out
    for k, v in tree.items():
        if k == "defaults" and not prefix:
            continue
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _yaml(path: Path) -> Any:
    import yaml  # PyYAML, a dependency: imported here so that a command that reads no Hydra config never pays it

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def hydra_config(source: str, entry_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The composed primary config of ``@hydra.main`` (defaults groups included), flattened to dotted keys."""
    m = re.search(r"hydra\.main\(([^)]*)\)", source) or re.search(r"OmegaConf\.load\(\s*['\"]([^'\"]+)", source)
    if not m:
        return None
    if "hydra.main" in m.group(0):
        args = dict(re.findall(r"(config_path|config_name)\s*=\s*['\"]([^'\"]*)['\"]", m.group(1)))
        conf_dir = entry_dir / args.get("config_path", ".")
        name = args.get("config_name", "config")
        path = conf_dir / (name if name.endswith(".yaml") else name + ".yaml")
    else:
        path = entry_dir / m.group(1)
        conf_dir = path.parent
    tree = _yaml(path)
    if not isinstance(tree, dict):
        return None
    flat: dict[str, Any] = {}
    for item in tree.get("defaults") or []:
        if isinstance(item, dict):
            for group, option in item.items():
                sub = _yaml(conf_dir / str(group) / f"{option}.yaml")
                if isinstance(sub, dict) and not str(group).startswith(("override", "hydra")):
                    flat.update(_flatten(sub, f"{group}."))
    flat.update(_flatten(tree))
    return path, flat


def read_hydra(source: str, entry_dir: Path) -> list[Setting]:
    found = hydra_config(source, entry_dir)
    if found is None:
        return []
    _, flat = found
    return [Setting(key=k, convention="hydra", passing="hydra", token=k, default=v, has_default=True,
                    type=type_of(v)) for k, v in flat.items()]


# --- Lightning ------------------------------------------------------------------------------------------------

LIGHTNING_TRAINER: dict[str, Any] = {
    "precision": "32-true", "accumulate_grad_batches": 1, "benchmark": None, "max_steps": -1, "max_epochs": None,
    "gradient_clip_val": None, "deterministic": None,
}


def read_lightning(source: str, module: cst.Module) -> list[Setting]:
    out: list[Setting] = []
    if "LightningCLI" in source:
        for k, v in LIGHTNING_TRAINER.items():
            out.append(Setting(key=f"trainer.{k}", convention="lightning-cli", passing="flag-space",
                               token=f"--trainer.{k}", default=v, has_default=True, type=type_of(v)))
        for cls in module.body:
            if not isinstance(cls, cst.ClassDef):
                continue
            bases = " ".join(code_text(b.value) for b in cls.bases)
            group = "model" if "LightningModule" in bases else "data" if "DataModule" in bases else None
            if group is None:
                continue
            init = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"),
                        None)
            for p in init.params.params[1:] if init else []:
                ok, v = literal(p.default)
                out.append(Setting(key=f"{group}.{p.name.value}", convention="lightning-cli", passing="flag-space",
                                   token=f"--{group}.{p.name.value}", default=v, has_default=ok, type=type_of(v)))
        return out
    for node in _calls(module, re.compile(r"(^|\.)Trainer$")):
        if "lightning" not in source and "pytorch_lightning" not in source:
            break
        for a in node.args:
            if a.keyword is None:
                continue
            ok, v = literal(a.value)
            out.append(Setting(key=a.keyword.value, convention="lightning", passing="code",
                               token=a.keyword.value, default=v if ok else code_text(a.value), has_default=ok,
                               type=type_of(v)))
    return out


def _calls(module: cst.Module, name: re.Pattern[str]) -> list[cst.Call]:
    found: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if name.search(code_text(node.func)):
                found.append(node)

    module.visit(V())
    return found


# --- click / typer --------------------------------------------------------------------------------------------


def read_click_typer(source: str, module: cst.Module) -> list[Setting]:
    out: list[Setting] = []
    if "click" in source:
        for node in _calls(module, re.compile(r"(^|\.)option$")):
            names = [v for ok, v in (literal(a.value) for a in node.args if a.keyword is None) if ok
                     and isinstance(v, str) and v.startswith("--")]
            if not names:
                continue
            kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
            flag = names[0].split("/")[0]
            ok, default = literal(kw.get("default"))
            is_flag = literal(kw.get("is_flag"))[1] is True or "/" in names[0]
            out.append(Setting(key=flag.lstrip("-").replace("-", "_"), convention="click",
                               passing="switch" if is_flag else "flag-space", token=flag, default=default,
                               has_default=ok, type="bool" if is_flag else type_of(default)))
    if "typer" in source:
        for fn in (s for s in module.body if isinstance(s, cst.FunctionDef)):
            decorated = any("command" in code_text(d.decorator) for d in fn.decorators)
            if not decorated and not re.search(rf"typer\.run\(\s*{fn.name.value}\s*\)", source):
                continue
            for p in fn.params.params:
                default = p.default
                if isinstance(default, cst.Call) and "Option" in code_text(default.func):
                    pos = [a for a in default.args if a.keyword is None]
                    default = pos[0].value if pos else None
                ok, v = literal(default)
                if not ok:
                    continue
                flag = "--" + p.name.value.replace("_", "-")
                out.append(Setting(key=p.name.value, convention="typer",
                                   passing="switch" if isinstance(v, bool) else "flag-space", token=flag,
                                   default=v, has_default=True, type=type_of(v)))
    fired = re.search(r"\bFire\(\s*([A-Za-z_]\w*)\s*\)", source) if "fire" in source else None
    if fired:  # python-fire: `fire.Fire(train)` makes each keyword parameter a `--name=value` flag
        for fn in (s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == fired.group(1)):
            for p in [*fn.params.params, *fn.params.kwonly_params]:
                ok, v = literal(_cast_literal(p.default))
                if ok and p.default is not None:
                    out.append(Setting(key=p.name.value, convention="fire", passing="flag-equals",
                                       token=f"--{p.name.value}", default=v, has_default=True, type=type_of(v)))
    return out


def _cast_literal(node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``int(1e5)`` → ``1e5`` cast later by its caller's int: defaults written as a cast of a literal."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("int", "float") \
            and len(node.args) == 1:
        ok, v = literal(node.args[0].value)
        if ok and isinstance(v, int | float) and not isinstance(v, bool):
            return cst.parse_expression(repr(int(v) if node.func.value == "int" else float(v)))
    return node


# --- environment variables ------------------------------------------------------------------------------------

_LAUNCHER_ENV = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK",
                 "CUDA_VISIBLE_DEVICES", "HOME", "PATH", "USER", "SLURM_PROCID", "SLURM_NTASKS", "WANDB_API_KEY",
                 "HF_TOKEN", "PYTHONPATH"}
_ENV_CALL = re.compile(r"(?:os\.environ\.get|os\.getenv|environ\.get|getenv)\(\s*['\"]([A-Za-z_][A-Za-z0-9_]*)['\"]"
                       r"(?:\s*,\s*([^)]*?))?\s*\)|os\.environ\[\s*['\"]([A-Za-z_][A-Za-z0-9_]*)['\"]\s*\]")


def read_env(source: str) -> list[Setting]:
    out: dict[str, Setting] = {}
    for m in _ENV_CALL.finditer(source):
        name = m.group(1) or m.group(3)
        if name in _LAUNCHER_ENV or name in out or re.search(r"TOKEN|KEY|SECRET|PASSWORD", name):
            continue
        try:
            default = ast.literal_eval(m.group(2)) if m.group(2) else None
            ok = m.group(2) is not None
        except (ValueError, SyntaxError):
            default, ok = None, False
        if isinstance(default, str):
            for cast in (int, float):
                try:
                    default = cast(default)
                    break
                except ValueError:
                    pass
        out[name] = Setting(key=name, convention="env", passing="env", token=name, default=default,
                            has_default=ok, type=type_of(default))
    return list(out.values())


def read_code_constants(module: cst.Module) -> list[Setting]:
    """A script with no launch settings at all (karpathy/build-nanogpt's ``train_gpt2.py``: ``B = 64``,
    ``total_batch_size = 524288 # 2**19, ~0.5M, in number of tokens``): its top-level literal constants,
    which only a code edit can change. The line's comment is their help."""
    out = []
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)):
            continue
        ok, value = literal(small.value)
        name = small.targets[0].target.value
        if not ok or name.startswith("_") or not isinstance(value, bool | int | float | str):
            continue
        comment = stmt.trailing_whitespace.comment
        out.append(Setting(key=name, convention="code", passing="code", token=name, default=value, has_default=True,
                           type=type_of(value), help=comment.value.lstrip("# ") if comment else ""))
    return out


def discover(root: Path, entry: str | None) -> list[Setting]:
    """Every setting the entry script can be launched with, across conventions (argparse first)."""
    if entry is None or not (root / entry).is_file():
        return []
    path = root / entry
    try:
        source = read_source(path)
        module = cst.parse_module(source)
    except (OSError, UnicodeError, cst.ParserSyntaxError):
        return []
    out = read_argparse(source)
    have = {s.key for s in out}
    from bot.stages.init.cfgnode import read_cfgnode  # it builds on this module's helpers

    for s in (read_hf(source, module) + read_globals(source, module) + read_hydra(source, path.parent)
              + read_lightning(source, module) + read_click_typer(source, module) + read_cfgnode(source, module, root)
              + read_env(source)):
        if s.key not in have:
            out.append(s)
            have.add(s.key)
    return out or read_code_constants(module)
