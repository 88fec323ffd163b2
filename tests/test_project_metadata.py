"""The project-metadata check: the repo's own build backend, in an isolated build environment built from its
declared ``build-system.requires`` when the bot lacks them; a backend the bot cannot run is "not checked" and no
patch is blamed for it.

Offline throughout: pip is pointed at a local folder (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``), and the build
environments live in this session's own cache (tests/conftest.py sets ``XDG_CACHE_HOME``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.stages.doctor.project_metadata import project_metadata
from bot.stages.run.verify import metadata_check
from bot.workspace import GitWorkspace
from infrarsi.invariants import CheckStatus
from tests.support.repos import commit_all, init_repo

pytestmark = [pytest.mark.slow, pytest.mark.side_by_side]  # creates virtual environments (seconds each)

PYPROJECT = """[build-system]
requires = [{requires}]
build-backend = "{backend}"

[project]
name = "trainer"
version = "{version}"
"""


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip sees only ``wheels/``; nothing is downloaded."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def _backend_wheel(wheels: Path, tmp_path: Path) -> None:
    """A minimal PEP 517 backend, ``tinybackend``, built into a wheel (it is not installed where the bot runs)."""
    src = tmp_path / "tinybackend-src"
    (src / "tinybackend").mkdir(parents=True)
    (src / "tinybackend" / "__init__.py").write_text(textwrap.dedent('''
        import os, tomllib

        def _project():
            with open("pyproject.toml", "rb") as f:
                return tomllib.load(f)["project"]

        def get_requires_for_build_wheel(config_settings=None):
            return []

        def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
            p = _project()
            name = p["name"] + "-" + p["version"] + ".dist-info"
            os.makedirs(os.path.join(metadata_directory, name))
            with open(os.path.join(metadata_directory, name, "METADATA"), "w") as f:
                f.write(f"Metadata-Version: 2.1\\nName: {p['name']}\\nVersion: {p['version']}\\n")
            return name

        def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
            raise NotImplementedError
    '''))
    (src / "pyproject.toml").write_text(PYPROJECT.format(requires='"setuptools>=61"',
                                                         backend="setuptools.build_meta", version="1.0")
                                        .replace('name = "trainer"', 'name = "tinybackend"'))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr


def test_a_backend_the_bot_lacks_runs_in_an_isolated_build_environment(offline: Path, tmp_path: Path) -> None:
    _backend_wheel(offline, tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT.format(requires='"tinybackend"', backend="tinybackend",
                                                          version="0.3"))
    meta = project_metadata(repo)
    assert meta is not None and meta.ok and meta.checked, meta.error
    assert meta.isolated and (meta.name, meta.version) == ("trainer", "0.3")


def test_a_backend_that_cannot_be_installed_is_not_checked_and_blames_no_patch(offline: Path,
                                                                                tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    base = init_repo(repo, {"pyproject.toml": PYPROJECT.format(requires='"hatchling-not-on-any-index"',
                                                               backend="hatchling.build", version="0.1"),
                            "train.py": "print('train')\n"})
    meta = project_metadata(repo)
    assert meta is not None and not meta.ok and not meta.checked
    assert "could not install the build requirements hatchling-not-on-any-index" in meta.error
    # the doctor read the base the same way; a patched candidate is then not checked, whatever the base said
    for base_meta in (meta.to_dict(), {"ok": True}):
        (repo / "train.py").write_text("print('patched')\n")
        commit = commit_all(repo, "a candidate")
        row = metadata_check(repo, commit, base_meta, workspace=GitWorkspace(repo))
        assert row is not None and row.status is CheckStatus.NOT_CHECKED, row
        assert "could not be run" in row.detail or "not blamed" in row.detail
    assert base


def test_only_a_candidate_that_breaks_metadata_the_base_prepared_is_broken(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    init_repo(repo, {"pyproject.toml": PYPROJECT.format(requires='"setuptools>=61"',
                                                        backend="setuptools.build_meta", version="0.1"),
                     "trainer.py": ""})
    base = project_metadata(repo)
    assert base is not None and base.ok and not base.isolated  # the bot's own setuptools satisfies it
    (repo / "pyproject.toml").write_text(PYPROJECT.format(requires='"setuptools>=61"',
                                                          backend="setuptools.build_meta", version="not a version"))
    commit = commit_all(repo, "a candidate that breaks the version")
    row = metadata_check(repo, commit, base.to_dict(), workspace=GitWorkspace(repo))
    assert row is not None and row.broken and "the base prepares its metadata" in row.detail
