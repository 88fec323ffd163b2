"""Which directories of the candidate's working tree must come first on the job's import path.

A repo installed in editable mode (``pip install -e .``, as karpathy/minGPT's
README says) imports its package from the user's own checkout, wherever the
job runs: a trial in a worktree would then run the checkout's code, not the
candidate's patch, and every candidate would measure as the baseline. The
package's directory in the worktree goes first on ``PYTHONPATH`` instead:

- ``src`` of a src layout (``src/<pkg>/__init__.py``);
- the working directory itself, when it holds a package and the entry script
  lives below it (``python projects/chargpt/chargpt.py`` imports ``mingpt``).
  A script in the working directory already has it first on ``sys.path``;
- the repo's root (and its ``src``), when the job runs from a folder below it
  (``cd projects/chargpt && python chargpt.py``, ``workload.workdir``).

Paths are relative to the job's working directory: Python makes them absolute
at start-up (``site``), and they mean the same on a runner or a cluster node.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from infrarsi.contract.entry import entry_file

_SKIP = {"tests", "test", "docs", "examples", "scripts", "build", "dist", "venv", ".venv", "node_modules"}


def _holds_package(folder: Path) -> bool:
    try:
        return any(child.is_dir() and child.name not in _SKIP and not child.name.startswith(".")
                   and (child / "__init__.py").is_file() for child in folder.iterdir())
    except OSError:
        return False


def import_roots(tree: Path, workdir: str, argv: Sequence[str]) -> list[str]:
    """The directories (``src``, ``.``, ``../..``), relative to the job's working directory ``tree / workdir``,
    to put first on the job's ``PYTHONPATH``."""
    cwd = tree / workdir
    roots = []
    if _holds_package(cwd / "src"):
        roots.append("src")
    entry = entry_file(tree, workdir, argv)
    if entry is not None and PurePosixPath(entry).parent != PurePosixPath(workdir) and _holds_package(cwd):
        roots.append(".")
    if PurePosixPath(workdir) != PurePosixPath("."):
        up = PurePosixPath(*[".."] * len(PurePosixPath(workdir).parts))
        roots += [(up / sub).as_posix() for sub in ("", "src") if _holds_package(tree / sub)]
    return roots


def with_import_roots(env: tuple[tuple[str, str], ...], roots: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``env`` with ``PYTHONPATH`` led by ``roots`` (the executor appends the machine's own PYTHONPATH)."""
    if not roots:
        return env
    given = dict(env).get("PYTHONPATH")
    value = os.pathsep.join([*roots, *([given] if given else [])])
    return tuple((k, v) for k, v in env if k != "PYTHONPATH") + (("PYTHONPATH", value),)
