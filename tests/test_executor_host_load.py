"""What else the host did while a trial ran: CPU pressure stall and steal, read from /proc; a counter the host
lacks is left out, never read as zero."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.executors import host_load
from bot.executors.host_load import HostCounters, host_facts


def test_facts_are_the_differences_in_seconds_beside_the_cpu_count() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    facts = dict(host_facts(HostCounters(psi_some_us=1_000_000, steal_ticks=10),
                            HostCounters(psi_some_us=3_500_000, steal_ticks=10 + hz), cpu_s=1.234567))
    assert facts == {"cpus": float(os.cpu_count() or 1), "cpu_s": 1.2346, "psi_some_s": 2.5, "steal_s": 1.0}


def test_a_counter_missing_on_either_side_is_left_out() -> None:
    facts = host_facts(HostCounters(psi_some_us=None, steal_ticks=5), HostCounters(psi_some_us=7, steal_ticks=None),
                       cpu_s=None)
    assert [name for name, _ in facts] == ["cpus"]


def test_proc_files_are_parsed_and_unreadable_ones_are_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    psi, stat = tmp_path / "cpu", tmp_path / "stat"
    psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\nfull avg10=0.00 total=99\n")
    stat.write_text("cpu  10 0 20 300 4 0 1 77 0 0\ncpu0 1 2 3\n")
    monkeypatch.setattr(host_load, "_PSI", psi)
    monkeypatch.setattr(host_load, "_STAT", stat)
    assert HostCounters.read() == HostCounters(psi_some_us=123456, steal_ticks=77)
    psi.write_text("full avg10=0.00 total=99\n")  # no "some" line
    stat.write_text("cpu 1 2 3\n")  # too few fields for steal
    assert HostCounters.read() == HostCounters(psi_some_us=None, steal_ticks=None)
    monkeypatch.setattr(host_load, "_PSI", tmp_path / "absent")
    monkeypatch.setattr(host_load, "_STAT", tmp_path / "absent")
    assert HostCounters.read() == HostCounters(psi_some_us=None, steal_ticks=None)
