"""bot/cli/init.py: ``infrarsi init | lock | check | patches`` in process, on a copy of tinygpt."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.main import main
from infrarsi.contract.load import CONTRACT_FILE
from infrarsi.contract.lock import LOCK_FILE, read_lock
from tests.support.tinygpt import TINY_ARGS, copy_fixture


@pytest.fixture
def drafted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    repo = copy_fixture(tmp_path / "tinygpt")
    assert main(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]) == 0
    said = capsys.readouterr().out
    assert f"wrote {CONTRACT_FILE}" in said and f"wrote {LOCK_FILE}" in said
    return repo


def test_init_keeps_an_existing_contract_unless_forced(drafted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (drafted / CONTRACT_FILE).read_text(encoding="utf-8")
    assert main(["init", str(drafted), "--command", "python train.py --steps 3"]) == 0
    assert "using the existing contract" in capsys.readouterr().out
    assert (drafted / CONTRACT_FILE).read_text(encoding="utf-8") == before


def test_init_without_a_contract_or_a_command_is_a_usage_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = copy_fixture(tmp_path / "tinygpt")
    assert main(["init", str(repo)]) == 2
    assert "pass --command" in capsys.readouterr().err


def test_check_passes_on_the_locked_tree_and_fails_on_a_changed_locked_file(drafted: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(drafted)]) == 0
    assert capsys.readouterr().out.startswith("ok: contract valid;")
    locked = next(path for path, _ in read_lock(drafted).files if path.endswith(".py"))
    with (drafted / locked).open("a", encoding="utf-8") as fh:
        fh.write("\n# edited\n")
    assert main(["check", str(drafted)]) == 1
    err = capsys.readouterr().err
    assert "check failed" in err and locked in err
    assert main(["lock", str(drafted)]) == 0 and main(["check", str(drafted)]) == 0  # re-taken on purpose
