"""Every import of the product is declared: a third-party module that bot/ or infrarsi/ imports (at module level or
inside a function) comes from a distribution pyproject.toml names, with a version bound, in ``dependencies`` or,
for an optional integration, in its extra. torch only in the scripts that run in the job's own interpreter: the
bot's process never imports it. (The clean install itself: test_install.py.)"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: Run by path in the job's interpreter (or inside the job), never imported by the bot: torch is theirs.
JOB_SIDE = {"bot/stages/doctor/device_probe.py", "bot/stages/doctor/profile_job.py",
            "bot/executors/witness/site/sitecustomize.py"}
#: Optional integrations: the module, and the extra that declares it (the code says when it is missing).
OPTIONAL = {"matplotlib": "png"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;,]", requirement, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")


def _imports() -> dict[str, set[str]]:
    """Top-level module -> the product files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for top in ("bot", "infrarsi"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_declared_and_bounded_dependency() -> None:
    declared = {_name(r): r for r in PYPROJECT["dependencies"]}
    extras = {extra: {_name(r) for r in reqs} for extra, reqs in PYPROJECT["optional-dependencies"].items()}
    dists = metadata.packages_distributions()
    undeclared = []
    for module, files in sorted(_imports().items()):
        if module in sys.stdlib_module_names or module in ("bot", "infrarsi", "__future__"):
            continue
        names = {_name(d) for d in dists.get(module, [module])}
        if module == "torch":
            assert files <= JOB_SIDE, f"torch imported by the bot's own modules: {sorted(files - JOB_SIDE)}"
            assert "torch" in extras["trial"] and "torch" not in declared
            continue
        if module in OPTIONAL:
            assert names & extras[OPTIONAL[module]], f"{module}: not in the {OPTIONAL[module]} extra"
            continue
        if not names & set(declared):
            undeclared.append(f"{module} ({', '.join(sorted(files))})")
    assert undeclared == [], "imported but not declared in pyproject.toml: " + "; ".join(undeclared)
    unbounded = [r for r in PYPROJECT["dependencies"] if not re.search(r"[<>=~]", r)]
    assert unbounded == [], f"dependencies without a version bound: {unbounded}"
