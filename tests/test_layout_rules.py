"""The house rules the layout keeps (issue 37): no import cycle, no reach into another module's private names,
one owner for every path under ``.infrarsi/`` and every branch InfraRSI owns, no probing of a seam's
capabilities, stages reach git only through the ``Workspace`` they are given, and only process or git work
under ``bot/stages/run``."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("bot", "infrarsi")


def _modules() -> dict[str, Path]:
    out = {}
    for top in PRODUCT:
        for path in (ROOT / top).rglob("*.py"):
            if "site" in path.parts and path.name == "sitecustomize.py":
                continue  # the witness's payload runs in the trial's interpreter: never imported
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            out[name] = path
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            found.update(id(sub) for sub in ast.walk(node))
    return found


def _imports(name: str, path: Path, *, type_checking: bool = False) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every import of ``path``, function-level ones included, the
    ``TYPE_CHECKING`` block only with ``type_checking``; relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if type_checking else _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(parts + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out += [(module, a.name) for a in node.names]
    return out


def _graph() -> dict[str, set[str]]:
    """Who imports whom: at module level, inside a function, or only for the type checker (a cycle hidden behind
    a function-level or a ``TYPE_CHECKING`` import is still a cycle: move what both sides need)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for module, alias in _imports(name, path, type_checking=True):
            target: str | None = f"{module}.{alias}" if alias and f"{module}.{alias}" in MODULES else module
            while target and target not in MODULES:
                target = target.rpartition(".")[0] or None
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == [], "modules that import each other (break the cycle: move what both need)"


def test_no_module_imports_another_modules_private_name() -> None:
    offenders = [f"{name} imports {module}.{alias}" for name, path in MODULES.items()
                 for module, alias in _imports(name, path)
                 if alias and alias.startswith("_") and not alias.startswith("__") and module in MODULES
                 and module != name]
    assert offenders == [], "a private name used outside its module (make it public, or move it): " + \
        "; ".join(offenders)


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_every_path_under_the_state_dir_is_named_by_rundir() -> None:
    owner = ROOT / "infrarsi" / "rundir.py"
    pattern = re.compile(r"(^|/)\.infrarsi(/|$)|^(stdout|stderr)\.log$|^proposed-patches\.json$")
    offenders = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p in MODULES.values() if p != owner
                 for line, text in _strings(p) if pattern.search(text)]
    assert offenders == [], "paths under .infrarsi/ built outside infrarsi/rundir.py: " + "; ".join(offenders)


def test_every_branch_infrarsi_owns_is_spelled_by_naming() -> None:
    owner = ROOT / "bot" / "workspace" / "naming.py"
    pattern = re.compile(r"^infrarsi/[a-z]")
    offenders = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p in MODULES.values() if p != owner
                 for line, text in _strings(p) if pattern.search(text)]
    assert offenders == [], "branch names built outside bot/workspace/naming.py: " + "; ".join(offenders)


SEAM_OBJECTS = re.compile(r"\b(executor|forge|proposer|workspace|bank)\b", re.I)


def test_no_seam_is_probed_for_a_capability() -> None:
    offenders = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr",
                                                                                                   "hasattr"):
                target = ast.unparse(node.args[0]) if node.args else ""
                if SEAM_OBJECTS.search(target):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == [], "declare the capability on the Protocol (with a default) instead: " + "; ".join(offenders)


#: What makes a module of the run stage the hands' work: it starts processes, touches git, or drives the
#: trials that do (through the executor, the workspace, the patching of worktrees).
HANDS = re.compile(r"^(subprocess|infrarsi\.seams\.(executor|workspace)$|bot\.workspace|bot\.executors|bot\.patching|"
                   r"bot\.stages\.run\.(candidate|trial|"
                   r"search|verify|references))")


#: The modules of ``bot.workspace`` a stage may import: they open no repository (branch names, errors, the bot's
#: identity and message format, links to data outside git). The rest of git is the ``Workspace`` a stage is given.
GIT_FREE_WORKSPACE = frozenset({"bot.workspace.naming", "bot.workspace.errors", "bot.workspace.identity",
                                "bot.workspace.data_links"})


def _workspace_imports(name: str, path: Path) -> list[str]:
    """The ``bot.workspace`` modules (or the package itself) ``name`` imports."""
    out = []
    for module, alias in _imports(name, path):
        target = f"{module}.{alias}" if alias and f"{module}.{alias}" in MODULES else module
        if target == "bot.workspace" or target.startswith("bot.workspace."):
            out.append(target)
    return out


