"""A pyproject-based training repo's metadata, from its own build backend (pyproject-api).

Not hand-parsed: the backend named in ``[build-system]`` prepares the metadata
as pip would, so dynamic versions and dependencies come out right. The result
joins the software fingerprint, and verification checks that a patched
candidate still prepares its metadata.
"""

from __future__ import annotations

import email.parser
import os
import tempfile
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE, Popen
from typing import Any

from pyproject_api import BackendFailed, SubprocessFrontend

from bot.executors.environment import scrubbed_environment
from bot.stages.doctor.build_env import BuildEnvError, environment_for, install


@dataclass(frozen=True, kw_only=True, slots=True)
class ProjectMetadata:
    ok: bool
    backend: str = ""
    build_requires: tuple[str, ...] = ()
    name: str | None = None
    version: str | None = None
    requires_dist: tuple[str, ...] = ()
    error: str = ""
    # False: the bot could not run the backend at all (its requirements could not be installed, it could not be
    # imported): a limit of the bot's, not a failure of the project
    checked: bool = True
    isolated: bool = False  # the backend ran in an isolated build environment

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "backend": self.backend, "build_requires": list(self.build_requires),
                "name": self.name, "version": self.version, "requires_dist": list(self.requires_dist),
                "error": self.error, "checked": self.checked, "isolated": self.isolated}


class _Frontend(SubprocessFrontend):
    """pyproject-api's subprocess frontend, run with a chosen interpreter and a scrubbed environment (a build
    backend runs the project's own code: none of the bot's tokens reach it)."""

    def __init__(self, *args: Any, python: str) -> None:
        super().__init__(*args)
        self.executable = python

    @contextmanager
    def _send_msg(self, cmd: str, result_file: Path, msg: str) -> Generator[Any, None, None]:
        from pyproject_api._via_fresh_subprocess import SubprocessCmdStatus

        del cmd, result_file
        env = scrubbed_environment(base=os.environ)
        backend = os.pathsep.join(str(i) for i in self._backend_paths).strip()
        if backend:
            env["PYTHONPATH"] = backend
        else:
            env.pop("PYTHONPATH", None)
        process = Popen(args=[self.executable, *self.backend_args], stdout=PIPE, stderr=PIPE, stdin=PIPE,
                        universal_newlines=True, errors="backslashreplace", cwd=self._root, env=env)
        yield SubprocessCmdStatus(process, f"{os.linesep}{msg}{os.linesep}")


def _not_importable(e: BackendFailed, backend_module: str) -> bool:
    """The backend itself could not be imported (the environment lacks it): the bot's problem, not the project's."""
    text = f"{e.exc_type}: {e.exc_msg}\n{e.err}"
    top = backend_module.split(".")[0]
    return ("ModuleNotFoundError" in text or "ImportError" in text) and f"'{top}" in text


def project_metadata(root: Path) -> ProjectMetadata | None:
    """None when ``root`` has no pyproject.toml; else what its backend reports (or why it failed), run in an
    isolated build environment with its declared ``build-system.requires`` when this interpreter lacks them."""
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        root_dir, backend_paths, backend_module, backend_obj, requires, _ = \
            SubprocessFrontend.create_args_from_folder(root)
    except Exception as e:  # noqa: BLE001 - an unreadable [build-system] is the project's finding
        return ProjectMetadata(ok=False, error=f"{type(e).__name__}: {e}")
    backend = backend_module + (f":{backend_obj}" if backend_obj else "")
    declared = tuple(str(r) for r in requires)
    try:
        env = environment_for(declared)
    except BuildEnvError as e:
        return ProjectMetadata(ok=False, checked=False, backend=backend, build_requires=declared, error=str(e))
    frontend = _Frontend(root_dir, backend_paths, backend_module, backend_obj, requires, python=env.python)
    try:
        with tempfile.TemporaryDirectory(prefix="infrarsi-metadata-") as tmp:
            extra = tuple(str(r) for r in frontend.get_requires_for_build_wheel().requires)
            install(env, extra)
            result = frontend.prepare_metadata_for_build_wheel(Path(tmp))
            if result is None:  # the backend has no such hook: it would build a wheel instead
                return ProjectMetadata(ok=False, backend=backend, error="backend cannot prepare metadata",
                                       isolated=env.isolated)
            text = (result.metadata / "METADATA").read_text(encoding="utf-8")
    except BuildEnvError as e:
        return ProjectMetadata(ok=False, checked=False, backend=backend, build_requires=declared, error=str(e))
    except BackendFailed as e:
        last = str(e).strip().splitlines()[-1][:300]
        if _not_importable(e, backend_module):
            return ProjectMetadata(ok=False, checked=False, backend=backend, build_requires=declared,
                                   error=f"the build backend {backend} could not be imported ({last})",
                                   isolated=env.isolated)
        return ProjectMetadata(ok=False, backend=backend, build_requires=declared,
                               error=f"build backend failed: {last}", isolated=env.isolated)
    except Exception as e:  # noqa: BLE001 - a broken project is a finding, not a crash of the bot
        return ProjectMetadata(ok=False, error=f"{type(e).__name__}: {e}", isolated=env.isolated)
    meta = email.parser.Parser().parsestr(text)
    return ProjectMetadata(ok=True, backend=backend, build_requires=(*declared, *extra),
                           name=meta.get("Name"), version=meta.get("Version"),
                           requires_dist=tuple(meta.get_all("Requires-Dist") or ()), isolated=env.isolated)
