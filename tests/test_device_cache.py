"""The device probe's figures are reused on the same machine for a few hours, and only there."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.stages.doctor import device_cache
from bot.stages.doctor.device_cache import TTL_S, cached_probe


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("INFRARSI_DEVICE_CACHE", raising=False)


class Probe:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"peak_flops": {"fp32": 1e11 * self.calls}, "peak_flops_method": "best repeat", "fingerprint": {}}


def test_a_second_doctor_reuses_the_measurement_and_says_when_it_was_taken() -> None:
    probe, clock = Probe(), [1_800_000_000.0]
    first = cached_probe(probe, env={}, threads=None, now=lambda: clock[0])
    clock[0] += 3600
    again = cached_probe(probe, env={}, threads=None, now=lambda: clock[0])
    assert probe.calls == 1 and again["peak_flops"] == first["peak_flops"]
    assert first["peak_flops_method"] == "best repeat"
    assert "measured 2027-01-15 08:00 UTC on this machine and reused" in again["peak_flops_method"]
    assert "--remeasure-device" in again["peak_flops_method"]


def test_an_old_measurement_a_remeasure_or_the_switch_measures_again(monkeypatch: pytest.MonkeyPatch) -> None:
    probe, clock = Probe(), [1_800_000_000.0]
    cached_probe(probe, env={}, threads=None, now=lambda: clock[0])
    clock[0] += TTL_S + 1
    assert cached_probe(probe, env={}, threads=None, now=lambda: clock[0])["peak_flops"]["fp32"] == 2e11
    assert cached_probe(probe, env={}, threads=None, remeasure=True, now=lambda: clock[0])["peak_flops"]["fp32"] == 3e11
    monkeypatch.setenv("INFRARSI_DEVICE_CACHE", "off")
    cached_probe(probe, env={}, threads=None, now=lambda: clock[0])
    assert probe.calls == 4


def test_other_threads_or_thread_variables_are_another_measurement() -> None:
    probe = Probe()
    cached_probe(probe, env={}, threads=None)
    cached_probe(probe, env={}, threads=1)
    cached_probe(probe, env={"OMP_NUM_THREADS": "1"}, threads=None)
    cached_probe(probe, env={"UNRELATED": "x"}, threads=None)  # what does not change the figures keeps the key
    assert probe.calls == 3


def test_a_broken_cache_file_is_measured_over(tmp_path: Path) -> None:
    probe = Probe()
    path = device_cache.cache_dir() / f"{device_cache.cache_key({}, None)}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert cached_probe(probe, env={}, threads=None)["peak_flops"]["fp32"] == 1e11 and probe.calls == 1


def test_a_probe_that_measured_nothing_is_not_kept() -> None:
    calls = []

    def nothing() -> dict:
        calls.append(1)
        return {"peak_flops": {}, "peak_flops_method": "not measured: no torch", "fingerprint": {}}

    assert cached_probe(nothing, env={}, threads=None)["peak_flops"] == {}
    cached_probe(nothing, env={}, threads=None)
    assert len(calls) == 2 and not device_cache.cache_dir().exists()