def test_stages_reach_git_only_through_the_workspace_they_are_given() -> None:
    stages = {n: p for n, p in MODULES.items() if n == "bot.stages" or n.startswith("bot.stages.")}
    offenders = [f"{name} imports {target}" for name, path in stages.items()
                 for target in _workspace_imports(name, path) if target not in GIT_FREE_WORKSPACE]
    assert offenders == [], "take the git work as a Workspace parameter (infrarsi.seams.workspace) instead: " + \
        "; ".join(offenders)


def test_no_module_runs_a_git_command() -> None:
    """git goes through pygit2 behind the Workspace: no ``["git", ...]`` command line anywhere in the product."""
    offenders = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant) \
                    and node.elts[0].value == "git":
                offenders.append(f"{name} line {node.lineno}")
    assert offenders == [], "ask the Workspace (bot/workspace, over pygit2) instead: " + ", ".join(offenders)


def test_the_git_free_workspace_modules_import_no_git_work() -> None:
    """The allowed modules stay a narrow door: none of them pulls in a module that opens a repository."""
    offenders = [f"{name} imports {target}" for name in sorted(GIT_FREE_WORKSPACE)
                 for target in _workspace_imports(name, MODULES[name]) if target not in GIT_FREE_WORKSPACE]
    assert offenders == [], "; ".join(offenders)


def test_the_run_stage_holds_only_process_and_git_work() -> None:
    run = {n: p for n, p in MODULES.items() if n.startswith("bot.stages.run.")}
    pure = [n for n, p in run.items()
            if not any(HANDS.match(module) for module, _ in _imports(n, p)) and n != "bot.stages.run.__init__"]
    assert pure == [], "pure computation belongs in infrarsi/ (the engine): " + ", ".join(sorted(pure))


def test_every_module_has_a_line_in_the_architecture_page() -> None:
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [str(p.relative_to(ROOT)) for p in MODULES.values() if p.name != "__init__.py" and p.name not in page]
    assert missing == [], "add each to docs/ARCHITECTURE.md's tree: " + ", ".join(missing)


# -- the test tree: helpers in tests/support, no test borrows from another test, none imports a benchmark -----

def _test_tree(root: Path) -> dict[str, Path]:
    """Every module under ``root/tests``, by dotted name."""
    return {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted((root / "tests").rglob("*.py"))}


def _test_tree_faults(root: Path) -> list[str]:
    """What breaks the test tree's rules: a helper outside tests/support, an import of benchmarks, an import of
    any module of tests/ that is not tests.support (another test, a conftest)."""
    faults = []
    for name, path in _test_tree(root).items():
        where = path.relative_to(root)
        if not path.name.startswith("test_") and path.name not in ("conftest.py", "__init__.py") \
                and where.parts[1] != "support":
            faults.append(f"{where}: a helper; it belongs in tests/support/")
        for module, alias in _imports(name, path):
            target = f"{module}.{alias}" if module == "tests" and alias else module
            if target.split(".")[0] == "benchmarks":
                faults.append(f"{where} imports {target}: tests of a benchmark belong in benchmarks/tests/")
            elif target.split(".")[0] == "tests" and target.split(".")[:2] != ["tests", "support"]:
                faults.append(f"{where} imports {target}: what tests share belongs in tests/support/")
    return list(dict.fromkeys(faults))  # one line per module and import


def test_the_test_tree_keeps_helpers_in_support_and_imports_no_other_test_and_no_benchmark() -> None:
    faults = _test_tree_faults(ROOT)
    assert faults == [], "\n".join(faults)


def test_the_test_tree_rules_catch_what_they_forbid(tmp_path: Path) -> None:
    files = {"tests/__init__.py": "", "tests/support/__init__.py": "", "tests/support/git.py": "",
             "tests/conftest.py": "from tests.support.git import x\n",
             "tests/helpers.py": "", "tests/test_a.py": "from tests.test_b import y\nimport benchmarks.search\n",
             "tests/test_b.py": "from tests import conftest\nfrom tests import support\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert _test_tree_faults(tmp_path) == [
        "tests/helpers.py: a helper; it belongs in tests/support/",
        "tests/test_a.py imports tests.test_b: what tests share belongs in tests/support/",
        "tests/test_a.py imports benchmarks.search: tests of a benchmark belong in benchmarks/tests/",
        "tests/test_b.py imports tests.conftest: what tests share belongs in tests/support/"]
