"""infrarsi.rundir: the layout under .infrarsi/ and the one rule for "the latest run"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infrarsi.rundir import RunDir, ensure_state_dir, journal_path, latest_run, logs_dir, read_json, write_json


def _mark(root: Path, run_id: str, *, doctor_at: int | None = None, finished_at: int | None = None) -> None:
    """A run with doctor.json and/or run.json written at the given (fake) times, in seconds."""
    run = RunDir(root, run_id)
    run.create()
    for path, at in ((run.doctor_json, doctor_at), (run.run_json, finished_at)):
        if at is not None:
            write_json(path, {"run_id": run_id})
            os.utime(path, ns=(at * 10**9, at * 10**9))


def test_layout_names_every_artefact(tmp_path: Path) -> None:
    run = RunDir(tmp_path, "r1")
    base = tmp_path / ".infrarsi" / "runs" / "r1"
    assert run.path == base and not base.exists()  # naming a path creates nothing
    assert (run.doctor_json, run.doctor_md, run.run_json) == (base / "doctor.json", base / "doctor.md",
                                                              base / "run.json")
    assert (run.report_md, run.report_json, run.winner_diff) == (base / "report.md", base / "report.json",
                                                                  base / "winner.diff")
    assert run.verify_json("abc123") == base / "verify-abc123.json"
    assert journal_path(tmp_path) == tmp_path / ".infrarsi" / "journal.sqlite"
    assert logs_dir(tmp_path, "r1", 3) == tmp_path / ".infrarsi" / "logs" / "r1" / "3"


def test_state_dir_ignores_itself_and_keeps_a_users_lines(tmp_path: Path) -> None:
    state = ensure_state_dir(tmp_path)
    assert "*" in (state / ".gitignore").read_text().splitlines()
    (state / ".gitignore").write_text("scratch\n")
    ensure_state_dir(tmp_path)
    assert (state / ".gitignore").read_text().splitlines() == ["scratch", "*"]


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "-r", "a..b"])
def test_a_run_id_is_one_safe_path_component(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="run id"):
        RunDir(tmp_path, bad)


def test_json_round_trip_and_a_missing_artefact_reads_as_none(tmp_path: Path) -> None:
    run = RunDir(tmp_path, "r1")
    assert read_json(run.run_json) is None and not run.finished
    write_json(run.run_json, {"b": 1, "a": [1.5, None]})
    assert read_json(run.run_json) == {"a": [1.5, None], "b": 1}
    assert run.run_json.read_text().endswith("}\n") and run.finished and run.started


def test_latest_run_is_the_newest_marker_and_finished_filters(tmp_path: Path) -> None:
    assert latest_run(tmp_path) is None and latest_run(tmp_path, finished=True) is None
    _mark(tmp_path, "old", doctor_at=100, finished_at=400)  # started first, finished last
    _mark(tmp_path, "new", doctor_at=200, finished_at=300)
    _mark(tmp_path, "running", doctor_at=350)  # started, never finished
    (tmp_path / ".infrarsi" / "runs" / "empty").mkdir()  # no marker: not a run
    assert latest_run(tmp_path, finished=True) == "old"
    assert latest_run(tmp_path) == "old"
    _mark(tmp_path, "running", doctor_at=500)
    assert latest_run(tmp_path) == "running"
    assert latest_run(tmp_path, finished=True) == "old"


def test_latest_run_breaks_a_tie_by_run_id(tmp_path: Path) -> None:
    """Coarse file-system clocks give two runs the same time; the answer must not depend on listing order."""
    for run_id in ("r-b", "r-a", "r-c"):
        _mark(tmp_path, run_id, doctor_at=100, finished_at=100)
    assert latest_run(tmp_path) == "r-c" and latest_run(tmp_path, finished=True) == "r-c"


def test_report_and_verify_use_the_same_rule(tmp_path: Path) -> None:
    """The rule that `report` uses for its default run is the rundir rule, not a second one."""
    from bot.stages.report.build import latest_finished_run

    _mark(tmp_path, "a", doctor_at=100, finished_at=300)
    _mark(tmp_path, "b", doctor_at=200, finished_at=250)
    assert latest_finished_run(tmp_path) == latest_run(tmp_path, finished=True) == "a"
