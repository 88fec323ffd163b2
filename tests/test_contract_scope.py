"""The contract's scope against the tree: symbols found with ast, locked patterns expanded, each mistake named."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.contract.errors import ContractError
from infrarsi.contract.model import Scope
from infrarsi.contract.scope import check_scope, defined_symbols, expand_locked, is_locked, split_symbol

MODEL = "class GPT:\n    def forward(self, x):\n        def inner():\n            pass\n\nasync def main():\n    pass\n"


def test_split_symbol_and_defined_symbols() -> None:
    assert split_symbol("model.py::GPT.forward") == ("model.py", "GPT.forward")
    assert split_symbol("model.py") == ("model.py", None)
    assert defined_symbols(MODEL) == {"GPT", "GPT.forward", "GPT.forward.inner", "main"}


def test_locked_patterns(tmp_path: Path) -> None:
    for rel in ("data/a.py", "data/b.txt", ".infrarsi/x.py", "h.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert is_locked("data/a.py", ("h.py", "data/*")) == "data/*" and is_locked("m.py", ("data/*",)) is None
    assert expand_locked(tmp_path, ("data/*", "*.py", "none/*")) == {
        "data/*": ["data/a.py", "data/b.txt"], "*.py": ["h.py"], "none/*": []}
    assert expand_locked(tmp_path, (".infrarsi/*",)) == {".infrarsi/*": []}  # the bot's own state never counts


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "harness.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "broken.py").write_text("def (:\n")
    return tmp_path


def test_a_right_scope_passes(tree: Path) -> None:
    check_scope(Scope(editable=("model.py::GPT.forward", "model.py"), locked=("harness.py",)), root=tree,
                file="c.toml", prefix="")


@pytest.mark.parametrize(("scope", "message"), [
    (Scope(locked=("nothing*.py",)), "c.toml: tool.infrarsi.scope.locked: expected paths of files in the repo, got "
                                     "'nothing*.py' (matches no file)"),
    (Scope(locked=("../x",)), "c.toml: tool.infrarsi.scope.locked: expected a path inside the repo, got '../x'"),
    (Scope(editable=("/abs.py",)), "c.toml: tool.infrarsi.scope.editable: expected a path inside the repo, "
                                   "got '/abs.py'"),
    (Scope(editable=("gone.py",)), "c.toml: tool.infrarsi.scope.editable: expected an existing file, got 'gone.py' "
                                   "(gone.py does not exist)"),
    (Scope(editable=("harness.py",), locked=("*.py",)),
     "c.toml: tool.infrarsi.scope.editable: expected symbols outside locked files, got 'harness.py' "
     "(inside locked '*.py')"),
    (Scope(editable=("notes.txt::f",)), "c.toml: tool.infrarsi.scope.editable: expected a Python file for a "
                                        "qualified symbol, got 'notes.txt::f'"),
    (Scope(editable=("model.py::GPT.backward",)), "c.toml: tool.infrarsi.scope.editable: expected a function or "
                                                  "class defined in model.py, got 'model.py::GPT.backward' "
                                                  "(no such definition)"),
    (Scope(editable=("broken.py::f",)), "c.toml: tool.infrarsi.scope.editable: cannot parse broken.py to find 'f'"),
])
def test_a_wrong_scope_names_the_key_and_the_entry(tree: Path, scope: Scope, message: str) -> None:
    with pytest.raises(ContractError) as info:
        check_scope(scope, root=tree, file="c.toml", prefix="tool.infrarsi")
    assert str(info.value).startswith(message)
