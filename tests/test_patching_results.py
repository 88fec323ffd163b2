"""What applying one patch came to, as values: patch results and per-file outcomes."""

from __future__ import annotations

import dataclasses

import pytest

from bot.patching.results import Applied, Broken, Declined, Failed, NotApplicable, Rewritten


def test_results_are_frozen_values_compared_by_content() -> None:
    one = Applied(patch_id="p", changed_files=("a.py",))
    assert one == Applied(patch_id="p", changed_files=("a.py",), added_imports=(), symbols=())
    assert one != Applied(patch_id="p", changed_files=("b.py",))
    assert len({one, Applied(patch_id="p", changed_files=("a.py",))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.patch_id = "q"  # type: ignore[misc]


def test_every_result_and_outcome_is_keyword_only() -> None:
    for cls, kw in ((NotApplicable, {"patch_id": "p", "reason": "r"}), (Failed, {"patch_id": "p", "error": "e"}),
                    (Rewritten, {"code": "x = 1\n"}), (Declined, {"reason": "r"}), (Broken, {"error": "e"})):
        assert cls(**kw) == cls(**kw)
        with pytest.raises(TypeError):
            cls(*kw.values())
    assert Rewritten(code="").symbols == () and Rewritten(code="").added_imports == ()
