"""bot.stages.doctor.baseline: the doctor's pure parts — run ids, the job's thread count, the device probe's
launch and failure, reading a report back. The doctor's real runs are in tests/test_doctor_verify.py (slow)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot.stages.doctor import baseline
from bot.stages.doctor.baseline import job_threads, load_doctor, measure_device, new_run_id
from bot.stages.doctor.device_cache import PROBE_SCRIPT


def test_a_run_id_is_the_utc_time_to_the_second() -> None:
    assert re.fullmatch(r"r\d{8}-\d{6}", new_run_id())


def _contract(*knobs: tuple[str, Any]) -> Any:
    return SimpleNamespace(knobs=[SimpleNamespace(name=n, default=d) for n, d in knobs])


def test_the_thread_count_is_the_default_of_a_thread_knob() -> None:
    assert job_threads(_contract(("dtype", "bf16"), ("num_threads", 4))) == 4
    assert job_threads(_contract(("threads", 0), ("torch_threads", True))) is None  # not a positive int
    assert job_threads(_contract(("workers", 8))) is None


class _Ran:
    def __init__(self, returncode: int, stdout: str = "", stderr: str = "") -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Calls of the probe's process (none is started) and of the cache (which always measures)."""
    calls: list[dict[str, Any]] = []

    def cached(measure: Any, *, env: dict[str, str], threads: int | None, remeasure: bool,
               python: str) -> dict[str, Any]:
        calls.append({"cache_threads": threads, "remeasure": remeasure, "python": python})
        return measure()

    monkeypatch.setattr(baseline, "cached_probe", cached)
    return calls


def test_the_probe_runs_in_the_jobs_interpreter_with_the_jobs_threads(probe: list[dict[str, Any]],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def run(argv: list[str], **kw: Any) -> _Ran:
        probe.append({"argv": argv, "timeout": kw["timeout"]})
        return _Ran(0, '{"peak_flops": {"float32": 1e12}}')

    monkeypatch.setattr(subprocess, "run", run)
    assert measure_device(12.0, env={"OMP_NUM_THREADS": "2"}, threads=2, remeasure=True, python="/job/python") == {
        "peak_flops": {"float32": 1e12}}
    # the probe is a script run by path: the job's interpreter needs torch, not the bot
    assert probe == [{"cache_threads": 2, "remeasure": True, "python": "/job/python"},
                     {"argv": ["/job/python", str(PROBE_SCRIPT), "--threads", "2"], "timeout": 12.0}]


def test_a_failed_probe_says_so_with_the_end_of_its_stderr(probe: list[dict[str, Any]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: _Ran(1, stderr="x" * 600 + "\nSegmentation fault\n"))
    with pytest.raises(RuntimeError) as caught:
        measure_device()
    message = str(caught.value)
    assert message == f"device probe failed: {sys.executable} failed: Segmentation fault"


def test_a_run_without_a_doctor_report_reads_as_none(tmp_path: Path) -> None:
    assert load_doctor(tmp_path, "r20260101-000000") is None
