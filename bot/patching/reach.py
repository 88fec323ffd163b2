"""Which lines of a training repo can run: a static reach analysis from the entry point (libcst, best effort).

A catalog patch that rewrites code the job never runs costs a trial and buys
nothing: a hand-written attention in the fallback branch of ``if self.flash:``
(nanoGPT's ``CausalSelfAttention.forward``), a model built inside
``GPT.from_pretrained`` when the command trains from scratch. This module
answers, per file, which lines are *decided dead*:

- top-level functions and classes of a reached module that no reached code uses:
  a bare name is followed to the definition it is bound to (the module's own
  def, or through ``from m import f as g`` and star imports, re-exports
  included), an attribute ``x.f`` or a string ``"f"`` counts only in a module
  that has imported the defining module (or one re-exporting ``f``) as a module,
  a dotted string ``"pkg.mod.f"`` names its definition, and a word in a config
  file of the repo (other than InfraRSI's own contract) counts anywhere. Importing
  a name is not using it: a package whose ``__init__`` imports every module
  runs each module's top-level code, but none of its functions until something
  reached calls them (``torch.log`` does not reach a module's own ``log``);
- methods of a reached class whose names nothing reached ever mentions (by name,
  attribute, string literal, or in a config file);
- branches of ``if`` statements whose condition is decided: literals,
  ``TYPE_CHECKING``, ``__name__ == "__main__"`` (true in the entry point, false
  in a module reached by import), module globals assigned once
  from a literal (overridden, nanoGPT-style, by ``--key=value`` arguments of
  the command when the entry point ``exec``s a configurator), attributes
  ``self.x`` assigned once from a decided expression, and
  ``hasattr(torch.…, "name")`` asked of the job's own interpreter (every such
  question of the repo in one subprocess, :mod:`bot.executors.job_python`: the
  bot imports no torch, and the answer is the job's torch, not the bot's; where
  it cannot answer, the branch stays undecided).

Everything else is undecided and counts as reached: the analysis only ever
removes a patch site it can prove dead, so a false "does not apply" needs a
wrong proof, not a missing one. The user's code is parsed, never imported.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from bot.executors.job_python import ask_cached, job_python
from bot.progress import Ticker
from infrarsi.contract.entry import entry_file, split_command, split_interpreter
from infrarsi.rundir import STATE_DIR
from infrarsi.source_text import read_source

_UNKNOWN: Any = object()
_ENTRY_METHODS = {"forward", "__init__", "__call__", "__enter__", "__exit__", "__iter__", "__next__", "__len__",
                  "__getitem__", "__post_init__", "__new__", "training_step", "configure_optimizers"}
_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", STATE_DIR, "node_modules", "site-packages", ".tox"}
_CONFIG_SUFFIXES = {".yaml", ".yml", ".json", ".toml", ".cfg", ".ini"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: ``hasattr(torch.x.y, "name")`` as written in a repo's source: the questions asked of the job's torch.
_TORCH_HASATTR = re.compile(r"""hasattr\(\s*(torch(?:\s*\.\s*\w+)*)\s*,\s*['"](\w+)['"]\s*\)""")
#: Run by the job's interpreter: each (dotted, attr) question answered as ``hasattr`` would, undecidable ones left out.
_ASK_TORCH = """
import importlib, json, sys
out = {}
for dotted, attr in json.loads(sys.argv[1]):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                break
            obj = getattr(obj, part)
        else:
            out[dotted + ":" + attr] = hasattr(obj, attr)
        break
print(json.dumps(out))
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Reach:
    """Per repo-relative file, the 1-based lines proven never to run; files absent were not decided.

    ``modules`` are the repo's files the job imports (None: unknown, e.g. an ``import_module`` of a computed
    name); a file outside them never runs. ``symbols`` are the reached top-level definitions and methods
    (``path::Name``, ``path::Class.method``) of those files."""

    dead: dict[str, frozenset[int]] = field(default_factory=dict)
    why: dict[tuple[str, int], str] = field(default_factory=dict)
    modules: frozenset[str] | None = None
    symbols: frozenset[str] = frozenset()

    def unreached(self, path: str, lines: Iterable[int]) -> str | None:
        """Why every one of ``lines`` of ``path`` never runs, or None when some may run (or nothing is known)."""
        if self.modules is not None and path not in self.modules:
            return "nothing on the path from the entry point imports this file"
        dead = self.dead.get(path)
        lines = list(lines)
        if not dead or not lines or any(line not in dead for line in lines):
            return None
        return self.why.get((path, lines[0]), "not reached from the entry point")

    def reaches_file(self, path: str) -> bool:
        """Whether ``path`` may run (True when nothing is known)."""
        return self.modules is None or path in self.modules


def analyse(root: Path, command: Iterable[str], *, knobs: Iterable[str] = (), workdir: str = ".") -> Reach:
    """The reach of ``command`` (its entry point, a script or ``-m module``, and arguments) run from
    ``workdir`` in the repo at ``root``."""
    argv = list(command)
    entry_path = entry_file(root, workdir, argv)
    if entry_path is None:
        return Reach()
    modules = _repo_modules(root)
    if entry_path not in modules.values():
        return Reach()
    bases = tuple(dict.fromkeys(_import_bases(entry_path, workdir)))
    ticker = Ticker(label=f"reading what {entry_path} runs")
    walker = _Walker(root=root, modules=modules, trees=_Trees(root, ticker, len(modules)), entry=entry_path,
                     argv=split_interpreter(argv)[2], knobs=set(knobs), workdir=workdir, bases=bases,
                     torch=TorchQuestions(root, sorted(modules.values()), job_python(argv)))
    try:
        reach = walker.run()
    except (cst.ParserSyntaxError, UnicodeDecodeError, OSError):
        return Reach()
    ticker.done(f"{len(reach.modules or ())} of the repo's {len(modules)} Python files are imported")
    return reach


class TorchQuestions:
    """``hasattr(torch.…, "name")`` answered by the job's interpreter: at the first question, every such question
    in the repo's files is asked at once, in one subprocess (its answer kept per interpreter and torch build); a
    question it could not decide is unknown."""

    def __init__(self, root: Path, paths: list[str], python: str) -> None:
        self.root, self.paths, self.python = root, paths, python
        self._answers: dict[str, bool] | None = None

    def hasattr(self, dotted: str, attr: str) -> Any:
        if self._answers is None:
            self._answers = self._ask()
        return self._answers.get(f"{dotted}:{attr}", _UNKNOWN)

    def _ask(self) -> dict[str, bool]:
        questions: set[tuple[str, str]] = set()
        for path in self.paths:
            try:
                text = (self.root / path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            questions |= {(re.sub(r"\s+", "", m[1]), m[2]) for m in _TORCH_HASATTR.finditer(text)}
        if not questions:
            return {}
        answer = ask_cached(self.python, _ASK_TORCH, [json.dumps(sorted(questions))])
        return {k: v for k, v in answer.items() if isinstance(v, bool)} if isinstance(answer, dict) else {}


class _Trees(dict[str, cst.Module]):
    """Repo files parsed when the walk first reaches them: a large repo's other scripts are never parsed."""

    def __init__(self, root: Path, ticker: Ticker, total: int) -> None:
        super().__init__()
        self.root, self.ticker, self.total = root, ticker, total

    def __missing__(self, path: str) -> cst.Module:
        tree = cst.parse_module(read_source(self.root / path))
        self[path] = tree
        self.ticker.tick(len(self), self.total, "files parsed")
        return tree


