"""An isolated build environment for a project's declared ``build-system.requires``, as pip builds one.

The bot reads a training repo's metadata through the repo's own build backend
(``project_metadata.py``). When the bot's interpreter already satisfies every
requirement (``build.check_dependency``, requirements of requirements
included) it is used as it is (pip's ``--no-build-isolation``); otherwise a
virtual environment with exactly the declared requirements is created and kept
under the user's cache directory, keyed by the interpreter and the
requirements, so the next doctor and every verification reuse it (``build``'s
own ``DefaultIsolatedEnv`` is a fresh temporary one each time, and its pip sees
the bot's whole environment). :class:`BuildEnv` is a ``build.env.IsolatedEnv``,
what ``build.ProjectBuilder.from_isolated_env`` takes. A requirement that cannot be
installed (no index reachable, no such package) is said in one line; the bot's
own failure is never charged to the project.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from build import check_dependency
from packaging.requirements import InvalidRequirement

from bot.executors.environment import scrubbed_environment
from infrarsi.errors import InfraRSIError

#: pip needs its own configuration and the machine's proxies (no token or key passes the scrub either way).
PIP_ENV = ("PIP_*", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
           "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
INSTALL_TIMEOUT_S = 600.0


class BuildEnvError(InfraRSIError, RuntimeError):
    """The environment could not be made (the message is one line: what, and what to do). The metadata check
    reports it as not checked; it never reaches the command line on its own."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildEnv:
    """Where the backend runs; a ``build.env.IsolatedEnv`` (``python_executable``, ``make_extra_environ``)."""

    python: str
    isolated: bool  # False: the bot's own interpreter already satisfied every requirement

    @property
    def python_executable(self) -> str:
        return self.python

    def make_extra_environ(self) -> dict[str, str]:
        """The environment's scripts first on PATH, and no ``PYTHONPATH`` leaking in (as build's own)."""
        scripts = str(Path(self.python).parent)
        return {"PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")]).rstrip(os.pathsep), "PYTHONPATH": ""}


def satisfied(requirements: Sequence[str]) -> bool:
    """Whether this interpreter has every requirement and what it requires, at versions their specifiers accept
    (``build.check_dependency``; a requirement whose marker does not apply here is met)."""
    try:
        return not any(next(check_dependency(text), None) for text in requirements)
    except InvalidRequirement:
        return False


def cache_root() -> Path:
    return Path(platformdirs.user_cache_dir("infrarsi")) / "build-envs"


def environment_for(requirements: Sequence[str], *, root: Path | None = None) -> BuildEnv:
    """The bot's interpreter when it satisfies ``requirements``; else a cached isolated environment with them."""
    if satisfied(requirements):
        return BuildEnv(python=sys.executable, isolated=False)
    wanted = sorted(set(requirements))
    key = hashlib.sha256("\n".join([sys.version, *wanted]).encode()).hexdigest()[:16]
    where = (root or cache_root()) / key
    where.parent.mkdir(parents=True, exist_ok=True)
    python = where / "bin" / "python"
    done = where / ".infrarsi-installed"
    with open(where.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another doctor building the same environment: wait for it
        if not done.is_file():
            _create(where, wanted)
            done.write_text("\n".join(wanted) + "\n", encoding="utf-8")
    return BuildEnv(python=str(python), isolated=True)


def install(env: BuildEnv, requirements: Sequence[str]) -> None:
    """Add the backend's dynamic requirements (``get_requires_for_build_wheel``) to an isolated environment."""
    if not env.isolated or not requirements:
        return
    _pip(env.python, list(requirements))


def _create(where: Path, requirements: list[str]) -> None:
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildEnvError(f"could not create a build environment in {where}: {e}") from None
    _pip(str(where / "bin" / "python"), requirements)


def _pip(python: str, requirements: list[str]) -> None:
    env = scrubbed_environment(base=os.environ, passthrough=PIP_ENV)
    env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                               *requirements], capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildEnvError(f"installing the build requirements {', '.join(requirements)} took over "
                            f"{INSTALL_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        last = next((ln.strip() for ln in reversed(done.stderr.splitlines()) if ln.strip()), "pip failed")
        raise BuildEnvError(f"could not install the build requirements {', '.join(requirements)} "
                            f"({last[:200]}); install them where the bot runs, or let pip reach an index")
