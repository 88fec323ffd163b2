"""``infrarsi bank list|export|import|sync``, through the real command line's parser and error handler."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest

from bot.cli import main as cli_main
from tests.support.repos import init_repo
from infrarsi.bank import SqliteBank, default_bank_path
from tests.support.findings import make_finding


def run(*argv: str) -> int:
    return cli_main(list(argv))


def test_list_export_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst, out = tmp_path / "src.sqlite", tmp_path / "dst.sqlite", tmp_path / "x.jsonl"
    with SqliteBank(src) as bank:
        bank.add_many([make_finding(1), make_finding(2)])
    assert run("bank", "--bank", str(src), "export", str(out)) == 0  # --bank before the verb
    assert "exported 2 findings" in capsys.readouterr().out
    assert run("bank", "import", str(out), "--bank", str(dst)) == 0  # ... or after it
    assert "imported 2 new findings" in capsys.readouterr().out
    assert run("bank", "import", str(out), "--bank", str(dst)) == 0
    assert "imported 0 new findings" in capsys.readouterr().out
    assert run("bank", "list", "--bank", str(dst)) == 0
    listing = capsys.readouterr().out
    assert "2 findings" in listing and make_finding(1).id[:12] in listing
    assert run("bank", "list", "--json", "--bank", str(dst)) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == \
        [make_finding(1).id, make_finding(2).id]


def test_import_of_a_bad_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert run("bank", "import", str(bad), "--bank", str(tmp_path / "b.sqlite")) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert run("bank", "import", str(tmp_path / "missing.jsonl"), "--bank", str(tmp_path / "b.sqlite")) == 2


def test_env_var_sets_the_default_bank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("INFRARSI_BANK", raising=False)
    assert default_bank_path().name == "bank.sqlite" and "infrarsi" in default_bank_path().parent.name
    monkeypatch.setenv("INFRARSI_BANK", str(tmp_path / "env.sqlite"))
    assert default_bank_path() == tmp_path / "env.sqlite"
    assert run("bank", "list") == 0
    assert str(tmp_path / "env.sqlite") in capsys.readouterr().out


def test_sync_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    main = init_repo(repo, {"train.py": "pass\n"})
    remote = tmp_path / "shared.git"
    pygit2.init_repository(str(remote), bare=True)
    bank_path = tmp_path / "bank.sqlite"
    with SqliteBank(bank_path) as bank:
        bank.add(make_finding(1))
    assert run("bank", "sync", str(repo), str(remote), "--bank", str(bank_path)) == 0
    assert "0 findings imported, 1 pushed, 1 on the branch" in capsys.readouterr().out
    assert pygit2.Repository(str(remote)).references.get("refs/heads/infrarsi/experience") is not None
    assert str(pygit2.Repository(str(repo)).head.target) == main
