"""Write a drafted contract as TOML with ``tomlkit``, each note as a comment above its value.

The document is built as a ``tomlkit`` tree, the same style-preserving library
that later edits the contract (a promotion rewriting a knob's default), so the
``# guessed:`` notes written here and any comment a reviewer adds afterwards
survive every edit.
"""

from __future__ import annotations

from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.items import AoT, Table

from bot.stages.init.draft import ContractDraft

_HEADER = """\
# InfraRSI contract: the task every candidate must do the same way, only faster.
# Written by `infrarsi init`; lines marked "guessed" were inferred — review them.
# `infrarsi check` validates this file and the lock; edit, then rerun `infrarsi lock`.
"""


def _comment(parent: Container | Table, note: str | None) -> None:
    for line in (note or "").splitlines():
        parent.add(tomlkit.comment(line))


def _above_header(item: Table, note: str | None) -> None:
    """A note as comment lines right above a table's ``[header]`` (tomlkit keeps them in the header's trivia).

    Set once the table is filled: tomlkit indents a table's keys like its header's first spaces.
    """
    if note:
        item.trivia.indent = "".join(f"# {line}\n" for line in note.splitlines())


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _scalars(target: Container | Table, path: str, table: dict[str, Any], notes: dict[str, str]) -> bool:
    """Add the plain keys of ``table`` to ``target``, each under its note; whether there were any."""
    found = False
    for key, value in table.items():
        if _is_table(value) or _is_table_array(value):
            continue
        _comment(target, notes.get(f"{path}.{key}" if path else key))
        target.add(key, value)
        found = True
    return found


def _children(parent: Container | Table, path: str, table: dict[str, Any], notes: dict[str, str]) -> None:
    """The sub-tables and arrays of tables of ``table``, in order, each under its note."""
    for key, value in table.items():
        dotted = f"{path}.{key}" if path else key
        if _is_table(value):
            child = tomlkit.table(is_super_table=bool(value) and all(map(_is_table, value.values())))
            if _scalars(child, dotted, value, notes) or not value:
                child.add(tomlkit.nl())
            _children(child, dotted, value, notes)
            if not child.is_super_table():
                _above_header(child, notes.get(dotted))  # after the keys: tomlkit indents keys like the header
            parent.add(key, child)
        elif _is_table_array(value):
            aot = AoT([])
            for i, item in enumerate(value):
                entry = tomlkit.table()
                for k, v in item.items():
                    entry.add(k, v)
                entry.add(tomlkit.nl())
                if i == 0:
                    _above_header(entry, notes.get(dotted))
                aot.append(entry)
            parent.add(key, aot)


def render_contract(draft: ContractDraft) -> str:
    """The contract text of ``draft``: a header, then every table with its notes as comments."""
    doc = tomlkit.document()
    for line in _HEADER.splitlines():
        doc.add(tomlkit.comment(line.removeprefix("# ")))
    doc.add(tomlkit.nl())
    if _scalars(doc, "", draft.data, draft.notes):
        doc.add(tomlkit.nl())
    _children(doc, "", draft.data, draft.notes)
    return doc.as_string().rstrip("\n") + "\n"
