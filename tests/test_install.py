"""``pip install .`` into a clean virtual environment: the declared dependencies are enough (``pip check``), every
module imports, and the bot's process needs no torch (torch is the ``trial`` extra): ``import bot.cli`` and
``infrarsi run --executor actions --help`` work in an environment without it, and importing every module never
imports it. About 40 s (the dependencies come from pip's cache after ./dev's own install)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.side_by_side]  # its checks time nothing: CI runs it beside other tests (./dev)

ROOT = Path(__file__).resolve().parents[1]

#: Imports every module of both packages (not ``__main__``), then says which failed and whether torch was loaded.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
failed, count = {}, 0
for top in ("bot", "infrarsi"):
    for m in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        if m.name.endswith("__main__"):
            continue
        count += 1
        try:
            importlib.import_module(m.name)
        except Exception as e:
            failed[m.name] = f"{type(e).__name__}: {e}"
print(json.dumps({"modules": count, "failed": failed,
                  "torch": sorted(k for k in sys.modules if k.split(".")[0] == "torch")}))
"""


def _run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_a_clean_install_has_every_import_it_needs_and_no_torch(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for part in ("bot", "infrarsi"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    pip = (sys.executable, "-m", "pip", "--python", python)  # this environment's pip, installing into the clean one

    installed = _run(*pip, "install", "--quiet", "--disable-pip-version-check", source)
    assert installed.returncode == 0, installed.stderr[-3000:]
    checked = _run(*pip, "check")
    assert checked.returncode == 0 and "No broken requirements found" in checked.stdout, checked.stdout
    assert _run(python, "-c", "import torch").returncode != 0, "torch is not a dependency of the bot"

    elsewhere = tmp_path / "elsewhere"  # not the source tree: what is imported is what was installed
    elsewhere.mkdir()
    imported = _run(python, "-c", IMPORT_ALL, cwd=elsewhere)
    assert imported.returncode == 0, imported.stderr[-3000:]
    report = json.loads(imported.stdout.strip().splitlines()[-1])
    assert report["failed"] == {} and report["modules"] > 150, report
    assert report["torch"] == [], "importing the bot imported torch"
    assert _run(python, "-c", "import bot.cli", cwd=elsewhere).returncode == 0
    helped = _run(env_dir / "bin" / "infrarsi", "run", "--executor", "actions", "--help", cwd=elsewhere)
    assert helped.returncode == 0 and "--executor" in helped.stdout, helped.stderr
