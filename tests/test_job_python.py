"""bot.executors.job_python: questions asked of the job's interpreter, never of the bot's own process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.executors.job_python import ask, job_python, torch_version


@pytest.mark.parametrize(("argv", "expected"), [
    (["python", "train.py"], sys.executable),  # trials run a leading `python` as the bot's own interpreter
    ([], sys.executable),
    (["torchrun", "--nproc-per-node", "2", "train.py"], sys.executable),
    (["bash", "run.sh"], sys.executable),
    (["/opt/conda/bin/python3.11", "train.py"], "/opt/conda/bin/python3.11"),
])
def test_the_jobs_interpreter(argv: list[str], expected: str) -> None:
    assert job_python(argv) == expected


def test_an_answer_is_the_last_json_line_a_script_prints(tmp_path: Path) -> None:
    script = tmp_path / "q.py"
    script.write_text("import json, sys\nprint('warming up')\nprint(json.dumps({'args': sys.argv[1:]}))\n")
    assert ask(sys.executable, script, ["a", "b"]) == ({"args": ["a", "b"]}, "")
    assert ask(sys.executable, "print(1 + 1)") == (2, "")


def test_a_failure_says_why_in_one_line(tmp_path: Path) -> None:
    answer, why = ask(sys.executable, "raise SystemExit('no torch here')")
    assert answer is None and why == f"{sys.executable} failed: no torch here"
    answer, why = ask(sys.executable, "print('not json')")
    assert answer is None and "printed no JSON" in why
    answer, why = ask(str(tmp_path / "no-python"), "print(1)")
    assert answer is None and "could not run it (FileNotFoundError" in why


def test_the_scripts_environment_is_the_callers_and_secrets_never_reach_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFRARSI_GITHUB_TOKEN", "secret")
    env, _ = ask(sys.executable, "import json, os; print(json.dumps(sorted(os.environ)))")
    assert "INFRARSI_GITHUB_TOKEN" not in env
    given, _ = ask(sys.executable, "import json, os; print(json.dumps(os.environ.get('X')))", env={"X": "1"})
    assert given == "1"


def test_the_torch_version_is_read_from_the_interpreters_metadata() -> None:
    from importlib import metadata

    assert torch_version(sys.executable) == metadata.version("torch")
    assert torch_version("/nonexistent/python") is None
