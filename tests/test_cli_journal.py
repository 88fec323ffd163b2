"""bot.cli.journal: ``infrarsi trial`` and ``infrarsi journal``, called in-process with an executor that runs
nothing (a real trial through the CLI is in tests/test_trial_cli.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import bot.cli.journal
from bot.cli.main import main
from infrarsi.contract.lock import write_lock
from infrarsi.seams.executor import Execution
from tests.support.init_draft import FakeExecutor, drafted_contract, steps


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A locked contract (not a git repo: the trial runs on the working tree) and the fake executor."""
    contract = drafted_contract(tmp_path / "repo")
    write_lock(contract)
    executor = FakeExecutor(Execution(events=steps(14), returncode=0, wall_s=2.0, peak_rss_bytes=300 * 2**20))
    monkeypatch.setattr(bot.cli.journal, "build_executor", lambda contract, options=None: executor)
    return contract.root


def test_a_trial_prints_what_the_bot_measured(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trial", str(repo), "--knob", "dtype=bf16"]) == 0
    out, err = capsys.readouterr()
    assert "trial of dtype=bf16 on the working tree (train.py, 2 warm-up + 12 measured steps)" in err
    lines = out.splitlines()
    assert lines[0] == "trial manual/1: ok"
    assert lines[1].startswith("  step time    100.0 ms (cv ")
    assert lines[1].endswith("measured by the bot over 12 steps")
    assert "  peak memory  300 MiB" in lines
    assert "  loss         1.9800 → 1.8700" in lines
    assert lines[-1] == "  cost         2.0 device-seconds"


def test_a_trial_as_json_and_then_the_journal(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trial", str(repo), "--json", "--run-id", "r1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["run_id"], summary["trial_no"], summary["outcome"], summary["candidate"]) == ("r1", 1, "ok",
                                                                                                 "dtype=fp32")
    assert main(["journal", str(repo)]) == 0
    assert capsys.readouterr().out.split() == ["r1/1", "ok", "100.0", "ms", "2.0", "s", "dtype=fp32"]
    assert main(["journal", str(repo), "--json", "--run-id", "r1"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "ok"


@pytest.mark.parametrize(("argv", "message"), [
    (["--memory-limit", "lots"], "error: infrarsi trial: argument --memory-limit: expected a size > 0 in bytes or "
                                 "like 6GiB or 512MB, got 'lots'"),
    (["--patch", "p1"], "--patch needs a git repository"),
    (["--knob", "nope=1"], "error: unknown knob 'nope' (the contract defines: dtype)"),
])
def test_bad_input_to_a_trial_is_one_line_and_exit_two(repo: Path, capsys: pytest.CaptureFixture[str],
                                                       argv: list[str], message: str) -> None:
    try:
        code = main(["trial", str(repo), *argv])
    except SystemExit as stop:  # a value the parser refuses (bot.cli.registry.Parser.error)
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_unknown_run_in_the_journal_names_the_known_ones(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trial", str(repo), "--json", "--run-id", "r1"]) == 0
    capsys.readouterr()
    assert main(["journal", str(repo), "--run-id", "r9"]) == 2
    assert capsys.readouterr().err == "error: --run-id r9: no such run in the journal (runs: r1)\n"
