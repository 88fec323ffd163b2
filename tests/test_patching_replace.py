"""Replacing one definition: exact output, every other byte preserved, clear refusals."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.patching.one_patch import apply_patch
from bot.patching.replace import replace_definition
from bot.patching.results import Applied, Broken, Declined, Failed, NotApplicable, Rewritten
from infrarsi.patches import Effect, PatchSpec

SOURCE = '''\
"""A module with odd formatting that must survive untouched."""
import math   # trailing comment
import torch


def helper(x):  # keep me
    return x*2


class Outer:
    """Outer docstring."""

    class Inner:
        def method(self, x):
            # old body
            return x + 1

    @staticmethod
    def method(x):
        return x   # outer method


# a comment between definitions
def tail(  a,
           b ):
    return a+b
'''


def _between(text: str, start: str, end: str) -> tuple[str, str]:
    i, j = text.index(start), text.index(end)
    return text[:i], text[j:]


def test_replaces_nested_method_with_unindented_source() -> None:
    new = "def method(self, x):\n    return torch.relu(x) + 1\n"
    result = replace_definition(SOURCE, "Outer.Inner.method", new)
    assert isinstance(result, Rewritten)
    assert result.symbols == ("Outer.Inner.method",)
    expected = SOURCE.replace(
        "        def method(self, x):\n            # old body\n            return x + 1\n",
        "        def method(self, x):\n            return torch.relu(x) + 1\n",
    )
    assert result.code == expected


def test_every_other_byte_is_identical() -> None:
    result = replace_definition(SOURCE, "helper", "def helper(x):\n    return x * 3\n")
    assert isinstance(result, Rewritten)
    before_prefix, before_suffix = _between(SOURCE, "def helper", "\n\nclass Outer")
    after_prefix, after_suffix = _between(result.code, "def helper", "\n\nclass Outer")
    assert (after_prefix, after_suffix) == (before_prefix, before_suffix)
    assert "def helper(x):\n    return x * 3\n" in result.code


def test_replacement_given_indented_or_with_other_indent_takes_the_files_indent() -> None:
    indented = "    def method(x):\n      # two-space body\n      return -x\n"
    result = replace_definition(SOURCE, "Outer.method", indented)
    assert isinstance(result, Rewritten)
    assert "    def method(x):\n        # two-space body\n        return -x\n" in result.code
    assert "@staticmethod" not in result.code  # the decorators are part of what is replaced
    assert result.code.startswith(SOURCE[: SOURCE.index("    @staticmethod")])
    assert result.code.endswith(SOURCE[SOURCE.index("\n\n# a comment between definitions"):])


def test_comments_above_the_replacement_are_kept() -> None:
    result = replace_definition(SOURCE, "tail", "# faster\ndef tail(a, b):\n    return a + b\n")
    assert isinstance(result, Rewritten)
    assert result.code.endswith("# a comment between definitions\n# faster\ndef tail(a, b):\n    return a + b\n")


def test_crlf_and_tabs_survive() -> None:
    source = "import os\r\n\r\nclass A:\r\n\tdef f(self):\r\n\t\treturn 1\r\n\r\n\tdef g(self):\r\n\t\treturn 2\r\n"
    result = replace_definition(source, "A.f", "def f(self):\n    return 10\n")
    assert isinstance(result, Rewritten)
    assert result.code == source.replace("\t\treturn 1", "\t\treturn 10")


def test_missing_symbol_is_declined_with_the_name() -> None:
    result = replace_definition(SOURCE, "Outer.nope", "def nope():\n    pass\n")
    assert isinstance(result, Declined)
    assert "Outer.nope" in result.reason


def test_unparsable_replacement_is_broken_with_the_parser_error() -> None:
    result = replace_definition(SOURCE, "helper", "def helper(x:\n    return x\n")
    assert isinstance(result, Broken)
    assert result.error.startswith("replacement does not parse: Syntax Error")


def test_replacement_must_be_exactly_one_definition() -> None:
    two = "def helper(x):\n    return x\n\ndef other():\n    pass\n"
    assert isinstance(replace_definition(SOURCE, "helper", two), Broken)
    statement = replace_definition(SOURCE, "helper", "helper = lambda x: x\n")
    assert isinstance(statement, Broken)
    assert "exactly one function or class" in statement.error


def test_replacement_must_keep_the_name_and_kind() -> None:
    renamed = replace_definition(SOURCE, "helper", "def helper2(x):\n    return x\n")
    assert isinstance(renamed, Broken) and "keep the name" in renamed.error
    kind = replace_definition(SOURCE, "helper", "class helper:\n    pass\n")
    assert isinstance(kind, Broken) and "is a function but the replacement is a class" in kind.error


def test_ambiguous_symbol_is_declined() -> None:
    source = "def f():\n    return 1\n\ndef f():\n    return 2\n"
    result = replace_definition(source, "f", "def f():\n    return 3\n")
    assert isinstance(result, Declined) and "2 times" in result.reason


def _replacement_spec(target: str, replacement: str) -> PatchSpec:
    return PatchSpec(id="r1", title="t", rationale="r", targets=(target,), kind="replacement",
                     replacement=replacement,
                     effect=Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.05, source="test"))


def test_apply_patch_writes_only_the_target_file(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(SOURCE)
    (tmp_path / "other.py").write_text("x = 1\n")
    result = apply_patch(tmp_path, _replacement_spec("model.py::helper", "def helper(x):\n    return x\n"))
    assert result == Applied(patch_id="r1", changed_files=("model.py",), symbols=("model.py::helper",))
    assert (tmp_path / "other.py").read_text() == "x = 1\n"
    assert "def helper(x):\n    return x\n" in (tmp_path / "model.py").read_text()


def test_apply_patch_reports_refusals_as_values(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(SOURCE)
    missing = apply_patch(tmp_path, _replacement_spec("model.py::Nope.f", "def f():\n    pass\n"))
    assert isinstance(missing, NotApplicable) and "Nope.f" in missing.reason
    broken = apply_patch(tmp_path, _replacement_spec("model.py::helper", "def helper(:\n"))
    assert isinstance(broken, Failed) and "does not parse" in broken.error
    no_file = apply_patch(tmp_path, _replacement_spec("absent.py::f", "def f():\n    pass\n"))
    assert isinstance(no_file, NotApplicable) and "does not exist" in no_file.reason
    escape = apply_patch(tmp_path, _replacement_spec("../x.py::f", "def f():\n    pass\n"))
    assert isinstance(escape, Failed) and "inside the repository" in escape.error
    assert (tmp_path / "model.py").read_text() == SOURCE


_comment = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30)


@settings(max_examples=25, deadline=None)
@given(head=_comment, middle=_comment, tail=_comment, blank=st.integers(min_value=0, max_value=3),
       body=st.sampled_from(["return 0", "y = x\n    return y", "pass"]))
def test_property_only_the_definition_changes(head: str, middle: str, tail: str, blank: int, body: str) -> None:
    prefix = f"# {head}\nimport os\n" + "\n" * blank + f"\nclass A:  # {middle}\n    x = 1\n\n"
    target = "    def f(self):\n        return 1\n"
    suffix = "\n" * blank + f"    def g(self):  # {tail}\n        return 2\n"
    result = replace_definition(prefix + target + suffix, "A.f", f"def f(self, x=None):\n    {body}\n")
    assert isinstance(result, Rewritten)
    assert result.code.startswith(prefix)
    assert result.code.endswith(suffix)
    indented_body = body.replace("\n    ", "\n        ")
    assert result.code[len(prefix):len(result.code) - len(suffix)] == \
        f"    def f(self, x=None):\n        {indented_body}\n"


def test_a_target_reached_through_a_symlink_out_of_the_repo_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.py").write_text(SOURCE)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "linked").symlink_to(outside)
    result = apply_patch(repo, _replacement_spec("linked/model.py::helper", "def helper(x):\n    return x\n"))
    assert isinstance(result, Failed) and "inside the repository" in result.error
    assert (outside / "model.py").read_text() == SOURCE
