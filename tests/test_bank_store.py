"""The SQLite bank on disk: where it lives, idempotent adds, JSONL files written whole and read all-or-none.

The behaviour every backend shares is in ``tests/test_bank_contract.py``; this file holds what is SQLite's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infrarsi.bank.store import BANK_ENV, BANK_FILE, SqliteBank, default_bank_path, open_bank, read_jsonl, write_jsonl
from tests.support.findings import make_finding


def test_default_path_is_the_env_var_else_the_users_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(BANK_ENV, "~/banks/b.sqlite")
    assert default_bank_path() == Path("~/banks/b.sqlite").expanduser()
    monkeypatch.delenv(BANK_ENV)
    assert default_bank_path().name == BANK_FILE and "infrarsi" in default_bank_path().parts
    monkeypatch.setenv(BANK_ENV, str(tmp_path / "x" / "bank.sqlite"))
    with open_bank() as bank:
        assert len(bank) == 0 and (tmp_path / "x" / "bank.sqlite").is_file()


def test_add_is_idempotent_and_membership_is_by_id(tmp_path: Path) -> None:
    a, b = make_finding(1), make_finding(2)
    with SqliteBank(tmp_path / "bank.sqlite") as bank:
        assert bank.add(a) and not bank.add(a)
        assert bank.add_many([a, b, b]) == 1
        assert len(bank) == 2 and a.id in bank and "nope" not in bank and bank.ids() == {a.id, b.id}
        assert bank.integrity() == "ok"
        assert str(tmp_path / "bank.sqlite") in repr(bank)


def test_jsonl_round_trip_and_a_bad_line_imports_nothing(tmp_path: Path) -> None:
    findings = [make_finding(i) for i in range(3)]
    path = tmp_path / "out" / "bank.jsonl"
    assert write_jsonl(findings, path) == 3
    assert read_jsonl(path) == findings
    assert [p.name for p in path.parent.iterdir()] == ["bank.jsonl"]  # no temporary file left
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "", lines[1], json.dumps({"not": "a finding"})]) + "\n")
    with pytest.raises(ValueError, match=rf"{path}:4: "):
        read_jsonl(path)
    with SqliteBank(tmp_path / "bank.sqlite") as bank:
        with pytest.raises(ValueError):
            bank.import_jsonl(path)
        assert len(bank) == 0
