"""bot.stages.init.dryrun: the verdict of ``check --run`` on one baseline execution, judged without running a job
(an executor that hands back a made-up execution). The real run is in tests/test_init_steplines.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.stages.init.dryrun import dry_run, no_step_line_message
from infrarsi.contract.model import Contract
from infrarsi.seams.executor import Execution
from tests.support.init_draft import FakeExecutor, drafted_contract, step_log, steps


@pytest.fixture
def contract(tmp_path: Path) -> Contract:
    return drafted_contract(tmp_path / "repo")  # 2 warm-up + 12 measured step lines, regex on stdout


def _run(contract: Contract, tmp_path: Path, execution: Execution, log: str = ""):  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "stdout.log").write_text(log)
    executor = FakeExecutor(execution)
    result = dry_run(contract, executor=executor, log_dir=logs)
    assert [s.log_dir for s in executor.specs] == [str(logs)]  # the baseline, launched once
    return result


def test_one_line_per_step_is_ok(contract: Contract, tmp_path: Path) -> None:
    result = _run(contract, tmp_path, Execution(events=steps(14), returncode=0, wall_s=1.5, peak_rss_bytes=1),
                  step_log(steps(14)))
    assert (result.ok, result.seen, result.expected) == (True, 14, 14)
    assert result.message == "ok: the regex saw 14 step lines in 1.5 s; first losses [2.0, 1.99, 1.98]"


def test_a_failed_baseline_shows_the_end_of_its_stderr(contract: Contract, tmp_path: Path) -> None:
    execution = Execution(events=steps(3), returncode=1, wall_s=1.0, peak_rss_bytes=1,
                          stderr_tail="Traceback\n  File x\nValueError: bad\n")
    result = _run(contract, tmp_path, execution)
    assert not result.ok
    assert result.message == ("the baseline failed (exit status 1) after 3 step events:\n"
                              "  | Traceback\n  |   File x\n  | ValueError: bad")


def test_lines_that_skip_steps_ask_for_steps_per_line(contract: Contract, tmp_path: Path) -> None:
    result = _run(contract, tmp_path, Execution(events=steps(14, every=10), returncode=0, wall_s=1.0,
                                                peak_rss_bytes=1), step_log(steps(14, every=10)))
    assert not result.ok
    assert result.message == ("the regex saw 14 lines but their steps advance by [10] (timing.steps_per_line = 1); "
                              "set timing.steps_per_line to the logging interval")


def test_no_step_lines_show_the_loss_lines_and_a_regex_that_reads_them(contract: Contract, tmp_path: Path) -> None:
    log = "loading data\r\nit 1 | loss 2.5\nit 2 | loss 2.4\n"
    result = _run(contract, tmp_path, Execution(events=(), returncode=0, wall_s=1.0, peak_rss_bytes=1), log)
    assert not result.ok and result.seen == 0
    lines = result.message.splitlines()
    assert lines[0].startswith("the step regex saw 0 step lines, expected 14 (")
    assert lines[1:4] == ["lines with 'loss' it printed:", "  | it 1 | loss 2.5", "  | it 2 | loss 2.4"]
    assert result.suggested_regex is not None
    found = re.search(result.suggested_regex, "it 7 | loss 1.25")
    assert found is not None and (found["step"], found["loss"]) == ("7", "1.25")


def test_a_job_that_printed_nothing_is_told_how_to_print_a_step_line() -> None:
    message = no_step_line_message([], regex="x", seen=0, expected=3)
    assert message.splitlines() == [
        "the step regex saw 0 step lines, expected 3 ('x' on stdout)",
        "the last lines it printed on stdout:",
        "  (the job printed nothing on stdout)",
        "no line carries a training loss; print one line per step with the step and the loss "
        "(e.g. print(f\"step {step} loss {loss.item():.4f}\")), or emit events with infrarsi.probe"]


def test_only_the_last_twelve_lines_are_shown() -> None:
    lines = [f"epoch {i}" for i in range(30)]
    message = no_step_line_message(lines, regex=None, seen=0, expected=3, stream="stderr")
    shown = [ln for ln in message.splitlines() if ln.startswith("  | ")]
    assert shown == [f"  | epoch {i}" for i in range(18, 30)]
    assert "the last lines it printed on stderr:" in message


def test_events_the_regex_did_not_read_are_not_its(contract: Contract, tmp_path: Path) -> None:
    """Issue 45: step events that came from the probe channel while the regex matched none of the job's lines."""
    log = "".join(f"it={i} l={2 - i / 100}\n" for i in range(14))
    result = _run(contract, tmp_path, Execution(events=steps(14), returncode=0, wall_s=1.0, peak_rss_bytes=1), log)
    assert not result.ok and result.seen == 0
    assert result.message.startswith("the step regex saw 0 step lines, expected 14 (")
    assert result.message.endswith("(14 step events came from the infrarsi.probe channel instead; set timing.source "
                                   "= 'probe' to time those)")
