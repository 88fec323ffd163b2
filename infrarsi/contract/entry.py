"""The one answer to "which file does the job run": the entry point of a command, as a path in the repo.

A job is started as ``python train.py``, ``python -u projects/chargpt/chargpt.py`` or
``python -m scripts.base_train``, from the repo's root or from ``workload.workdir``.
Every stage that reads the entry point (``init``, the reach analysis, the promotion
commit that writes a flag's default, the report) asks here, so ``-m`` and a working
directory mean the same everywhere.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

#: A Python interpreter at the front of a command (``python3``, ``/opt/venv/bin/python3.11``).
PYTHONS = re.compile(r"^(python[0-9.]*|.*/python[0-9.]*)$")
#: Interpreter options that take a value (``python -W ignore train.py``).
_VALUED_OPTIONS = frozenset({"-W", "-X", "-Q"})


def split_interpreter(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """(interpreter and its options, the script or ``-m module`` target, the job's arguments).

    ``["python", "-u", "train.py", "--lr", "1"]`` -> ``(["python", "-u"], "train.py", ["--lr", "1"])``;
    ``["python", "-m", "pkg.mod", "--x"]`` -> ``(["python", "-m"], "pkg.mod", ["--x"])``. A command that does
    not start with an interpreter is its own target (``["./train.py"]``)."""
    argv = list(argv)
    if not argv:
        return [], None, []
    if not PYTHONS.match(argv[0]):
        return [], argv[0], argv[1:]
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-m":
            return argv[:i + 1], (argv[i + 1] if i + 1 < len(argv) else None), argv[i + 2:]
        i += 2 if argv[i] in _VALUED_OPTIONS else 1
    if i >= len(argv):
        return argv, None, []
    return argv[:i], argv[i], argv[i + 1:]


def is_module_target(prefix: Sequence[str]) -> bool:
    """Whether :func:`split_interpreter`'s target is a module (``python -m``)."""
    return bool(prefix) and prefix[-1] == "-m"


def entry_file(root: Path, workdir: str, argv: Sequence[str]) -> str | None:
    """The repo-relative path of the Python file ``argv`` runs from ``workdir``, or None when there is none.

    ``-m pkg.mod`` is ``pkg/mod.py`` or ``pkg/mod/__main__.py`` under the working directory (Python puts it
    first on ``sys.path``)."""
    prefix, target, _ = split_interpreter(argv)
    if target is None:
        return None
    base = posixpath.normpath(workdir or ".")
    if is_module_target(prefix):
        stem = target.replace(".", "/")
        candidates = [f"{stem}.py", f"{stem}/__main__.py"]
    elif target.endswith(".py"):
        candidates = [target]
    else:
        return None
    for rel in candidates:
        path = posixpath.normpath(posixpath.join(base, rel))
        if not path.startswith("../") and (root / path).is_file():
            return path
    return None


def split_command(text: str) -> list[str]:
    """A command line written as one string, split into words as a POSIX shell splits them (quotes, escapes); the
    one splitter for a contract's ``workload.command`` string, a proposer's drafted command and a one-string
    command a reader was handed. Raises ValueError on an unclosed quote. (``init`` reads a whole shell line,
    ``cd``, ``&&`` and ``VAR=`` included, with ``bot.stages.init.shell_command``.)"""
    return shlex.split(text)


def command_and_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the contract's ``workload.command``, the user's arguments) of a job's argv.

    The interpreter becomes the ``python`` placeholder (a trial runs under the bot's own), its options and the
    script or ``-m module`` stay in the command: ``python3 -u -m pkg.mod --lr 1`` -> ``(["python", "-u", "-m",
    "pkg.mod"], ["--lr", "1"])``."""
    prefix, target, rest = split_interpreter(argv)
    if not prefix:
        if target is None or target.startswith("-"):
            return [], list(argv)
        return [target], rest
    return ["python", *prefix[1:], *([target] if target is not None else [])], rest


def given_values(argv: list[str]) -> dict[str, str]:
    """Values on the user's command: ``--x 1``, ``--x=1`` and Hydra's ``a.b=1`` (keyed by token)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and "=" in arg:
            k, v = arg.split("=", 1)
            out[k] = v
        elif arg.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[arg] = argv[i + 1]
            i += 1
        elif arg.startswith("-"):
            out[arg] = "true"  # a bare switch
        elif "=" in arg and re.match(r"^[+~]?[A-Za-z_][\w.]*=", arg):
            k, v = arg.lstrip("+~").split("=", 1)
            out[k] = v
        i += 1
    return out


def strip_flags(argv: list[str], knob_flags: set[str]) -> list[str]:
    """The user's arguments minus knob flags (a knob's value comes from the contract, not the command)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in knob_flags:
            skip = "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            continue
        out.append(arg)
    return out
