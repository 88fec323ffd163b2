"""Proposed patches judged once on the base tree: applied alone, audited against the scope, conflicts written
into the accepted ones; rejected ones carry their reason."""

from __future__ import annotations

from pathlib import Path

from bot.patching.screen import dir_reader, screen_one, screen_patches
from infrarsi.contract.model import Scope
from infrarsi.patches import Effect, PatchSpec

EFFECT = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")
SOURCE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x\n\n\ndef h(x):\n    return -x\n"
SCOPE = Scope(editable=("m.py::f", "m.py::g"), locked=("lock.py",))


def _replace(pid: str, target: str, code: str, **kw: object) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=(target,), kind="replacement", replacement=code,
                     effect=EFFECT, **kw)  # type: ignore[arg-type]


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text(SOURCE)
    return tmp_path


def test_a_patch_inside_the_scope_is_claimed_and_one_outside_is_rejected(tmp_path: Path) -> None:
    read = dir_reader(_tree(tmp_path))
    claim = screen_one(read, _replace("f2", "m.py::f", "def f(x):\n    return x + 2\n"), SCOPE)
    assert not isinstance(claim, str) and claim.patch_id == "f2" and claim.symbols == ("m.py::f",)
    outside = screen_one(read, _replace("h2", "m.py::h", "def h(x):\n    return 0\n"), SCOPE)
    assert isinstance(outside, str) and outside.startswith("outside the editable scope: ") and "h" in outside
    missing = screen_one(read, _replace("z", "m.py::zz", "def zz():\n    pass\n"), SCOPE)
    assert isinstance(missing, str) and missing.startswith("does not apply to the base tree: ")
    assert (tmp_path / "m.py").read_text() == SOURCE  # judged on a scratch copy


def test_screening_a_set_rejects_with_reasons_and_writes_conflicts(tmp_path: Path) -> None:
    read = dir_reader(_tree(tmp_path))
    specs = [_replace("a", "m.py::f", "def f(x):\n    return x * 2\n"),
             _replace("b", "m.py::f", "def f(x):\n    return x * 3\n"),
             _replace("c", "m.py::g", "def g(x):\n    return 2 * x\n"),
             _replace("bad", "m.py::h", "def h(x):\n    return 0\n"),
             _replace("needs_bad", "m.py::g", "def g(x):\n    return 3 * x\n", requires=("bad",)),
             _replace("needs_ghost", "m.py::g", "def g(x):\n    return 4 * x\n", requires=("ghost",))]
    out = screen_patches(read, specs, SCOPE)
    assert [s.id for s in out.accepted] == ["a", "b", "c"] and sorted(out.claims) == ["a", "b", "c"]
    assert out.conflicts() == {"a": ["b"], "b": ["a"]}  # both change m.py::f
    assert out.rejected["bad"].startswith("outside the editable scope")
    assert out.rejected["needs_bad"] == "requires bad, which was rejected"
    assert out.rejected["needs_ghost"] == "requires ghost, which is not a known patch"
    again = screen_patches(lambda paths: {}, specs[:3], SCOPE, claims=out.claims)  # claims reused, nothing read
    assert [s.id for s in again.accepted] == ["a", "b", "c"] and again.rejected == {}


def test_the_directory_reader_reads_only_files_that_exist(tmp_path: Path) -> None:
    read = dir_reader(_tree(tmp_path))
    assert read(["m.py", "absent.py", "."]) == {"m.py": SOURCE.encode()}
