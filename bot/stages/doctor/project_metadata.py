"""A pyproject-based training repo's metadata, from its own build backend, through ``build``'s public API.

Not hand-parsed: the backend named in ``[build-system]`` prepares the metadata
as pip would (``build.ProjectBuilder.metadata_path``: the
``prepare_metadata_for_build_wheel`` hook, or a wheel built when the backend
lacks it), so dynamic versions and dependencies come out right. The hooks run
through pyproject-hooks with a ``runner`` of ours: a subprocess with a
scrubbed environment, since a build backend runs the project's own code and
none of the bot's tokens may reach it. The backend runs in the bot's
interpreter when that has every declared requirement, else in an isolated
environment (:mod:`bot.stages.doctor.build_env`, build's ``IsolatedEnv``). The
result joins the software fingerprint, and verification checks that a patched
candidate still prepares its metadata.
"""

from __future__ import annotations

import email.parser
import os
import subprocess
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from build import BuildBackendException, BuildException, ProjectBuilder
from pyproject_hooks import BackendUnavailable

from bot.executors.environment import scrubbed_environment
from bot.stages.doctor.build_env import BuildEnvError, environment_for, install

#: A hook that runs longer than this fails the check (a backend that hangs must not hold the doctor).
HOOK_TIMEOUT_S = 600.0
#: What pip assumes when ``[build-system]`` names no backend.
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"


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


def scrubbed_runner(cmd: Sequence[str], cwd: str | None = None,
                    extra_environ: Mapping[str, str] | None = None) -> None:
    """pyproject-hooks' ``runner``: the hook in a subprocess whose environment is ours scrubbed (no token, no
    ``PYTHONPATH`` of the bot's) plus what the hook caller and the isolated environment add; its output is
    captured, so a failure carries its stderr (:class:`subprocess.CalledProcessError`)."""
    env = scrubbed_environment(base=os.environ)
    env.pop("PYTHONPATH", None)
    env.update(extra_environ or {})
    subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=HOOK_TIMEOUT_S,
                   stdin=subprocess.DEVNULL)


def _backend(root: Path) -> str:
    """The ``build-backend`` the project names (for the record; ``build`` parses and validates the table)."""
    with open(root / "pyproject.toml", "rb") as f:
        table = tomllib.load(f).get("build-system") or {}
    return str(table.get("build-backend") or DEFAULT_BACKEND)


def _why(e: BuildBackendException) -> str:
    """The last line the failed hook wrote (its exception), else what ``build`` says."""
    inner = e.exception
    text = getattr(inner, "stderr", None) or getattr(inner, "traceback", None) or ""
    last = next((ln.strip() for ln in reversed(str(text).splitlines()) if ln.strip()), "")
    return (last or str(e))[:300]


def _not_importable(e: BuildBackendException, backend: str) -> bool:
    """The backend itself could not be imported (the environment lacks it): the bot's problem, not the project's.
    A backend of the project's own tree (``backend-path``) that fails to import is the project's finding."""
    if not isinstance(e.exception, BackendUnavailable):
        return False
    text = f"{e.exception.message}\n{e.exception.traceback or ''}"
    top = backend.split(":")[0].split(".")[0]
    return ("ModuleNotFoundError" in text or "ImportError" in text) and f"'{top}" in text


def project_metadata(root: Path) -> ProjectMetadata | None:
    """None when ``root`` has no pyproject.toml; else what its backend reports (or why it failed), run in an
    isolated build environment with its declared ``build-system.requires`` when this interpreter lacks them."""
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        backend = _backend(root)
        declared = tuple(sorted(ProjectBuilder(root, runner=scrubbed_runner).build_system_requires))
    except (BuildException, OSError, ValueError) as e:  # an unreadable [build-system] is the project's finding
        return ProjectMetadata(ok=False, error=f"{type(e).__name__}: {e}")
    try:
        env = environment_for(declared)
    except BuildEnvError as e:
        return ProjectMetadata(ok=False, checked=False, backend=backend, build_requires=declared, error=str(e))
    builder = (ProjectBuilder.from_isolated_env(env, root, runner=scrubbed_runner) if env.isolated
               else ProjectBuilder(root, python_executable=env.python_executable, runner=scrubbed_runner))
    try:
        with tempfile.TemporaryDirectory(prefix="infrarsi-metadata-") as tmp:
            extra = tuple(sorted(builder.get_requires_for_build("wheel")))
            install(env, extra)
            text = (Path(builder.metadata_path(tmp)) / "METADATA").read_text(encoding="utf-8")
    except BuildEnvError as e:
        return ProjectMetadata(ok=False, checked=False, backend=backend, build_requires=declared, error=str(e))
    except BuildBackendException as e:
        if _not_importable(e, backend):
            return ProjectMetadata(ok=False, checked=False, backend=backend, build_requires=declared,
                                   error=f"the build backend {backend} could not be imported ({_why(e)})",
                                   isolated=env.isolated)
        return ProjectMetadata(ok=False, backend=backend, build_requires=declared,
                               error=f"build backend failed: {_why(e)}", isolated=env.isolated)
    except Exception as e:  # noqa: BLE001 - a broken project is a finding, not a crash of the bot
        return ProjectMetadata(ok=False, backend=backend, build_requires=declared, error=f"{type(e).__name__}: {e}",
                               isolated=env.isolated)
    meta = email.parser.Parser().parsestr(text)
    return ProjectMetadata(ok=True, backend=backend, build_requires=(*declared, *extra),
                           name=meta.get("Name"), version=meta.get("Version"),
                           requires_dist=tuple(meta.get_all("Requires-Dist") or ()), isolated=env.isolated)
