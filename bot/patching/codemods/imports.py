"""How a file can refer to ``torch.nn.functional.gelu`` with the imports it already has.

A codemod should write ``F.gelu`` in a file that did ``import torch.nn.functional
as F`` and ``torch.nn.functional.gelu`` in one that only did ``import torch``:
adding an import is a module-level change that the contract may forbid, so it
is the last resort, and it is reported when it happens.
"""

from __future__ import annotations

import libcst as cst

from bot.patching.symbols import code_of

Bindings = dict[str, str]  # local name -> dotted thing it refers to


def module_bindings(module: cst.Module) -> Bindings:
    """Names bound by the module's top-level imports (also inside top-level ``if``/``try``,
    but not under ``if TYPE_CHECKING:``, which does not run)."""
    bindings: Bindings = {}
    _collect(module.body, bindings)
    return bindings


def _collect(body: object, bindings: Bindings) -> None:
    for statement in body:  # type: ignore[attr-defined]
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                _bind(small, bindings)
        elif isinstance(statement, cst.If):
            if "TYPE_CHECKING" not in code_of(statement.test):
                _collect(statement.body.body, bindings)
                if statement.orelse is not None:
                    _collect(statement.orelse.body.body, bindings)  # type: ignore[union-attr]
        elif isinstance(statement, cst.Try):
            _collect(statement.body.body, bindings)


def _bind(small: cst.BaseSmallStatement, bindings: Bindings) -> None:
    if isinstance(small, cst.Import):
        for alias in small.names:
            dotted = code_of(alias.name)
            if alias.asname is not None:
                bindings[code_of(alias.asname.name)] = dotted
            else:
                top = dotted.split(".")[0]
                bindings[top] = top
    elif isinstance(small, cst.ImportFrom):
        if small.relative or small.module is None or isinstance(small.names, cst.ImportStar):
            return
        module = code_of(small.module)
        for alias in small.names:
            name = code_of(alias.name)
            local = code_of(alias.asname.name) if alias.asname is not None else name
            bindings[local] = f"{module}.{name}"


def reference(bindings: Bindings, target: str) -> str | None:
    """The shortest spelling of dotted ``target`` through an existing binding, or None.

    The most specific binding wins (``F`` for ``torch.nn.functional`` beats ``torch``);
    ties go to the alphabetically first local name so the output is deterministic.
    """
    best: tuple[int, str, str] | None = None
    for local, bound in bindings.items():
        if target == bound or target.startswith(bound + "."):
            candidate = (-len(bound), local, local + target[len(bound):])
            if best is None or candidate < best:
                best = candidate
    return best[2] if best is not None else None
