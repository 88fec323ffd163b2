"""The scope audit: every way a tree can leave the editable scope is caught and named,
and what is allowed is recorded with the right symbol, line counts and git blob ids."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from bot.patching.one_patch import apply_patch
from bot.patching.audit import NULL_BLOB, AuditedChange, audit_tree, blob_id
from bot.patching.codemods import run_codemod
from bot.patching.results import Failed, NotApplicable, Rewritten
from infrarsi.patches import Effect, PatchSpec

MODEL = textwrap.dedent('''\
    import math
    import torch

    SCALE = 2


    def helper(x):
        return x * SCALE


    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        @torch.no_grad()
        def forward(self, x):
            y = x * self.w
            return y.sum()

        def loss(self, x):
            return -self.forward(x)


    class Head:
        def project(self, x):
            return x
''')
TREE = {"model.py": MODEL, "train.py": "import model\nmodel.GPT()\n", "data/loader.py": "X = 1\n",
        "config.yaml": "lr: 1\n"}
EDITABLE = ["model.py::GPT.forward", "model.py::helper", "train.py"]
LOCKED = ["data/*.py", "config.yaml"]


def audit(after: dict[str, str | bytes], *, editable: list[str] = EDITABLE, allow_imports: bool = False):
    return audit_tree(TREE, after, editable=editable, locked=LOCKED, allow_imports=allow_imports)


def edit(path: str, old: str, new: str) -> dict[str, str | bytes]:
    text = TREE[path]
    assert old in text
    return {**TREE, path: text.replace(old, new)}


def test_blob_id_is_gits() -> None:
    assert blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `echo hello | git hash-object --stdin`
    assert blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_unchanged_tree_is_ok_and_empty() -> None:
    result = audit(dict(TREE))
    assert result.ok and result.changes == () and result.violations == ()


def test_allowed_edit_is_recorded_with_symbol_lines_and_blobs() -> None:
    after = edit("model.py", "        y = x * self.w\n        return y.sum()\n",
                 "        return (x * self.w).sum()\n")
    result = audit(after)
    assert result.ok, result.violations
    new_bytes = after["model.py"].encode()  # type: ignore[union-attr]
    expected_after = hashlib.sha1(b"blob %d\0" % len(new_bytes) + new_bytes).hexdigest()
    assert result.changes == (AuditedChange(
        path="model.py", symbol="GPT.forward", lines_added=1, lines_removed=2,
        blob_before=blob_id(MODEL.encode()), blob_after=expected_after,
        line_start=16, line_end=18,  # from the decorator to the end of the method, in the after file
    ),)


def test_bytes_and_text_give_the_same_record() -> None:
    after = edit("model.py", "return x * SCALE", "return x * SCALE * 1")
    as_bytes = {k: (v.encode() if isinstance(v, str) else v) for k, v in after.items()}
    assert audit(after) == audit(as_bytes)


def test_locked_file_edit_is_rejected() -> None:
    result = audit(edit("data/loader.py", "X = 1", "X = 2"))
    assert [(v.path, v.symbol) for v in result.violations] == [("data/loader.py", "<file>")]
    assert "locked" in result.violations[0].reason and "data/*.py" in result.violations[0].reason
    assert not result.ok


def test_locked_non_python_file_edit_is_rejected() -> None:
    result = audit(edit("config.yaml", "lr: 1", "lr: 2"))
    assert [(v.path, v.symbol) for v in result.violations] == [("config.yaml", "<file>")]


def test_symbol_outside_editable_is_rejected_and_named() -> None:
    result = audit(edit("model.py", "return -self.forward(x)", "return self.forward(x)"))
    assert [(v.path, v.symbol) for v in result.violations] == [("model.py", "GPT.loss")]
    assert "outside the editable scope" in result.violations[0].reason
    assert [c.symbol for c in result.changes] == ["GPT.loss"]


def test_a_class_entry_covers_its_methods() -> None:
    after = edit("model.py", "return -self.forward(x)", "return self.forward(x)")
    assert audit(after, editable=["model.py::GPT"]).ok


def test_class_body_outside_editable_method_is_rejected() -> None:
    result = audit(edit("model.py", "class GPT(torch.nn.Module):\n", "class GPT(torch.nn.Module):\n    size = 3\n"))
    assert [(v.path, v.symbol) for v in result.violations] == [("model.py", "GPT")]


def test_module_level_statement_is_rejected() -> None:
    result = audit(edit("model.py", "SCALE = 2", "SCALE = 3"))
    assert [(v.path, v.symbol) for v in result.violations] == [("model.py", "<module>")]
    change = result.changes[0]
    assert (change.symbol, change.lines_added, change.lines_removed, change.line_start, change.line_end) == (
        "<module>", 1, 1, 4, 4)


def test_module_level_import_needs_allow_imports() -> None:
    after = edit("model.py", "import torch\n", "import torch\nimport torch.nn.functional as F\n")
    refused = audit(after)
    assert [(v.path, v.symbol) for v in refused.violations] == [("model.py", "<module>")]
    assert "adds `import torch.nn.functional as F`" in refused.violations[0].reason
    assert audit(after, allow_imports=True).ok


def test_import_inside_an_editable_function_still_needs_allow_imports() -> None:
    after = edit("model.py", "    def forward(self, x):\n", "    def forward(self, x):\n        import numpy\n")
    refused = audit(after)
    assert [(v.symbol, v.reason) for v in refused.violations] == [
        ("GPT.forward", "adds `import numpy` (the contract does not allow new imports)")]
    assert audit(after, allow_imports=True).ok


def test_merged_from_import_counts_only_the_new_name() -> None:
    tree = {"m.py": "from torch import nn\n\ndef f():\n    return nn\n"}
    after = {"m.py": "from torch import nn, optim\n\ndef f():\n    return optim\n"}
    result = audit_tree(tree, after, editable=["m.py::f"], locked=[], allow_imports=False)
    assert [v.reason for v in result.violations] == ["adds `from torch import optim` (the contract does not allow new imports)"]
    assert audit_tree(tree, after, editable=["m.py::f"], locked=[], allow_imports=True).ok


def test_removed_import_is_rejected() -> None:
    result = audit(edit("model.py", "import math\n", ""))
    assert [(v.symbol, v.reason) for v in result.violations] == [("<module>", "removes module-level `import math`")]


def test_whole_file_entry_allows_module_level_but_not_imports() -> None:
    assert audit(edit("train.py", "model.GPT()", "model.GPT().train()")).ok
    refused = audit(edit("train.py", "import model\n", "import model\nimport os\n"))
    assert [(v.path, v.symbol) for v in refused.violations] == [("train.py", "<module>")]


def test_new_file_is_rejected() -> None:
    result = audit({**TREE, "extra.py": "x = 1\n"})
    assert [(v.path, v.symbol) for v in result.violations] == [("extra.py", "<file>")]
    assert "new file" in result.violations[0].reason
    assert result.changes[0].blob_before == NULL_BLOB and result.changes[0].lines_added == 1


def test_deleted_file_is_rejected() -> None:
    after = {k: v for k, v in TREE.items() if k != "train.py"}
    result = audit(after)
    assert [(v.path, v.symbol) for v in result.violations] == [("train.py", "<file>")]
    assert "deleted" in result.violations[0].reason
    assert result.changes[0].blob_after == NULL_BLOB and result.changes[0].line_start is None


def test_new_top_level_definition_is_rejected() -> None:
    result = audit({**TREE, "model.py": MODEL + "\n\ndef extra():\n    pass\n"})
    symbols = sorted((v.path, v.symbol) for v in result.violations)
    assert symbols == [("model.py", "<module>"), ("model.py", "extra")]


def test_removing_an_editable_definition_is_rejected_at_its_parent() -> None:
    result = audit(edit("model.py", "def helper(x):\n    return x * SCALE\n\n\n", ""))
    assert [(v.symbol, v.reason.split("; ")[-1]) for v in result.violations] == [("<module>", "removes `helper`")]


def test_non_python_file_outside_scope_is_rejected() -> None:
    tree = {"README.md": "hi\n"}
    result = audit_tree(tree, {"README.md": "hello\n"}, editable=[], locked=[], allow_imports=True)
    assert [(v.path, v.symbol) for v in result.violations] == [("README.md", "<file>")]


def test_after_that_does_not_parse_is_rejected() -> None:
    result = audit(edit("model.py", "return y.sum()", "return y.sum("))
    assert [(v.path, v.symbol) for v in result.violations] == [("model.py", "<module>")]
    assert "cannot be parsed after the change" in result.violations[0].reason


def _spec(target: str, **kind: str) -> PatchSpec:
    return PatchSpec(id="p", title="t", rationale="r", targets=(target,),
                     effect=Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test"),
                     kind="replacement" if "replacement" in kind else "codemod", **kind)  # type: ignore[arg-type]


def _read(root: Path) -> dict[str, str | bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _write(root: Path, tree: dict[str, str | bytes]) -> None:
    for path, content in tree.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content) if isinstance(content, str) else (root / path).write_bytes(content)


def test_replacement_that_does_not_parse_or_targets_a_missing_symbol_changes_nothing(tmp_path: Path) -> None:
    _write(tmp_path, TREE)
    broken = apply_patch(tmp_path, _spec("model.py::helper", replacement="def helper(x:\n    return x\n"))
    assert isinstance(broken, Failed) and "replacement does not parse" in broken.error
    missing = apply_patch(tmp_path, _spec("model.py::GPT.nope", replacement="def nope(self):\n    pass\n"))
    assert isinstance(missing, NotApplicable) and "GPT.nope" in missing.reason
    result = audit_tree(TREE, _read(tmp_path), editable=EDITABLE, locked=LOCKED, allow_imports=False)
    assert result.ok and result.changes == ()


def test_applied_replacement_passes_the_audit(tmp_path: Path) -> None:
    _write(tmp_path, TREE)
    apply_patch(tmp_path, _spec("model.py::GPT.forward", replacement="def forward(self, x):\n    return (x * self.w).sum()\n"))
    result = audit_tree(TREE, _read(tmp_path), editable=EDITABLE, locked=LOCKED, allow_imports=False)
    assert result.ok
    assert [c.symbol for c in result.changes] == ["GPT.forward"]


def test_codemod_that_adds_an_import_is_caught_unless_allowed() -> None:
    source = "from torch import nn\n\n\nclass T:\n    def step(self, b):\n        out = self.model(b)\n        return out\n"
    result = run_codemod("autocast_bf16", source)
    assert isinstance(result, Rewritten) and result.added_imports == ("import torch",)
    audited = audit_tree({"t.py": source}, {"t.py": result.code}, editable=["t.py::T.step"], locked=[],
                         allow_imports=False)
    assert [(v.symbol, v.reason) for v in audited.violations] == [
        ("<module>", "adds `import torch` (the contract does not allow new imports)")]


SHAPES = textwrap.dedent('''\
    import torch
    RATE = 1
    class A:
        size = 2
        @staticmethod
        def f(x):
            y = x + 1
            return y
        def g(self):
            return self.size
    def h():
        return RATE
''')
_EDITABLE_LINES = range(5, 9)  # A.f, decorator included


@pytest.mark.parametrize("line", range(1, SHAPES.count("\n") + 1))
def test_any_edit_is_allowed_exactly_inside_the_editable_lines(line: int) -> None:
    # Exhaustive over the lines: a comment appended anywhere is a change to exactly one unit.
    lines = SHAPES.splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + "  # edited\n"
    result = audit_tree({"s.py": SHAPES}, {"s.py": "".join(lines)}, editable=["s.py::A.f"], locked=[],
                        allow_imports=False)
    assert result.ok == (line in _EDITABLE_LINES), (line, result.violations)
    assert len(result.changes) == 1


def test_comment_above_a_definition_belongs_to_it() -> None:
    editable_comment = edit("model.py", "    @torch.no_grad()\n", "    # faster now\n    @torch.no_grad()\n")
    assert audit(editable_comment).ok
    locked_comment = audit(edit("model.py", "    def loss(self, x):\n", "    # hmm\n    def loss(self, x):\n"))
    assert [(v.path, v.symbol) for v in locked_comment.violations] == [("model.py", "GPT.loss")]


def test_blank_lines_between_definitions_are_recorded_but_allowed() -> None:
    result = audit(edit("model.py", "\n\nclass Head:", "\n\n\nclass Head:"))
    assert result.ok
    assert [(c.symbol, c.lines_added, c.lines_removed) for c in result.changes] == [("<module>", 1, 0)]
