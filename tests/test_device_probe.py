"""bot.stages.doctor.device_probe: when the matmul sizes stop growing, and the probe's command line — with the
matmuls replaced by a table of FLOP/s (torch is not imported here)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from bot.stages.doctor import device_probe
from bot.stages.doctor.device_probe import GROW_LIMIT_S, main, saturated_peak


def _table(monkeypatch: pytest.MonkeyPatch, flops: dict[int, float]) -> list[int]:
    tried: list[int] = []

    def peak(dtype_name: str, *, size: int, **kw: Any) -> float:
        tried.append(size)
        return flops[size]

    monkeypatch.setattr(device_probe, "matmul_peak", peak)
    return tried


def _saturated(sizes: tuple[int, ...]) -> tuple[float, int]:
    return saturated_peak("fp32", device="cpu", sizes=sizes, repeats=1, min_seconds=0.0)


def test_sizes_grow_until_flops_stop_rising_by_five_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    tried = _table(monkeypatch, {8: 1e9, 16: 2e9, 32: 2.05e9, 64: 9e9})
    assert _saturated((8, 16, 32, 64)) == (2.05e9, 32)
    assert tried == [8, 16, 32]


def test_the_smallest_size_never_decides_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    tried = _table(monkeypatch, {8: 5e9, 16: 1e9, 32: 2e9})
    assert _saturated((8, 16, 32)) == (5e9, 8)  # an unlucky second size stops the growth, the best is kept
    assert tried == [8, 16]


def test_a_matmul_slower_than_the_grow_limit_stops_the_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    size = 1024
    slow = 2.0 * size**3 / (2 * GROW_LIMIT_S)  # one matmul takes twice the limit
    tried = _table(monkeypatch, {size: slow, 2048: 1e15})
    assert _saturated((size, 2048)) == (slow, size)
    assert tried == [size]


def test_the_command_line_takes_a_size_and_a_thread_count(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[int | None, int | None]] = []

    def probe(size: int | None = None, repeats: int = 3, threads: int | None = None) -> dict[str, Any]:
        calls.append((size, threads))
        return {"peak_flops": {"fp32": 1.0}}

    monkeypatch.setattr(device_probe, "probe", probe)
    assert main(["--threads", "4", "256"]) == 0
    assert main([]) == 0
    assert calls == [(256, 4), (None, None)]
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [{"peak_flops": {"fp32": 1.0}}] * 2


def test_the_probe_is_a_standalone_script_that_says_when_torch_is_missing() -> None:
    """Run by path with ``-S`` (no site-packages: no torch, no bot), as in a job interpreter without torch."""
    import subprocess
    import sys

    from bot.stages.doctor.device_cache import PROBE_SCRIPT

    done = subprocess.run([sys.executable, "-S", str(PROBE_SCRIPT), "--threads", "1"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["peak_flops"] == {} and figures["peak_flops_method"].startswith("not measured: torch cannot be "
                                                                                   "imported by")
    assert figures["fingerprint"]["device"] is None and figures["fingerprint"]["cpu_count"] >= 1
