"""Real trials of the tinygpt fixture through the CLI: init, check, trial, memory, clocks, a killed bot."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infrarsi.journal import Journal
from infrarsi.trial_record import Outcome
from tests.support.tinygpt import TINY_TOKENS, infrarsi
from tests.support.processes import jobs_of, wait_for_job

pytestmark = pytest.mark.slow


def _trial(repo: Path, *args: str) -> dict:
    result = infrarsi("trial", str(repo), "--json", *args)
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def test_init_writes_a_contract_that_check_accepts(tiny_repo: Path) -> None:
    text = (tiny_repo / "infrarsi.toml").read_text()
    assert "# guessed:" in text
    result = infrarsi("check", str(tiny_repo))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: contract valid; 2 locked files match infrarsi.lock")


def test_one_changed_byte_in_a_locked_file_fails_check(tiny_repo: Path) -> None:
    harness = tiny_repo / "harness.py"
    data = bytearray(harness.read_bytes())
    data[10] = ord("X") if data[10] != ord("X") else ord("Y")
    harness.write_bytes(bytes(data))
    result = infrarsi("check", str(tiny_repo))
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: check failed: 1 problem(s) with infrarsi.lock: harness.py: locked file changed "
                           "(sha256 ")
    assert "data.py" not in result.stderr


def test_a_changed_contract_fails_check(tiny_repo: Path) -> None:
    contract = tiny_repo / "infrarsi.toml"
    contract.write_text(contract.read_text().replace("trials = 30", "trials = 31"))
    result = infrarsi("check", str(tiny_repo))
    assert result.returncode == 1
    assert "infrarsi.toml: the contract changed since the lock was taken" in result.stderr


def test_trial_json_has_the_bot_measured_metrics(tiny_repo: Path) -> None:
    out = _trial(tiny_repo)
    assert out["outcome"] == "ok", out
    for key in ("outcome", "step_time_s", "step_time_cv", "tokens_per_s", "peak_mem_bytes", "loss", "cost_s"):
        assert key in out
    assert out["step_time_s"] > 0 and out["step_time_cv"] >= 0
    assert out["tokens_per_step"] == TINY_TOKENS
    assert out["tokens_per_s"] == pytest.approx(TINY_TOKENS / out["step_time_s"])
    assert len(out["loss"]) == 6 and all(l > 0 for l in out["loss"])
    assert out["peak_mem_bytes"] > 50 * 2**20  # torch itself
    assert out["cost_s"] > out["step_time_s"] * 6
    with Journal(tiny_repo / ".infrarsi" / "journal.sqlite") as journal:
        (record,) = journal.trials("manual")
    assert record.outcome is Outcome.OK and record.metrics.step_time_s == out["step_time_s"]
    assert (tiny_repo / ".infrarsi" / ".gitignore").read_text().strip().endswith("*")


def test_knob_values_reach_the_job_and_bad_ones_are_refused(tiny_repo: Path) -> None:
    out = _trial(tiny_repo, "--knob", "dtype=bf16", "--knob", "micro_batch=4")
    assert out["outcome"] == "ok"
    assert "dtype=bf16" in out["candidate"] and "micro_batch=4" in out["candidate"]
    stdout_log = tiny_repo / ".infrarsi" / "logs" / "manual" / "1" / "stdout.log"
    assert stdout_log.read_text().count("| tokens 128 |") == 8
    bad = infrarsi("trial", str(tiny_repo), "--knob", "dtype=fp16")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: knob dtype: expected one of 'fp32', 'bf16', got 'fp16'"
    bad = infrarsi("trial", str(tiny_repo), "--knob", "micro_batch=3")
    assert bad.returncode == 2 and "expected one of 1, 2, 4" in bad.stderr


def test_memory_limit_below_the_baseline_is_an_oom(tiny_repo: Path) -> None:
    out = _trial(tiny_repo, "--memory-limit", "60MiB")
    assert out["outcome"] == "oom", out
    assert out["peak_mem_censored"] is True
    assert out["peak_mem_bytes"] >= 60 * 2**20
    assert out["memory_limit_bytes"] == 60 * 2**20
    assert jobs_of(tiny_repo) == []


def test_a_candidate_that_fakes_its_clocks_gets_the_same_bot_time(tiny_repo: Path) -> None:
    honest = [_trial(tiny_repo) for _ in range(2)]
    train = tiny_repo / "train.py"
    fake = '''
import time as _t
_real_pc, _real_t = _t.perf_counter, _t.time
_t.perf_counter = lambda: _real_pc() / 10.0   # every interval looks ten times shorter
_t.time = lambda: _real_t() / 10.0
'''
    future = "from __future__ import annotations\n"
    source = train.read_text()
    train.write_text(source.replace(future, future + fake, 1) if future in source else fake + source)
    faked = [_trial(tiny_repo) for _ in range(2)]
    bot_honest = min(o["step_time_s"] for o in honest)
    bot_faked = min(o["step_time_s"] for o in faked)
    assert all(o["outcome"] == "ok" for o in honest + faked)
    # The job's own claim moves tenfold; the bot's measurement does not.
    for o in honest:
        assert 0.7 < o["child_step_time_s"] / o["step_time_s"] < 1.4
    for o in faked:
        assert o["child_step_time_s"] / o["step_time_s"] < 0.2
    assert 0.4 < bot_faked / bot_honest < 2.5  # noise, not a tenfold change


def test_killing_the_bot_mid_trial_keeps_the_journal(tiny_repo: Path) -> None:
    first = _trial(tiny_repo)
    assert first["outcome"] == "ok"
    bot = subprocess.Popen([sys.executable, "-m", "bot", "trial", str(tiny_repo), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tiny_repo / ".infrarsi" / "journal.sqlite"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with sqlite3.connect(db) as conn:
            if conn.execute("SELECT COUNT(*) FROM trials WHERE record IS NULL").fetchone()[0]:
                break
        time.sleep(0.05)
    wait_for_job(tiny_repo)  # the job is running: the kill lands mid-trial, not before the launch
    bot.send_signal(signal.SIGKILL)
    bot.wait(timeout=30)
    with Journal(db) as journal:
        assert journal.integrity() == "ok"
        records = journal.trials("manual")
        orphans = journal.orphaned("manual")
    assert [r.trial_no for r in records] == [1]
    assert records[0].metrics.step_time_s == first["step_time_s"]
    assert [o.trial_no for o in orphans] == [2]
    deadline = time.monotonic() + 10
    while jobs_of(tiny_repo) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert jobs_of(tiny_repo) == []  # the job died with its bot
    listing = infrarsi("journal", str(tiny_repo))
    assert "manual/2    interrupted" in listing.stdout
