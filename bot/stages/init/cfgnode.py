"""minGPT-style config trees: ``CfgNode`` defaults built in code, overridden by ``--a.b=value``.

karpathy/minGPT (and the projects written on it) build the configuration in
code — ``C = CN(); C.trainer = Trainer.get_default_config(); C.model.model_type
= 'gpt-mini'`` — and let the command line override any leaf with
``config.merge_from_args(sys.argv[1:])``, which reads ``--trainer.batch_size=32``
and parses the value with ``ast.literal_eval``. The defaults are found
statically: the builder function the merged config comes from, each
``C.<path> = <literal>`` in it, and each ``C.<group> = X.get_default_config()``
followed into class ``X`` (in the entry script or a repo module it imports).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import libcst.matchers as m

from bot.stages.init.setting import Setting, literal, type_of
from bot.stages.init.scan import imported_from
from infrarsi.source_text import read_source

_MERGE = "merge_from_args"


def read_cfgnode(source: str, module: cst.Module, root: Path) -> list[Setting]:
    if _MERGE not in source:
        return []
    functions = _functions(module)
    builder = _builder_name(module)
    if builder is None or builder not in functions:
        return []
    imports = imported_from(module)
    defaults: dict[str, object] = {}
    _walk(functions[builder], "", defaults, module, imports, root, depth=0)
    return [Setting(key=key, convention="cfgnode", passing="flag-equals", token=f"--{key}", default=value,
                    has_default=True, type=type_of(value)) for key, value in defaults.items()]


def _functions(module: cst.Module) -> dict[str, cst.FunctionDef]:
    return {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}


def _builder_name(module: cst.Module) -> str | None:
    """``get_config`` in ``config = get_config(); config.merge_from_args(...)``."""
    assigned: dict[str, str] = {}
    merged: str | None = None
    for node in m.findall(module, m.Assign() | m.Call()):  # in source order
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Name):
            assigned[node.targets[0].target.value] = node.value.func.value
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == _MERGE \
                and isinstance(node.func.value, cst.Name):
            merged = node.func.value.value
    return assigned.get(merged) if merged else None


def _path(target: cst.BaseExpression, root_name: str) -> str | None:
    """``C.trainer.batch_size`` → ``trainer.batch_size`` when ``C`` is ``root_name``."""
    parts: list[str] = []
    while isinstance(target, cst.Attribute):
        parts.append(target.attr.value)
        target = target.value
    if isinstance(target, cst.Name) and target.value == root_name and parts:
        return ".".join(reversed(parts))
    return None


def _walk(func: cst.FunctionDef, prefix: str, defaults: dict[str, object], module: cst.Module,
          imports: dict[str, str], root: Path, depth: int) -> None:
    """The leaves ``func`` sets on the node it returns, under ``prefix``."""
    if depth > 4:
        return
    returned = next((s.value.value for s in _statements(func) if isinstance(s, cst.Return)
                     and isinstance(s.value, cst.Name)), None)
    if returned is None:
        return
    for stmt in _statements(func):
        if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1):
            continue
        key = _path(stmt.targets[0].target, returned)
        if key is None:
            continue
        ok, value = literal(stmt.value)
        if ok:
            defaults[prefix + key] = value
            continue
        group = _default_config_of(stmt.value, module, imports, root)
        if group is not None:
            _walk(group[0], f"{prefix}{key}.", defaults, group[1], imported_from(group[1]), root, depth + 1)


def _statements(func: cst.FunctionDef) -> list[cst.BaseSmallStatement]:
    out: list[cst.BaseSmallStatement] = []
    for line in func.body.body:
        if isinstance(line, cst.SimpleStatementLine):
            out += list(line.body)
    return out


def _default_config_of(value: cst.BaseExpression, module: cst.Module, imports: dict[str, str],
                       root: Path) -> tuple[cst.FunctionDef, cst.Module] | None:
    """``Trainer.get_default_config()`` → that method and the module it is in."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and isinstance(value.func.value, cst.Name)):
        return None
    owner, method = value.func.value.value, value.func.attr.value
    home = module if owner not in imports else _load(root, imports[owner])
    if home is None:
        return None
    for stmt in home.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == owner:
            for item in stmt.body.body:
                if isinstance(item, cst.FunctionDef) and item.name.value == method:
                    return item, home
    return None


def _load(root: Path, dotted: str) -> cst.Module | None:
    rel = Path(*dotted.split("."))
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            try:
                return cst.parse_module(read_source(candidate))
            except (OSError, UnicodeError, cst.ParserSyntaxError):
                return None
    return None
