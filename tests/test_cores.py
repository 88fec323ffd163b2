"""bot.stages.init.cores: the cores a job launched from here may use is the affinity mask, not the machine."""
from __future__ import annotations

import os

import pytest

from bot.stages.init import cores
from bot.stages.init.cores import usable_cores


def test_the_affinity_mask_is_what_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cores() == 3


def test_without_an_affinity_call_the_machines_count_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert cores.usable_cores() == 12


def test_an_unknown_count_is_one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int) -> set[int]:
        raise OSError("no affinity here")
    monkeypatch.setattr(os, "sched_getaffinity", refuse, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert usable_cores() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(), raising=False)
    assert usable_cores() == 1
