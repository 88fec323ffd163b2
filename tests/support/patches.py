"""Patch specs built in memory for the search tests: a codemod patch with a given prior effect."""

from __future__ import annotations

from infrarsi.patches import Effect, PatchSpec


def patch(pid: str, *, requires: tuple[str, ...] = (), conflicts: tuple[str, ...] = (), t: float = 0.9,
          m: float = 1.0) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="test", targets=("model.py",), kind="codemod", codemod=pid,
                     effect=Effect(time_ratio=t, time_sigma=0.1, mem_ratio=m, mem_sigma=0.1, source="test"),
                     requires=requires, conflicts_with=conflicts)
