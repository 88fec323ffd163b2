"""Mermaid's own parser for tests: GitHub renders ```mermaid blocks with Mermaid, so a block it cannot parse
shows as an error box in the pull request. Runs ``tests/support/mermaid/check.mjs`` under node, with mermaid
and jsdom installed once from npm into a cache directory (no browser, unlike mermaid-cli)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "mermaid"


def _install() -> Path:
    """The directory holding node_modules for the pinned package.json; skips the test without node/npm."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run Mermaid's parser (apt-get install nodejs npm)")
    spec = (HERE / "package.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "infrarsi" / \
        f"mermaid-{hashlib.sha256(spec).hexdigest()[:12]}"
    if not (cache / "node_modules" / "mermaid").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "package.json").write_bytes(spec)
        result = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=cache,
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            pytest.skip(f"npm could not install mermaid: {result.stderr.strip()[-300:]}")
    shutil.copy(HERE / "check.mjs", cache / "check.mjs")
    return cache


def parse(blocks: list[str]) -> list[dict]:
    """Mermaid's verdict on each block: ``{"ok": True, "type": "xychart"}`` or ``{"ok": False, "error": …}``."""
    cache = _install()
    result = subprocess.run(["node", "check.mjs"], cwd=cache, input=json.dumps(blocks), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)
