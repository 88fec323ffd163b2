"""Write a drafted contract as TOML, with each note as a comment above its value.

A tiny writer for the shapes a contract has (tables, arrays of tables, scalars
and flat arrays), because the point is the comments, which no TOML library keeps.
"""

from __future__ import annotations

import json
import math
from typing import Any

from bot.stages.init.draft import ContractDraft

_HEADER = """\
# InfraRSI contract: the task every candidate must do the same way, only faster.
# Written by `infrarsi init`; lines marked "guessed" were inferred — review them.
# `infrarsi check` validates this file and the lock; edit, then rerun `infrarsi lock`.
"""


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            raise ValueError(f"cannot write {value} to a contract")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_scalar(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _comment(note: str, indent: str = "") -> list[str]:
    return [f"{indent}# {line}" for line in note.splitlines()]


def render_contract(draft: ContractDraft) -> str:
    lines = [_HEADER.rstrip("\n"), ""]

    def emit_table(path: str, table: dict[str, Any], header: str | None) -> None:
        scalars = {k: v for k, v in table.items() if not _is_table(v) and not _is_table_array(v)}
        if header is not None and (scalars or not table):
            if path in draft.notes:
                lines.extend(_comment(draft.notes[path]))
            lines.append(f"[{header}]")
        for key, value in scalars.items():
            dotted = f"{path}.{key}" if path else key
            if dotted in draft.notes:
                lines.extend(_comment(draft.notes[dotted]))
            lines.append(f"{_key(key)} = {_scalar(value)}")
        if scalars or header is not None:
            lines.append("")
        for key, value in table.items():
            dotted = f"{path}.{key}" if path else key
            if _is_table(value):
                emit_table(dotted, value, f"{header}.{_key(key)}" if header else _key(key))
            elif _is_table_array(value):
                if dotted in draft.notes:
                    lines.extend(_comment(draft.notes[dotted]))
                for item in value:
                    lines.append(f"[[{header + '.' if header else ''}{_key(key)}]]")
                    lines.extend(f"{_key(k)} = {_scalar(v)}" for k, v in item.items())
                    lines.append("")

    emit_table("", draft.data, None)
    return "\n".join(lines).rstrip("\n") + "\n"


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
