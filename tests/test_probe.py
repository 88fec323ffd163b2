"""The probe in the job's process: one JSON line per event on the channel the bot hands over, else nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infrarsi import probe


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "probe.jsonl"
    monkeypatch.delenv(probe.FD_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv(probe.FILE_ENV, str(path))
    monkeypatch.setattr(probe, "_channel", probe._Channel())
    return path


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_call_writes_one_event_line(channel: Path) -> None:
    assert probe.enabled()
    probe.step(loss=2, tokens=128.0, step=3, lr=0.1)
    probe.memory(peak_bytes=1e9)
    probe.info(parameters=1000)
    probe.oom("x" * 3000)
    with probe.phase("forward"):
        pass
    events = _events(channel)
    assert [e["event"] for e in events] == ["step", "memory", "info", "oom", "phase"]
    step = events[0]
    assert (step["step"], step["loss"], step["tokens"], step["lr"]) == (3, 2.0, 128, 0.1)
    assert isinstance(step["t"], float) and "rank" not in step
    assert events[1] == {**events[1], "peak_bytes": 1_000_000_000, "device": "cuda"}
    assert events[2]["parameters"] == 1000 and len(events[3]["message"]) == 2000
    assert events[4]["name"] == "forward" and events[4]["seconds"] >= 0


def test_under_torchrun_each_event_carries_its_rank(channel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    probe.event("custom", x=1)
    assert _events(channel) == [{"event": "custom", "t": _events(channel)[0]["t"], "rank": 3, "x": 1}]


def test_without_a_channel_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(probe.FD_ENV, raising=False)
    monkeypatch.delenv(probe.FILE_ENV, raising=False)
    monkeypatch.setattr(probe, "_channel", probe._Channel())
    assert not probe.enabled()
    probe.step(loss=1.0, tokens=1)  # nothing to write to, nothing raised
