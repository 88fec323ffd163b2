"""The run journal: trials reserved as running, replaced by their record, orphans told apart, LLM calls kept."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import psutil

from infrarsi.journal import JOURNAL_SCHEMA, Journal
from infrarsi.seams.proposer import LLMCall
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

C = Candidate.of({"micro": 2}, ("p",))


def test_a_trial_is_pending_until_recorded_and_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "j" / "journal.sqlite"
    with Journal(path) as j:
        j.ensure_run("r1", kind="search", base_commit="abc", info={"n": 1})
        j.ensure_run("r1", kind="other")  # idempotent
        assert [(r, k) for r, k, _ in j.runs()] == [("r1", "search")]
        assert j.begin_trial("r1", C) == 1 and j.begin_trial("r1", C) == 2 and j.begin_trial("r2", C) == 1
        pending = j.pending("r1")
        assert [(p.trial_no, p.candidate_hash) for p in pending] == [(1, C.digest()), (2, C.digest())]
        assert j.orphaned() == []  # this process is alive
        rec = TrialRecord(run_id="r1", trial_no=1, candidate=C, outcome=Outcome.OK,
                          metrics=TrialMetrics(step_time_s=0.5), started_at=10.0)
        j.record_trial(rec)
        j.discard_pending("r1", 2)
        j.discard_pending("r1", 1)  # a recorded trial is never discarded
        assert j.trials("r1") == [rec] and j.pending("r1") == []
        assert len(j.trials()) == 1 and [p.run_id for p in j.pending()] == ["r2"]
        assert j.integrity() == "ok"
    with Journal(path) as again:
        assert again.trials("r1") == [rec]
        schema = again._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        assert schema == str(JOURNAL_SCHEMA)


def test_a_pending_trial_whose_bot_is_gone_is_orphaned_and_marked_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    with Journal(path) as j:
        j.ensure_run("r", kind="search")
        n = j.begin_trial("r", C)
    dead = max(psutil.pids()) + 10_000
    db = sqlite3.connect(path)
    db.execute("UPDATE trials SET bot_pid = ?", (dead,))
    db.commit()
    db.close()
    with Journal(path) as j:
        (orphan,) = j.orphaned("r")
        assert orphan.trial_no == n and orphan.bot_pid == dead
        rec = j.mark_interrupted(orphan, C, cost_s=7.0)
        assert rec.outcome is Outcome.INTERRUPTED and rec.ended_at == rec.started_at + 7.0
        assert rec.reason == "the bot stopped while this trial ran"
        assert j.trials("r") == [rec] and j.orphaned() == []


def test_llm_calls_are_numbered_per_run(tmp_path: Path) -> None:
    call = LLMCall(job="priors", request_hash="h", model="m", input_tokens=10, cost_usd=0.01)
    with Journal(tmp_path / "journal.sqlite") as j:
        j.record_llm_call("r1", call)
        j.record_llm_call("r1", replace(call, outcome="error", error="429"))
        j.record_llm_call("r2", call)
        assert [c.outcome for c in j.llm_calls("r1")] == ["ok", "error"]
        assert j.llm_calls() == [call, replace(call, outcome="error", error="429"), call]
        seqs = j._db.execute("SELECT run_id, seq FROM llm_calls ORDER BY run_id, seq").fetchall()
        assert seqs == [("r1", 1), ("r1", 2), ("r2", 1)]
        assert json.loads(j._db.execute("SELECT record FROM llm_calls").fetchone()[0])["model"] == "m"