def _import_bases(entry: str, workdir: str) -> list[str]:
    """Where the job's imports are looked up, as dotted prefixes of the repo's modules: the script's own
    folder (``sys.path[0]``), the working directory, the repo's root and its ``src`` (import roots)."""
    out = []
    for folder in (posixpath.dirname(entry), workdir, ".", "src"):
        folder = posixpath.normpath(folder or ".")
        out.append("" if folder == "." else folder.replace("/", ".") + ".")
    return out


def _repo_modules(root: Path) -> dict[str, str]:
    """Dotted module name -> repo-relative path, for every .py file of the repo (not its venvs)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = rel.as_posix()
    return found


class _Walker:
    """Fixed point over 'reached' definitions: a def is reached once reached code mentions its name."""

    def __init__(self, *, root: Path, modules: dict[str, str], trees: dict[str, cst.Module], entry: str,
                 argv: list[str], knobs: set[str], workdir: str = ".", bases: tuple[str, ...] = ("",),
                 torch: TorchQuestions) -> None:
        self.root = root
        self.torch = torch
        self.workdir = workdir
        self.bases = bases
        self.modules = modules
        self.trees = trees
        self.entry = entry
        self.argv = argv
        self.knobs = knobs
        texts = _config_texts(root)
        self.config_words: set[str] = {n for text in texts for n in _IDENT.findall(text)}
        self.mentioned: set[str] = set(self.config_words)  # attributes, strings, keys (for methods)
        self.named: dict[str, set[str]] = {}  # bare names, per module that mentions them
        self.named_in: dict[str, set[str]] = {}  # the same, by name: the modules that mention it
        # What a module's reached code binds and mentions, for the top-level definitions it can reach:
        self.bindings: dict[str, dict[str, set[tuple[str, str]]]] = {}  # local name -> {(dotted module, name)}
        self.stars: dict[str, set[str]] = {}  # dotted modules star-imported
        self.module_objects: dict[str, set[str]] = {}  # repo files bound as module objects (import a.b, from p import m)
        self.words_in: dict[str, set[str]] = {}  # attribute names and identifiers in strings -> the modules they are in
        self.aliases: dict[str, set[tuple[str, str]]] = {}  # imported name -> {(module, local name it is bound to)}
        self.dotted_defs: set[tuple[str, str]] = set()  # ("pkg.mod", "Name") from strings "pkg.mod.Name"
        self._origins_memo: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self.shadows: dict[str, set[str]] = {}  # per module: top-level defs its own bare names refer to
        self.reached_modules: set[str] = set()
        self.reached_defs: set[int] = set()  # id() of FunctionDef/ClassDef nodes
        self.dead_branches: dict[str, list[tuple[cst.CSTNode, str]]] = {}
        self.dynamic = False  # getattr(x, <not a literal>) somewhere reached: every method may run
        self.dynamic_import = False  # import_module(<not a literal>) reached: any file may run
        self.dotted: set[str] = _dotted_names(texts)  # `_target_: model.GPT` names a module
        self.env: dict[str, dict[str, Any]] = {}

    # -- driving ------------------------------------------------------------------------------------
    def run(self) -> Reach:
        self._reach_module(self.entry)
        changed = True
        while changed:
            changed = False
            for dotted in sorted(self.dotted):  # strings naming a module of the repo: it may be imported by name
                before = len(self.reached_modules)
                self._import(dotted, self.entry)
                changed |= len(self.reached_modules) > before
            self.dotted.clear()
            for path in list(self.reached_modules):
                for node, owner in _defs(self.trees[path]):
                    if id(node) in self.reached_defs or not self._is_reached(node, owner, path):
                        continue
                    self.reached_defs.add(id(node))
                    self._scan(path, node, owner)
                    changed = True
        return self._result()

    def _is_reached(self, node: cst.FunctionDef | cst.ClassDef, owner: cst.ClassDef | None, path: str) -> bool:
        name = node.name.value
        if owner is not None and id(owner) not in self.reached_defs:
            return False
        if owner is not None and isinstance(node, cst.FunctionDef):
            return (name in _ENTRY_METHODS or name in self.mentioned or self.dynamic or _is_property(node)
                    or any(name in names for names in self.named.values()))
        return self._top_level_used(name, path)

    # -- top-level definitions: what reached code is bound to -------------------------------------------
    def _find(self, dotted: str) -> str | None:
        """The repo file a dotted module name imports, looked up as the job's imports are (import bases)."""
        for base in self.bases:
            target = self.modules.get(base + dotted) if dotted else None
            if target is not None:
                return target
        return None

    def _top_names(self, path: str) -> set[str]:
        return {node.name.value for node, owner in _defs(self.trees[path]) if owner is None}

    def _origins(self, path: str, local: str, seen: set[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
        """The top-level definitions (file, name) that the bare name ``local`` in ``path`` is bound to: through
        ``from m import f as local`` (and m's own re-exports), the module's own def, or a star import."""
        key = (path, local)
        top = seen is None  # only a whole answer is kept (inside a cycle a partial one is returned)
        if top and key in self._origins_memo:
            return self._origins_memo[key]
        seen = set() if seen is None else seen
        if key in seen:
            return set()
        seen.add(key)
        out: set[tuple[str, str]] = set()
        bound = self.bindings.get(path, {}).get(local)
        if bound:
            for dotted, name in bound:
                src = self._find(dotted)
                if src is None or src not in self.reached_modules:
                    continue
                if name in self._top_names(src):
                    out.add((src, name))
                out |= self._origins(src, name, seen)
        elif local in self._top_names(path):
            out.add((path, local))
        else:
            for dotted in self.stars.get(path, ()):
                src = self._find(dotted)
                if src is not None and src in self.reached_modules:
                    if local in self._top_names(src):
                        out.add((src, local))
                    out |= self._origins(src, local, seen)
        if top:
            self._origins_memo[key] = out
        return out

    def _top_level_used(self, name: str, path: str) -> bool:
        """Whether reached code uses the top-level ``name`` defined in ``path`` (see the module docstring)."""
        target = (path, name)
        if name in self.config_words or any(self._find(d) == path for d, n in self.dotted_defs if n == name):
            return True
        uses = {(where, name) for where in self.named_in.get(name, ())}
        uses |= {(where, local) for where, local in self.aliases.get(name, ()) if local in self.named.get(where, ())}
        if any(target in self._origins(where, local) for where, local in uses):
            return True
        return any(where == path or any(m == path or target in self._origins(m, name)
                                        for m in self.module_objects.get(where, ()))
                   for where in self.words_in.get(name, ()))

    def _name(self, path: str, name: str) -> None:
        self.named.setdefault(path, set()).add(name)
        self.named_in.setdefault(name, set()).add(path)

    def _reach_module(self, path: str) -> None:
        if path in self.reached_modules:
            return
        self.reached_modules.add(path)
        tree = self.trees[path]
        self.env[path] = self._module_env(path, tree)
        self.shadows[path] = _own_names(tree)
        for statement in tree.body:
            if not isinstance(statement, cst.FunctionDef | cst.ClassDef):
                self._scan(path, statement, None)

    # -- one reached unit ---------------------------------------------------------------------------
    def _scan(self, path: str, node: cst.CSTNode, owner: cst.ClassDef | None) -> None:
        """Collect what ``node`` mentions, skipping nested defs (reached on their own) and dead branches."""
        walker = self
        top_level = {id(d) for d, _ in _defs(self.trees[path])}
        self_env = _self_attributes(owner, walker, path) if owner is not None else {}
        if isinstance(node, cst.ClassDef):
            self_env = _self_attributes(node, walker, path)

        class _Collect(cst.CSTVisitor):
            def visit_FunctionDef(self, fn: cst.FunctionDef) -> bool:
                if fn is node:
                    for deco in fn.decorators:
                        deco.visit(self)
                    fn.params.visit(self)
                    fn.body.visit(self)
                    return False
                return id(fn) not in top_level  # a closure runs with its parent; a def is reached on its own

            def visit_ClassDef(self, cls: cst.ClassDef) -> bool:
                if id(cls) not in top_level and cls is not node:
                    return True
                if cls is node:
                    for base in cls.bases:
                        base.visit(self)
                    for deco in cls.decorators:
                        deco.visit(self)
                    for statement in cls.body.body:
                        if not isinstance(statement, cst.FunctionDef | cst.ClassDef):
                            statement.visit(self)
                return False

            def visit_If(self, stmt: cst.If) -> bool:
                value = walker.evaluate(stmt.test, path, self_env)
                stmt.test.visit(self)
                if value is True:
                    stmt.body.visit(self)
                    if stmt.orelse is not None:
                        walker.dead_branches.setdefault(path, []).append(
                            (stmt.orelse, f"the `else` of `if {_code(stmt.test)}:`, which is always true"))
                    return False
                if value is False:
                    walker.dead_branches.setdefault(path, []).append(
                        (stmt.body, f"the branch `if {_code(stmt.test)}:`, which is never true"))
                    if stmt.orelse is not None:
                        stmt.orelse.visit(self)
                    return False
                return True

            def visit_Name(self, name: cst.Name) -> None:
                walker._name(path, name.value)

            def visit_Attribute(self, attr: cst.Attribute) -> None:
                walker.mentioned.add(attr.attr.value)
                walker.words_in.setdefault(attr.attr.value, set()).add(path)

            def visit_SimpleString(self, s: cst.SimpleString) -> None:
                words = _IDENT.findall(s.value)
                walker.mentioned.update(words)
                for word in words:
                    walker.words_in.setdefault(word, set()).add(path)
                dotted = _dotted_names([s.value])
                walker.dotted.update(dotted)
                walker.dotted_defs.update((d.rpartition(".")[0], d.rpartition(".")[2]) for d in
                                          _dotted_strings(s.value))

            # getattr(x, <not a literal>) may fetch any method; it dispatches only if what it fetched is
            # called. A config walker (minGPT's CfgNode: `obj = getattr(obj, k)` then `setattr`) never calls
            # it, and calling every method reached for it would keep `from_pretrained` alive.
            def __init__(self) -> None:
                super().__init__()
                self.fetched: set[str] = set()  # names assigned from such a getattr
                self.called: set[str] = set()
                self.quiet: set[int] = set()  # id() of the getattr calls assigned to a name

            def visit_Assign(self, assign: cst.Assign) -> None:
                if _dynamic_getattr(assign.value) and len(assign.targets) == 1 \
                        and isinstance(assign.targets[0].target, cst.Name):
                    self.fetched.add(assign.targets[0].target.value)
                    self.quiet.add(id(assign.value))

            def visit_Call(self, call: cst.Call) -> None:
                if isinstance(call.func, cst.Name):
                    self.called.add(call.func.value)
                if _dynamic_getattr(call) and id(call) not in self.quiet:
                    walker.dynamic = True
                if _code(call.func).split(".")[-1] in ("import_module", "__import__") and not (
                        call.args and isinstance(call.args[0].value, cst.SimpleString)):
                    walker.dynamic_import = True

            def visit_Import(self, imp: cst.Import) -> bool:
                for alias in imp.names:
                    dotted = _code(alias.name)
                    walker._import(dotted, path)
                    parts = dotted.split(".")
                    prefixes = [dotted] if alias.asname is not None else \
                        [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
                    walker._bind_modules(path, prefixes)
                return False

            # Importing a name is not using it (a package's __init__.py re-exports every class): a def is reached
            # where reached code uses the name it was imported as; under `import X as Y`, Y's uses stand for X.
            def leave_ImportFrom(self, imp: cst.ImportFrom) -> None:
                if not isinstance(imp.names, cst.ImportStar):
                    for alias in imp.names:
                        if alias.asname is not None:
                            walker._name(path, _code(alias.name).split(".")[-1])

            def visit_ImportAlias(self, alias: cst.ImportAlias) -> bool:
                return False

            def visit_ImportFrom(self, imp: cst.ImportFrom) -> None:
                base = _code(imp.module) if imp.module is not None else ""
                dots = len(imp.relative)
                if dots:
                    package = Path(path).parent.parts
                    package = package[:len(package) - (dots - 1)] if dots > 1 else package
                    base = ".".join([*package, base] if base else package)
                walker._import(base, path)
                if isinstance(imp.names, cst.ImportStar):
                    walker._bind_star(path, base)
                else:
                    for alias in imp.names:
                        name = _code(alias.name)
                        walker._import(f"{base}.{name}" if base else name, path)
                        local = _code(alias.asname.name) if alias.asname is not None else name
                        walker._bind_name(path, local, base, name)

        collect = _Collect()
        node.visit(collect)
        if collect.fetched & collect.called:
            self.dynamic = True

    def _bind_name(self, path: str, local: str, base: str, name: str) -> None:
        """``from base import name as local`` in ``path``: a def (or a submodule, then a module object)."""
        self.bindings.setdefault(path, {}).setdefault(local, set()).add((base, name))
        self.aliases.setdefault(name, set()).add((path, local))
        self._bind_modules(path, [f"{base}.{name}" if base else name])
        self._origins_memo.clear()

    def _bind_star(self, path: str, base: str) -> None:
        self.stars.setdefault(path, set()).add(base)
        self._origins_memo.clear()

    def _bind_modules(self, path: str, dotted: list[str]) -> None:
        found = {f for f in (self._find(d) for d in dotted) if f is not None}
        if found - self.module_objects.get(path, set()):
            self.module_objects.setdefault(path, set()).update(found)
            self._origins_memo.clear()

    def _import(self, dotted: str, importer: str) -> None:
        parts = dotted.split(".")
        for base in self.bases:
            for i in range(1, len(parts) + 1):  # `import a.b.c` runs a, a.b and a.b.c
                target = self.modules.get(base + ".".join(parts[:i]))
                if target is not None:
                    self._reach_module(target)

    # -- deciding conditions ------------------------------------------------------------------------
    def _module_env(self, path: str, tree: cst.Module) -> dict[str, Any]:
        """Module globals assigned exactly once from a literal, then the command's configurator overrides."""
        counts: dict[str, int] = {}
        values: dict[str, Any] = {}
        configurator = False
        for statement in tree.body:
            for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        for name in _names(target.target):
                            counts[name] = counts.get(name, 0) + 1
                            values[name] = _literal(small.value) if isinstance(target.target, cst.Name) else _UNKNOWN
                elif isinstance(small, cst.AnnAssign | cst.AugAssign):
                    for name in _names(small.target):
                        counts[name] = counts.get(name, 0) + 2
                elif isinstance(small, cst.Expr) and "exec(" in _code(small):
                    configurator = True
            if isinstance(statement, cst.If | cst.For | cst.While | cst.With | cst.Try):
                for name in _assigned_anywhere(statement):
                    counts[name] = counts.get(name, 0) + 2
        env = {k: v for k, v in values.items() if counts.get(k) == 1}
        env["TYPE_CHECKING"] = False
        # a module reached by import runs under its dotted name: its `if __name__ == "__main__":` self-test
        # (pytorch-cifar's models/dla.py: `test()`) never runs on the job's path
        dotted = next((name for name, p in self.modules.items() if p == path), None)
        env["__name__"] = "__main__" if path == self.entry else dotted if dotted else _UNKNOWN
        if path == self.entry and configurator:
            env.update(self._configurator_overrides(set(env)))
        for knob in self.knobs:
            env[knob] = _UNKNOWN
        return env

    def _configurator_overrides(self, names: set[str]) -> dict[str, Any]:
        """nanoGPT's convention: ``config/x.py`` arguments exec'd in order, then ``--key=value`` overrides."""
        out: dict[str, Any] = {}
        for arg in self.argv:
            config = self.root / self.workdir / arg
            if "=" not in arg and arg.endswith(".py") and config.is_file():
                try:
                    module = cst.parse_module(read_source(config))
                except (cst.ParserSyntaxError, OSError, UnicodeError):
                    return {name: _UNKNOWN for name in names}
                for statement in module.body:
                    for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                        if isinstance(small, cst.Assign):
                            for target in small.targets:
                                for name in _names(target.target):
                                    out[name] = _literal(small.value)
            elif arg.startswith("--") and "=" in arg:
                key, _, raw = arg[2:].partition("=")
                try:
                    out[key] = ast.literal_eval(raw)
                except (ValueError, SyntaxError):
                    out[key] = raw
        return out

    def evaluate(self, node: cst.BaseExpression, path: str, self_env: dict[str, Any]) -> Any:
        """True/False when decided, else an undecided marker (anything but a bool)."""
        value = self._value(node, path, self_env)
        return value if isinstance(value, bool) else _UNKNOWN

    def _value(self, node: cst.BaseExpression, path: str, self_env: dict[str, Any]) -> Any:
        env = self.env.get(path, {})
        if isinstance(node, cst.Name):
            if node.value in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.value]
            return env.get(node.value, _UNKNOWN)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
            return self_env.get(node.attr.value, _UNKNOWN)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = self._value(node.expression, path, self_env)
            return _UNKNOWN if inner is _UNKNOWN else not inner
        if isinstance(node, cst.BooleanOperation):
            left = self._value(node.left, path, self_env)
            right = self._value(node.right, path, self_env)
            if isinstance(node.operator, cst.And):
                if left is False or right is False:
                    return False
                return _UNKNOWN if _UNKNOWN in (left, right) else bool(left and right)
            if left is True or right is True:
                return True
            return _UNKNOWN if _UNKNOWN in (left, right) else bool(left or right)
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            left = self._value(node.left, path, self_env)
            right = self._value(node.comparisons[0].comparator, path, self_env)
            if left is _UNKNOWN or right is _UNKNOWN:
                return _UNKNOWN
            op = node.comparisons[0].operator
            try:
                if isinstance(op, cst.Equal):
                    return left == right
                if isinstance(op, cst.NotEqual):
                    return left != right
                if isinstance(op, cst.Is):
                    return left is right
                if isinstance(op, cst.IsNot):
                    return left is not right
                if isinstance(op, cst.In):
                    return left in right
                if isinstance(op, cst.NotIn):
                    return left not in right
            except TypeError:
                return _UNKNOWN
            return _UNKNOWN
        if isinstance(node, cst.Call):
            return self._call_value(node, path, self_env)
        literal = _literal(node)
        return literal

    def _call_value(self, node: cst.Call, path: str, self_env: dict[str, Any]) -> Any:
        func = node.func
        if isinstance(func, cst.Name) and func.value == "hasattr" and len(node.args) == 2:
            target, attr = _code(node.args[0].value), _literal(node.args[1].value)
            if isinstance(attr, str) and (target == "torch" or target.startswith("torch.")):
                return self.torch.hasattr(re.sub(r"\s+", "", target), attr)
            return _UNKNOWN
        if isinstance(func, cst.Attribute) and func.attr.value in ("startswith", "endswith") and len(node.args) == 1:
            receiver = self._value(func.value, path, self_env)
            arg = _literal(node.args[0].value)
            if isinstance(receiver, str) and isinstance(arg, str | tuple):
                return getattr(receiver, func.attr.value)(arg)
        return _UNKNOWN

    # -- the answer ---------------------------------------------------------------------------------
    def _result(self) -> Reach:
        dead: dict[str, set[int]] = {}
        why: dict[tuple[str, int], str] = {}
        for path in self.reached_modules:
            tree = self.trees[path]
            positions = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
            lines = dead.setdefault(path, set())

            def mark(node: cst.CSTNode, reason: str) -> None:
                pos = positions.get(node)
                if pos is None:
                    return
                for line in range(pos.start.line, pos.end.line + 1):
                    lines.add(line)
                    why.setdefault((path, line), reason)

            for node, owner in _defs(tree):
                if id(node) in self.reached_defs:
                    continue
                if owner is not None and id(owner) not in self.reached_defs:
                    continue  # marked with its class
                kind = "class" if isinstance(node, cst.ClassDef) else "function"
                where = f"{owner.name.value}.{node.name.value}" if owner is not None else node.name.value
                mark(node, f"{kind} `{where}` is never used on the path from the entry point")
            for branch, reason in self.dead_branches.get(path, []):
                mark(branch, reason)
        symbols = set()
        for path in self.reached_modules:
            for node, owner in _defs(self.trees[path]):
                if id(node) in self.reached_defs:
                    symbols.add(f"{path}::{owner.name.value + '.' if owner is not None else ''}{node.name.value}")
        return Reach(dead={p: frozenset(v) for p, v in dead.items() if v}, why=why,
                     modules=None if self.dynamic_import else frozenset(self.reached_modules),
                     symbols=frozenset(symbols))


def _dynamic_getattr(node: cst.BaseExpression) -> bool:
    """``getattr(x, name)`` with a name that is not a literal (``hasattr``/``setattr`` call nothing)."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "getattr"
            and (len(node.args) < 2 or not isinstance(node.args[1].value, cst.SimpleString)))


def _own_names(tree: cst.Module) -> set[str]:
    """Top-level def and class names that the module's own bare names certainly refer to: defined after
    any star import (a later `from m import *` could rebind them) and never imported by name as well."""
    last_star, imported, defined = -1, set(), {}
    for i, statement in enumerate(tree.body):
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            defined[statement.name.value] = i
            continue
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                last_star = i
            elif isinstance(small, cst.ImportFrom | cst.Import) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    bound = alias.asname.name if alias.asname is not None else alias.name
                    imported.add(_code(bound).split(".")[0])
    return {name for name, i in defined.items() if i > last_star and name not in imported}


def _defs(tree: cst.Module) -> list[tuple[cst.FunctionDef | cst.ClassDef, cst.ClassDef | None]]:
    """Top-level defs and classes, and the methods of top-level classes, with their owning class."""
    out: list[tuple[cst.FunctionDef | cst.ClassDef, cst.ClassDef | None]] = []
    for statement in tree.body:
        if isinstance(statement, cst.FunctionDef):
            out.append((statement, None))
        elif isinstance(statement, cst.ClassDef):
            out.append((statement, None))
            for member in statement.body.body:
                if isinstance(member, cst.FunctionDef):
                    out.append((member, statement))
    return out


def _self_attributes(cls: cst.ClassDef | None, walker: _Walker, path: str) -> dict[str, Any]:
    """``self.x`` assigned exactly once in the class, from an expression the walker can decide."""
    if cls is None:
        return {}
    seen: dict[str, list[cst.BaseExpression | None]] = {}

    class _Assigns(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                t = target.target
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                    seen.setdefault(t.attr.value, []).append(node.value)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            t = node.target
            if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                seen.setdefault(t.attr.value, []).append(None)

    cls.visit(_Assigns())
    out: dict[str, Any] = {}
    for name, values in seen.items():
        if len(values) == 1 and values[0] is not None:
            value = walker._value(values[0], path, {})
            if isinstance(value, bool | int | float | str) or value is None:
                out[name] = value
    return out


def _literal(node: cst.BaseExpression) -> Any:
    try:
        return ast.literal_eval(_code(node))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _UNKNOWN


def _names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Tuple | cst.List):
        return [n for el in target.elements for n in _names(el.value)]
    return []


def _assigned_anywhere(node: cst.CSTNode) -> set[str]:
    names: set[str] = set()

    class _Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, t: cst.AssignTarget) -> None:
            names.update(_names(t.target))

        def visit_AugAssign(self, t: cst.AugAssign) -> None:
            names.update(_names(t.target))

        def visit_For(self, t: cst.For) -> None:
            names.update(_names(t.target))

    node.visit(_Targets())
    return names


def _is_property(fn: cst.FunctionDef) -> bool:
    return any(_code(d.decorator).split(".")[-1] in ("property", "setter", "cached_property") for d in fn.decorators)


def _config_texts(root: Path) -> list[str]:
    """The repo's config files: Hydra's ``_target_: model.GPT`` names a class (and its module) by string.

    InfraRSI's own contract is not one: its editable scope names every symbol (`models/dla.py::test`), which
    would keep every one of them alive."""
    texts = []
    for path in root.rglob("*"):
        if path.suffix in _CONFIG_SUFFIXES and path.is_file() and path.name != "infrarsi.toml" and not any(
                part in _SKIP_DIRS for part in path.relative_to(root).parts):
            try:
                if path.stat().st_size < 1_000_000:
                    text = path.read_text(encoding="utf-8", errors="replace")
                    texts.append(_CONTRACT_TABLES.sub("", text) if path.name == "pyproject.toml" else text)
            except OSError:
                continue
    return texts


_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")


_FILE_SUFFIXES = frozenset({"pt", "pth", "bin", "txt", "json", "yaml", "yml", "py", "csv", "npy", "npz", "ckpt",
                            "safetensors", "log", "png", "jpg", "gz", "zip", "tar", "model", "pkl", "md", "toml"})


def _dotted_names(texts: Iterable[str]) -> set[str]:
    """Dotted names in text (``models.gpt.GPT``, ``scripts.base_eval``): candidate module paths; a file name
    (``model.pt``) is not one."""
    return {m.group(0) for text in texts for m in _DOTTED.finditer(text)
            if m.group(0).rsplit(".", 1)[1].lower() not in _FILE_SUFFIXES}


#: `[tool.infrarsi]` and its sub-tables in a pyproject.toml, up to the next other table.
_CONTRACT_TABLES = re.compile(r"^\[+tool\.infrarsi\b.*?(?=^\[(?!\[?tool\.infrarsi\b))|^\[+tool\.infrarsi\b.*\Z",
                              re.M | re.S)


def _dotted_strings(text: str) -> list[str]:
    """``"pkg.mod.Name"`` spelled out in a string: what an ``instantiate``/``import_string`` call resolves."""
    return re.findall(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b", text)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def command_argv(command: Iterable[str], args: Iterable[str] = ()) -> list[str]:
    """The workload's argv as one list (a single-string command is split as a shell would)."""
    parts = list(command)
    if len(parts) == 1 and " " in parts[0]:
        parts = split_command(parts[0])
    return [*parts, *args]
