"""bot.cli.main: one error handler for every verb — a documented failure is one ``error:`` line and its exit
status, an interrupt is 130. Called in-process (the CLI's subprocess runs are in tests/test_cli_errors.py)."""
from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from bot.cli.main import UsageError, main
from infrarsi.errors import InfraRSIError

CLI_MAIN = importlib.import_module("bot.cli.main")  # the module: ``bot.cli.main`` as an attribute is the function


def test_a_bad_repo_is_one_error_line_and_exit_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["journal", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: {missing}: not a directory (REPO is the training repository)\n"


def _parser_running(func: object) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.set_defaults(func=func)
    return p


@pytest.mark.parametrize(("raised", "code", "err"), [
    (UsageError("--knob: expected NAME=VALUE"), 2, "error: --knob: expected NAME=VALUE\n"),
    (InfraRSIError("the lock is broken"), 1, "error: the lock is broken\n"),
    (KeyboardInterrupt(), 130, "interrupted\n"),
])
def test_failures_become_exit_statuses(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                       raised: BaseException, code: int, err: str) -> None:
    def verb(args: argparse.Namespace) -> int:
        raise raised

    monkeypatch.setattr(CLI_MAIN, "build_parser", lambda: _parser_running(verb))
    assert main([]) == code
    assert capsys.readouterr().err == err


def test_a_verbs_return_value_is_the_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CLI_MAIN, "build_parser", lambda: _parser_running(lambda args: True))
    assert main([]) == 1


def test_an_unexpected_error_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def verb(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(CLI_MAIN, "build_parser", lambda: _parser_running(verb))
    with pytest.raises(ZeroDivisionError):
        main([])
