"""One patch applied all-or-nothing without raising, and the canonical order a set applies in. Sets of patches:
tests/codemods/test_patch_set.py."""

from __future__ import annotations

import os
from pathlib import Path

from bot.patching.one_patch import apply_patch, canonical_order
from bot.patching.results import Applied, Failed, NotApplicable
from infrarsi.patches import Effect, PatchSpec

EFFECT = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")
SOURCE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x\n"


def _replace(pid: str, target: str, code: str, **kw: object) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=(target,), kind="replacement", replacement=code,
                     effect=EFFECT, **kw)  # type: ignore[arg-type]


def test_requirements_come_first_ties_by_id_and_cycles_apart() -> None:
    specs = [_replace(i, "m.py::f", "def f(): pass\n", requires=r) for i, r in (
        ("c", ()), ("a", ("c",)), ("b", ()), ("x", ("y",)), ("y", ("x",)), ("d", ("a", "zz")))]
    ordered, cyclic = canonical_order(specs)
    assert [s.id for s in ordered] == ["b", "c", "a", "d"] and [s.id for s in cyclic] == ["x", "y"]
    assert canonical_order([]) == ([], [])


def test_a_replacement_is_written_keeping_the_files_mode(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    os.chmod(tmp_path / "m.py", 0o640)
    result = apply_patch(tmp_path, _replace("p", "m.py::f", "def f(x):\n    return x + 2\n"))
    assert result == Applied(patch_id="p", changed_files=("m.py",), symbols=("m.py::f",))
    assert "return x + 2" in (tmp_path / "m.py").read_text() and "def g" in (tmp_path / "m.py").read_text()
    assert os.stat(tmp_path / "m.py").st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]  # no temporary file left


def test_requirements_and_conflicts_are_checked_against_what_is_applied(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    needs = _replace("p", "m.py::f", "def f(x):\n    return 0\n", requires=("q", "r"))
    assert apply_patch(tmp_path, needs, applied={"q"}) == NotApplicable(
        patch_id="p", reason="requires r, which is not applied")
    clash = _replace("p", "m.py::f", "def f(x):\n    return 0\n", conflicts_with=("q",))
    result = apply_patch(tmp_path, clash, applied={"q"})
    assert isinstance(result, NotApplicable) and result.reason == "conflicts with q, which is applied"
    assert (tmp_path / "m.py").read_text() == SOURCE


def test_targets_outside_the_tree_missing_or_not_utf8_leave_it_untouched(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    for target in ("../m.py::f", "/etc/passwd::f", "a\\b.py::f"):
        result = apply_patch(tmp_path, _replace("p", target, "def f(): pass\n"))
        assert isinstance(result, Failed) and "is not a relative path inside the repository" in result.error
    (tmp_path / "out").symlink_to(tmp_path.parent)
    assert isinstance(apply_patch(tmp_path, _replace("p", "out/x.py::f", "def f(): pass\n")), Failed)
    assert apply_patch(tmp_path, _replace("p", "nope.py::f", "def f(): pass\n")) == NotApplicable(
        patch_id="p", reason="target file nope.py does not exist")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    result = apply_patch(tmp_path, _replace("p", "latin.py::f", "def f(): pass\n"))
    assert isinstance(result, Failed) and result.error.startswith("latin.py cannot be decoded as its coding line (or "
                                                                  "UTF-8) says")
    assert (tmp_path / "m.py").read_text() == SOURCE


def test_an_unknown_codemod_is_a_value_not_an_exception(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    spec = PatchSpec(id="c", title="c", rationale="t", targets=("m.py::f",), kind="codemod", codemod="no_such",
                     effect=EFFECT)
    result = apply_patch(tmp_path, spec)
    assert isinstance(result, (Failed, NotApplicable)) and (tmp_path / "m.py").read_text() == SOURCE


def test_a_file_in_latin_1_is_patched_and_written_back_in_latin_1(tmp_path: Path) -> None:
    """PEP 263: the coding line names the encoding both ways (issue 45)."""
    source = "# -*- coding: latin-1 -*-\n# modèle\n" + SOURCE
    (tmp_path / "m.py").write_bytes(source.encode("latin-1"))
    result = apply_patch(tmp_path, _replace("p", "m.py::f", "def f(x):\n    return 'é'\n"))
    assert isinstance(result, Applied), result
    assert (tmp_path / "m.py").read_bytes().decode("latin-1") == source.replace("return x + 1", "return 'é'")
