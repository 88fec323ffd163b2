"""The lock checked where the job runs: which locked files are missing or changed, and the refusal's text."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bot.executors.locked_files import changed_locked_files, merged, refused
from infrarsi.seams.executor import TrialSpec


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_launch_not_made_by_a_trial_asks_for_no_check(tmp_path: Path) -> None:
    assert changed_locked_files(TrialSpec(argv=("x",), cwd=str(tmp_path))) is None
    assert changed_locked_files(TrialSpec(argv=("x",), cwd=str(tmp_path), root=str(tmp_path))) == ()


def test_changed_and_missing_files_are_named_in_lock_order(tmp_path: Path) -> None:
    (tmp_path / "harness.py").write_text("same")
    (tmp_path / "data.py").write_text("edited")
    lock = (("harness.py", _sha("same")), ("data.py", _sha("original")), ("gone.py", _sha("x")))
    spec = TrialSpec(argv=("x",), cwd=str(tmp_path / "sub"), root=str(tmp_path), lock=lock)
    assert changed_locked_files(spec) == ("data.py", "gone.py")
    # without a root the paths are read from the job's cwd
    assert changed_locked_files(TrialSpec(argv=("x",), cwd=str(tmp_path), lock=lock[:1])) == ()


def test_before_and_after_are_merged_sorted_without_duplicates() -> None:
    assert merged(None, None) is None
    assert merged(None, ()) == ()
    assert merged(("b.py", "a.py"), ("a.py", "c.py")) == ("a.py", "b.py", "c.py")


def test_the_refusal_names_the_tree_and_at_most_five_files() -> None:
    spec = TrialSpec(argv=("x",), cwd="/w/sub", root="/w")
    files = tuple(f"f{i}.py" for i in range(7))
    assert refused(spec, files) == ("not started: 7 locked file(s) differ from the lock in /w before launch: "
                                    "f0.py, f1.py, f2.py, f3.py, f4.py")
    assert refused(TrialSpec(argv=("x",), cwd="/c"), ("a.py",)) == \
        "not started: 1 locked file(s) differ from the lock in /c before launch: a.py"
