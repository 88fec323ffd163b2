"""bot.cli.verbosity: ``-v`` adds debug lines, ``-q`` leaves only the error line, on every verb, before or after
it; ``--version`` on the top parser."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.cli.main import build_parser
from bot.cli.verbosity import ErrorsOnly
from infrarsi.seams.executor import Execution
from tests.support.cli_driver import recorded_starts, run_cli

KILLED = Execution(events=(), returncode=-9, wall_s=0.5, peak_rss_bytes=9805824, killed_for="memory")


def test_errors_only_passes_the_error_lines_whole() -> None:
    target = io.StringIO()
    stream = ErrorsOnly(target)
    stream.write("  baseline 1/5\nerr")
    stream.write("or: the lock is broken\n\r  step 3/8")
    stream.write("\nwarning: x\n")
    stream.flush()
    assert target.getvalue() == "error: the lock is broken\n"


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_leaves_the_result_and_drops_the_progress(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                        where: str) -> None:
    recorded_starts(monkeypatch, execution=KILLED)
    argv = ["-q", "trial", str(tiny_repo)] if where == "before" else ["trial", str(tiny_repo), "--quiet"]
    result = run_cli(argv)
    assert result.code == 1 and result.err == ""
    assert result.out.startswith("trial manual/1: oom")
    loud = run_cli(["trial", str(tiny_repo)])
    assert "trial of " in loud.err


def test_quiet_keeps_the_error_line(tiny_repo: Path) -> None:
    result = run_cli(["-q", "report", str(tiny_repo)])
    assert result.code == 2 and result.err.startswith("error: ") and result.err.count("\n") == 1


def test_verbose_adds_the_trial_s_command_line(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded_starts(monkeypatch, execution=KILLED)
    result = run_cli(["trial", str(tiny_repo), "-v"])
    debug = [line for line in result.err.splitlines() if line.startswith("debug: ")]
    assert debug and debug[0].startswith("debug: bot.stages.run.run_trial: trial manual/1 on the local executor: ")
    assert "train.py" in debug[0]
    assert not [line for line in run_cli(["trial", str(tiny_repo)]).err.splitlines() if line.startswith("debug:")]


def test_verbose_and_quiet_together_is_a_usage_error(tiny_repo: Path) -> None:
    result = run_cli(["-v", "journal", str(tiny_repo), "-q"])
    assert result.code == 2 and result.err.startswith("error: infrarsi: -v and -q: choose one")


def test_every_verb_takes_both_flags() -> None:
    parser = build_parser()
    for verb in ("init", "run", "doctor", "promote", "env", "gc"):
        args = parser.parse_args([verb, "-v", *(["--pr", "1"] if verb == "promote" else ["r"] * (verb != "env"))])
        assert args.verbose == 1 and args.quiet is False
    args = parser.parse_args(["-q", "bank", "list"])
    assert args.quiet is True and args.verbose == 0


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("infrarsi ")
