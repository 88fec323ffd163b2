"""bot.stages.doctor.build_env: the bot's interpreter when it satisfies a project's build requirements, else an
isolated environment; a requirement pip cannot install is one line. No environment is created and pip never
runs here: ``venv`` and ``subprocess.run`` are replaced."""
from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from bot.stages.doctor.build_env import BuildEnv, BuildEnvError, environment_for, install, satisfied


def test_requirements_this_interpreter_has_are_satisfied() -> None:
    assert satisfied(["packaging", "libcst>=0.1", "no-such-package-xyz; python_version < '3'"])
    assert not satisfied(["no-such-package-xyz"])
    assert not satisfied(["packaging<0.1"])
    assert not satisfied(["not a requirement!!"])


def test_the_bots_interpreter_is_used_when_it_has_everything(tmp_path: Path) -> None:
    assert environment_for(["packaging"], root=tmp_path) == BuildEnv(python=sys.executable, isolated=False)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each pip command line; pip fails on a requirement named ``broken``."""
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        bad = "broken" in argv
        return subprocess.CompletedProcess(argv, 1 if bad else 0, "", "ERROR: No matching distribution found for "
                                           "broken\n\n" if bad else "")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(venv.EnvBuilder, "create", lambda self, where: Path(where).mkdir(parents=True))
    return calls


def test_a_missing_requirement_gets_a_cached_isolated_environment(tmp_path: Path, pip: list[list[str]]) -> None:
    env = environment_for(["no-such-package-xyz", "packaging"], root=tmp_path)
    assert env.isolated and env.python.startswith(str(tmp_path)) and env.python.endswith("/bin/python")
    assert pip == [[env.python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                    "no-such-package-xyz", "packaging"]]
    assert environment_for(["packaging", "no-such-package-xyz"], root=tmp_path) == env  # reused, same key
    assert len(pip) == 1


def test_a_requirement_pip_cannot_install_is_one_line(tmp_path: Path, pip: list[list[str]]) -> None:
    with pytest.raises(BuildEnvError) as caught:
        environment_for(["broken"], root=tmp_path)
    assert str(caught.value) == ("could not install the build requirements broken (ERROR: No matching distribution "
                                 "found for broken); install them where the bot runs, or let pip reach an index")


def test_install_adds_only_to_an_isolated_environment(pip: list[list[str]]) -> None:
    install(BuildEnv(python="/usr/bin/python3", isolated=False), ["wheel"])
    install(BuildEnv(python="/env/bin/python", isolated=True), [])
    assert pip == []
    install(BuildEnv(python="/env/bin/python", isolated=True), ["wheel"])
    assert pip == [["/env/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "wheel"]]
