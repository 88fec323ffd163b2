"""The layout the design promises: git only behind the workspace seam, every Protocol in infrarsi/seams."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("bot", "infrarsi")


def _modules() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (also inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_workspace_seam_imports_pygit2() -> None:
    workspace = ROOT / "bot" / "workspace"
    offenders = [str(p.relative_to(ROOT)) for p in _modules()
                 if "pygit2" in _imports(p) and not p.is_relative_to(workspace)]
    assert offenders == [], f"pygit2 imported outside bot/workspace/: {', '.join(offenders)}"


def test_the_workspace_internals_stay_inside_it() -> None:
    """``bot.workspace._access`` hands out pygit2 objects; outside the seam it would be pygit2 by another name."""
    workspace = ROOT / "bot" / "workspace"
    offenders = [str(p.relative_to(ROOT)) for p in _modules() if not p.is_relative_to(workspace)
                 and re.search(r"bot\.workspace\._repo\b", p.read_text(encoding="utf-8"))]
    assert offenders == [], f"bot.workspace._access used outside bot/workspace/: {', '.join(offenders)}"


def test_the_engine_never_imports_the_bot() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "infrarsi").rglob("*.py") if "bot" in _imports(p)]
    assert offenders == [], f"infrarsi imports bot in: {', '.join(offenders)}"


def test_every_protocol_lives_in_the_seams() -> None:
    seams = ROOT / "infrarsi" / "seams"
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    (isinstance(b, ast.Name) and b.id == "Protocol") or
                    (isinstance(b, ast.Attribute) and b.attr == "Protocol") for b in node.bases):
                found.append((path, node.name))
    outside = [f"{p.relative_to(ROOT)}::{name}" for p, name in found if not p.is_relative_to(seams)]
    assert outside == [], f"Protocols outside infrarsi/seams/: {', '.join(outside)}"
    assert {name for _, name in found} >= {"Executor", "Workspace", "Proposer", "Forge", "Bank"}


def test_no_test_helper_ships_in_the_product() -> None:
    helpers = [str(p.relative_to(ROOT)) for p in _modules() if p.stem in ("testing", "replay", "fakes")]
    assert helpers == [], f"test helpers inside the product: {', '.join(helpers)} (they belong in tests/support/)"


def test_no_implementation_of_a_seam_imports_a_stage() -> None:
    """Executors, proposers, forges, the bank and the workspace serve the stages; a stage is never below them
    (the built-in proposer gets init's drafter handed in; a recovered Slurm trial's candidate is read by
    ``infrarsi.candidates``)."""
    seams = [ROOT / "bot" / d for d in ("executors", "proposers", "forges", "bank", "workspace", "patching")]
    offenders = []
    for path in _modules():
        if not any(path.is_relative_to(s) for s in seams):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n.startswith("bot.stages")]
    assert offenders == [], "; ".join(offenders)


def test_a_command_line_is_split_in_one_place() -> None:
    """``infrarsi.contract.entry.split_command`` splits a one-string command; init's shell reader reads whole shell
    lines (``cd``, ``&&``, ``VAR=``) with its own lexer. A third splitter would drift from both."""
    owner = ROOT / "infrarsi" / "contract" / "entry.py"
    offenders = [str(p.relative_to(ROOT)) for p in _modules()
                 if p != owner and "shlex.split(" in p.read_text(encoding="utf-8")]
    assert offenders == [], f"shlex.split outside infrarsi/contract/entry.py: {', '.join(offenders)}"


#: Modules whose only tests run them end to end (a real trial, a real cluster), each with the test that does.
END_TO_END_ONLY: dict[str, str] = {
}


def _test_names() -> set[str]:
    return {p.stem for top in ("tests", "benchmarks/tests") for p in (ROOT / top).rglob("test_*.py")}


def test_every_module_has_a_test_named_after_it() -> None:
    """``bot/executors/local.py`` is covered by ``test_local*.py`` or ``test_executor(s)_local*.py``: whoever
    changes a module finds its tests by name (a leading underscore of the module's name is dropped). A test file
    counts for the module whose name it matches longest (``test_build_env.py`` is ``build_env.py``'s, not
    ``build.py``'s)."""
    names: dict[str, list[str]] = {}  # a test name prefix -> the modules it names
    modules = []
    for path in _modules():
        if path.name in ("__init__.py", "__main__.py") or "site" in path.parts:
            continue
        rel = str(path.relative_to(ROOT))
        modules.append(rel)
        stem, pkg = path.stem.lstrip("_"), path.parent.name
        for n in {f"test_{stem}", *(f"test_{k}_{stem}" for k in (pkg, pkg.removesuffix("s")))}:
            names.setdefault(n, []).append(rel)
    covered: set[str] = set()
    for test in _test_names():
        matches = [n for n in names if test == n or test.startswith(n + "_")]
        if matches:
            covered.update(names[max(matches, key=len)])
    missing = [m for m in modules if m not in covered and m not in END_TO_END_ONLY]
    assert missing == [], f"no test named after: {', '.join(missing)} (add tests/test_<module>.py)"
    stale = [m for m, test in END_TO_END_ONLY.items() if not (ROOT / m).exists() or not (ROOT / test).exists()]
    assert stale == [], f"END_TO_END_ONLY names what is gone: {stale}"
