"""The entry point of a command: interpreter, script or ``-m`` module, arguments; values and flags on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.contract.entry import (command_and_args, entry_file, given_values, is_module_target, split_command,
                                     split_interpreter, strip_flags)


@pytest.mark.parametrize(("argv", "expected"), [
    (["python", "-u", "train.py", "--lr", "1"], (["python", "-u"], "train.py", ["--lr", "1"])),
    (["python", "-m", "pkg.mod", "--x"], (["python", "-m"], "pkg.mod", ["--x"])),
    (["/opt/venv/bin/python3.11", "-W", "ignore", "t.py"], (["/opt/venv/bin/python3.11", "-W", "ignore"], "t.py", [])),
    (["./train.py", "--a"], ([], "./train.py", ["--a"])),
    (["python", "-u"], (["python", "-u"], None, [])),
    (["python", "-m"], (["python", "-m"], None, [])),
    ([], ([], None, [])),
])
def test_split_interpreter(argv: list[str], expected: tuple) -> None:
    assert split_interpreter(argv) == expected


def test_is_module_target() -> None:
    assert is_module_target(["python", "-m"]) and not is_module_target(["python"]) and not is_module_target([])


def test_entry_file_resolves_scripts_and_modules_from_the_working_directory(tmp_path: Path) -> None:
    for rel in ("train.py", "sub/run.py", "sub/pkg/mod.py", "sub/app/__main__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert entry_file(tmp_path, "", ["python", "train.py"]) == "train.py"
    assert entry_file(tmp_path, "sub", ["python", "run.py"]) == "sub/run.py"
    assert entry_file(tmp_path, "sub", ["python", "-m", "pkg.mod"]) == "sub/pkg/mod.py"
    assert entry_file(tmp_path, "sub", ["python", "-m", "app"]) == "sub/app/__main__.py"
    assert entry_file(tmp_path, "", ["python", "missing.py"]) is None
    assert entry_file(tmp_path, "", ["bash", "run.sh"]) is None
    assert entry_file(tmp_path, "sub", ["python", "../../train.py"]) is None  # outside the repo
    assert entry_file(tmp_path, "", ["python"]) is None


def test_split_command_splits_as_a_shell_does() -> None:
    assert split_command("python train.py --name 'a b' x\\ y") == ["python", "train.py", "--name", "a b", "x y"]
    with pytest.raises(ValueError):
        split_command("python 'unclosed")


def test_command_and_args() -> None:
    assert command_and_args(["python3", "-u", "-m", "pkg.mod", "--lr", "1"]) == (
        ["python", "-u", "-m", "pkg.mod"], ["--lr", "1"])
    assert command_and_args(["./run.sh", "--a"]) == (["./run.sh"], ["--a"])
    assert command_and_args(["--a", "1"]) == ([], ["--a", "1"])


def test_given_values_and_strip_flags() -> None:
    argv = ["model.pp=2", "+trainer.devices=4", "--lr", "1e-3", "--bs=8", "--compile", "--verbose", "--last"]
    assert given_values(argv) == {"--lr": "1e-3", "--bs": "8", "--compile": "true", "--verbose": "true",
                                  "model.pp": "2", "trainer.devices": "4", "--last": "true"}
    assert strip_flags(["--lr", "1", "--bs=8", "--steps", "10", "--dtype", "--x"], {"--lr", "--bs", "--dtype"}) == \
        ["--steps", "10", "--x"]
