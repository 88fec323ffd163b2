"""``init`` writes only what ``check`` accepts: a drafted contract is validated before it is written.

A draft is read back exactly as ``check`` reads the file (the rendered TOML,
strict loading, the data paths' file count); a field that would be refused stops
``init`` with one line naming the field, the value it guessed and why it guessed
it. Nothing is written, so the repo never holds a contract its own ``check`` fails.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from bot.stages.init.errors import DraftError
from bot.stages.init.draft import ContractDraft
from bot.stages.init.toml_writer import render_contract
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import CONTRACT_FILE, parse_contract
from infrarsi.contract.lock import data_files
from infrarsi.contract.model import Contract


def validated(draft: ContractDraft, root: Path) -> tuple[str, Contract]:
    """(the contract's text, the contract it loads as) of ``draft`` in the repo at ``root``; raises
    :class:`DraftError` naming the field, the guess and the reason when ``check`` would refuse it."""
    text = render_contract(draft)
    try:
        contract = parse_contract(tomllib.loads(text), source=root / CONTRACT_FILE, root=root)
        data_files(root, contract.data.paths)
    except ContractError as e:
        raise DraftError(_refusal(draft, e)) from None
    except tomllib.TOMLDecodeError as e:  # pragma: no cover - tomlkit renders valid TOML
        raise DraftError(f"init drafted a contract that is not valid TOML ({e}); nothing was written") from None
    return text, contract


def _refusal(draft: ContractDraft, error: ContractError) -> str:
    key = error.key
    found, value = _value_at(draft.data, key)
    guess = f" = {value!r}" if found else ""
    note = _note_for(draft.notes, key)
    why = f" ({note.splitlines()[0]})" if note else ""
    return (f"init drafted {key or 'the contract'}{guess}{why}, which `infrarsi check` refuses: {error.message}; "
            "nothing was written: give the value on --command (or --tokens-per-step, --step-regex), or write "
            f"{CONTRACT_FILE} by hand")


def _value_at(data: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = data
    for part in (p for p in re.split(r"\.|\[(\d+)\]", dotted) if p):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _note_for(notes: dict[str, str], dotted: str) -> str:
    """The note of ``dotted`` or of the nearest table above it (``knobs.x.default`` -> ``knobs.x``)."""
    key = re.sub(r"\[\d+\]", "", dotted)
    while key:
        if key in notes:
            return notes[key]
        key = key.rpartition(".")[0]
    return ""
