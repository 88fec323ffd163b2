"""An isolated build environment for a project's declared ``build-system.requires``, as pip builds one.

The bot reads a training repo's metadata through the repo's own build backend
(``project_metadata.py``). When the bot's interpreter already satisfies every
requirement it is used as it is (pip's ``--no-build-isolation``); otherwise a
virtual environment with exactly the declared requirements is created and kept
under the user's cache directory, keyed by the interpreter and the
requirements, so the next doctor reuses it. A requirement that cannot be
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
from importlib import metadata
from pathlib import Path

import platformdirs
from packaging.requirements import InvalidRequirement, Requirement

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
    python: str
    isolated: bool  # False: the bot's own interpreter already satisfied every requirement


def satisfied(requirements: Sequence[str]) -> bool:
    """Whether this interpreter has every requirement, at a version its specifier accepts."""
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return False
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            return False
    return True


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
