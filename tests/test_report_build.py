"""bot.stages.report.build: which run is reported, and the one-line refusals when it cannot be (the report of a
finished run is rendered in tests/test_report_render.py and through the CLI in tests/test_apply.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.stages.report.build import ReportError, latest_finished_run, read_run_summary, write_report
from infrarsi.contract.model import Contract
from infrarsi.rundir import RunDir
from tests.support.init_draft import drafted_contract


@pytest.fixture
def contract(tmp_path: Path) -> Contract:
    return drafted_contract(tmp_path / "repo")


def _refusal(contract: Contract, run_id: str | None = None) -> str:
    with pytest.raises(ReportError) as caught:
        write_report(contract, run_id, workspace=None, write=False)  # type: ignore[arg-type]
    assert caught.value.exit_code == 2
    return str(caught.value)


def test_a_repo_without_a_finished_run_has_nothing_to_report(contract: Contract) -> None:
    assert latest_finished_run(contract.root) is None
    assert _refusal(contract) == (f"{contract.root}: no finished run (run.json) to report; "
                                  f"run `infrarsi run {contract.root}` first")


def test_an_unknown_run_names_the_latest_finished_one(contract: Contract) -> None:
    finished = RunDir(contract.root, "r20260101-000000")
    finished.path.mkdir(parents=True)
    finished.run_json.write_text("{}")
    assert latest_finished_run(contract.root) == "r20260101-000000"
    assert _refusal(contract, "r-nope") == (f"no run 'r-nope' in {finished.path.parent} (the latest finished run is "
                                            "r20260101-000000; `infrarsi journal` lists every run)")


def test_a_run_that_never_finished_is_told_to_resume(contract: Contract) -> None:
    run = RunDir(contract.root, "r1")
    run.path.mkdir(parents=True)
    assert _refusal(contract, "r1") == (f"run 'r1' has no run.json in {run.path}: it never finished "
                                        "(resume it with `infrarsi run --resume`)")


def test_the_newest_finished_run_is_the_latest(contract: Contract) -> None:
    for name, at in (("r-old", 1000), ("r-new", 2000)):
        run = RunDir(contract.root, name)
        run.path.mkdir(parents=True)
        run.run_json.write_text("{}")
        os.utime(run.run_json, (at, at))
    RunDir(contract.root, "r-unfinished").path.mkdir(parents=True)
    assert latest_finished_run(contract.root) == "r-new"


def test_a_malformed_run_summary_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("[1, 2")
    with pytest.raises(ReportError) as caught:
        read_run_summary(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a run summary this InfraRSI can read (JSONDecodeError: ")
    assert message.endswith("; rerun `infrarsi run` for this run") and "\n" not in message
