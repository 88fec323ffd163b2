"""Acceptance: the machine's speed steps by 30% halfway through a search, and the search still ranks the truly
fastest candidate first (baseline controls, infrarsi/search/drift.py), through the real ``infrarsi run``.

The fixture's step time is the test's: a knob picks a variant whose steps sleep a known time, and every
invocation of the job counts itself in a file outside the repository; from the search's fourth trial on, every
step takes 30% longer — the same job, a slower machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tinygpt import infrarsi
from tests.support.variant_job import TRUE, variant_repo

pytestmark = pytest.mark.slow


def test_a_search_ranks_the_truly_fastest_first_when_the_machine_slows_by_30_percent_halfway(
        tmp_path: Path) -> None:
    repo = variant_repo(tmp_path, slow_after=2 + 3)  # the doctor's 2 runs, then 3 search trials at full speed
    done = infrarsi("run", str(repo), "--run-id", "d", "--budget-trials", "6", "--initial", "3", "--repeats", "2",
                    "--no-bank", timeout=1500)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    summary = json.loads((repo / ".infrarsi" / "runs" / "d" / "run.json").read_text())
    controls = summary["controls"]
    assert controls, done.stderr[-2000:]
    # the controls saw the machine slow down: the last ran 30% slower than the doctor's baseline
    last = controls[-1]["step_time_s"] / summary["baseline_step_s"]
    assert 1.15 < last < 1.5, (last, controls)
    # every trial is read against the machine's speed when it ran: the ranking follows the true times
    # (the catalog's patches ride along; the variant decides the step time)
    adjusted: dict[str, list[float]] = {}
    for t in summary["trials"]:
        if t["superseded"]:
            continue  # measured while the machine changed speed, and measured again beside a new control
        if t["outcome"] == "ok" and t["adjusted_step_time_s"]:
            variant = t["candidate"].split()[0].removeprefix("variant=")
            adjusted.setdefault(variant, []).append(t["adjusted_step_time_s"])
            assert t["against"].startswith("against ")
    best = min(adjusted, key=lambda v: min(adjusted[v]))
    assert best == min(adjusted, key=TRUE.__getitem__), adjusted  # the truly fastest it tried ranks first
    first = summary["verdicts"][0]["candidate"].split()[0].removeprefix("variant=")
    assert first == best, summary["verdicts"]  # and is the one verified
    assert "baseline control (trial" in done.stderr
