"""A trial imports the candidate's package from its own working tree, not the user's editable install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bot.executors.environment import scrubbed_environment
from infrarsi.contract.import_roots import import_roots, with_import_roots


def _package(root: Path, name: str, marker: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(f"WHERE = {marker!r}\n")


def test_roots_for_a_nested_entry_script_and_a_src_layout(tmp_path: Path) -> None:
    minigpt = tmp_path / "mingpt_repo"
    _package(minigpt, "mingpt", "tree")
    _package(minigpt, "tests", "no")
    (minigpt / "projects" / "chargpt").mkdir(parents=True)
    (minigpt / "projects" / "chargpt" / "chargpt.py").write_text("import mingpt\n")
    (minigpt / "train.py").write_text("import mingpt\n")
    assert import_roots(minigpt, ".", ["python", "projects/chargpt/chargpt.py"]) == ["."]
    assert import_roots(minigpt, ".", ["python", "train.py"]) == []  # the script's own folder is first already
    # run from its own folder (`cd projects/chargpt && python chargpt.py`): the repo's root, two levels up
    assert import_roots(minigpt, "projects/chargpt", ["python", "chargpt.py"]) == ["../.."]
    src = tmp_path / "src_repo"
    _package(src / "src", "pkg", "tree")
    assert import_roots(src, ".", ["python", "train.py"]) == ["src"]
    assert with_import_roots((("A", "1"),), ["src"]) == (("A", "1"), ("PYTHONPATH", "src"))


def test_the_worktrees_package_wins_over_an_editable_install_of_the_users_checkout(tmp_path: Path) -> None:
    checkout, worktree = tmp_path / "checkout", tmp_path / "worktree"
    _package(checkout, "mingpt", "checkout")  # what `pip install -e .` points every interpreter at
    _package(worktree, "mingpt", "worktree")  # the candidate, patched
    (worktree / "projects").mkdir()
    (worktree / "projects" / "train.py").write_text("import mingpt\nprint(mingpt.WHERE)\n")
    argv = [sys.executable, "projects/train.py"]
    extra = with_import_roots((), import_roots(worktree, ".", argv))
    env = scrubbed_environment(dict(extra), base={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(checkout)})
    assert env["PYTHONPATH"].split(":") == [".", str(checkout)]
    out = subprocess.run(argv, cwd=worktree, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "worktree", out.stderr
