"""Questions for the job's own interpreter: what its torch is, what its torch has, what its device can do.

The bot never imports torch itself (its process needs no torch at all: the
bot and promote workflows install none). Whatever depends on torch is asked of
the interpreter the job runs with, in a subprocess with a scrubbed environment,
as the doctor's profiler pass already is: the answer is the job's, not the
bot's. A script asked this way is a plain file run by path (``python FILE``):
it needs nothing but the standard library and what it asks about, never the
bot's own packages. A subprocess that imports torch costs seconds, so an
answer that depends only on the interpreter and its torch build is kept under
the user's cache directory, keyed by both (:func:`ask_cached`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import platformdirs

from bot.executors.environment import scrubbed_environment
from infrarsi.contract.entry import PYTHONS
from infrarsi.contract.model import PYTHON_PLACEHOLDER

__all__ = ["ask", "ask_cached", "job_python", "torch_version"]

#: ``{"version": …}`` of the job's torch, read from its installed metadata (torch itself is not imported).
_TORCH_VERSION = ("import importlib.metadata as m, json\n"
                  "try:\n    v = m.version('torch')\nexcept m.PackageNotFoundError:\n    v = None\n"
                  "print(json.dumps({'version': v}))\n")


def job_python(argv: Sequence[str]) -> str:
    """The interpreter the job's Python runs in: a leading ``python`` is the bot's own (trials run so,
    :func:`infrarsi.contract.job_line.contract_job_line`), another Python (``python3.11``,
    ``/opt/conda/bin/python``) is itself; a command that is no Python interpreter (``torchrun``, a shell
    script) runs its Python where the bot does."""
    first = argv[0] if argv else PYTHON_PLACEHOLDER
    if first == PYTHON_PLACEHOLDER or not PYTHONS.match(first):
        return sys.executable
    return shutil.which(first) or first


def ask(python: str, script: str | Path, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None,
        timeout_s: float = 120.0) -> tuple[Any, str]:
    """(the JSON object ``script`` printed last on stdout, "") or (None, why not) from ``python`` running it
    (a path, or source text) with ``args``, in ``env`` (the caller's, scrubbed already; default: the bot's
    own, scrubbed)."""
    argv = [python, str(script)] if isinstance(script, Path) else [python, "-c", script]
    try:
        done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout_s,
                              env=dict(env) if env is not None else scrubbed_environment(),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{python} could not run it ({type(e).__name__}: {e})"
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), f"exit {done.returncode}")
        return None, f"{python} failed: {last.strip()[:300]}"
    try:
        return json.loads(lines[-1]), ""
    except ValueError:
        return None, f"{python} printed no JSON: {lines[-1][:200]!r}"


def torch_version(python: str, env: Mapping[str, str] | None = None) -> str | None:
    """The version of torch installed where ``python`` runs (None: none, or it could not be asked); read from
    the installed metadata, in this process when ``python`` is the bot's own (torch is not imported either way)."""
    if python == sys.executable and not (env or {}).get("PYTHONPATH"):
        try:
            return metadata.version("torch")
        except metadata.PackageNotFoundError:
            return None
    answer, _ = ask(python, _TORCH_VERSION, env=env, timeout_s=60.0)
    return answer.get("version") if isinstance(answer, dict) else None


def ask_cached(python: str, script: str, args: Sequence[str] = (), *, timeout_s: float = 120.0) -> Any:
    """:func:`ask`'s answer (None when there is none) for a question whose answer depends only on ``python`` and
    its torch build: kept under the user's cache directory, keyed by both, the script and its arguments; a
    failure is never kept."""
    key = hashlib.sha256(json.dumps([python, torch_version(python), script, list(args)]).encode()).hexdigest()[:24]
    path = Path(platformdirs.user_cache_dir("infrarsi")) / "job-python" / f"{key}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))["answer"]
    except (OSError, ValueError, KeyError):
        pass
    answer, _ = ask(python, script, args, timeout_s=timeout_s)
    if answer is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"answer": answer}), encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass  # a read-only home: the next analysis asks again
    return answer
