"""The witness in every rank: one key and report file per local rank, and one view of the ranks' reports."""

from __future__ import annotations

import hmac
import json
import os
from dataclasses import replace
from pathlib import Path

from bot.executors.witness.ranks import RANK_WITNESS_ENV, RankChannels, merged_witness
from infrarsi.seams.executor import Execution
from infrarsi.witness import WitnessResult
from tests.support.witnessed import report


def _signed(channels: RankChannels, rank: int, data: dict) -> None:
    text = json.dumps(data)
    mac = hmac.new(channels.keys[rank], text.encode(), "sha256").hexdigest()
    with open(channels.directory / f"report.{rank}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"witness": text, "mac": mac}) + "\n")


def test_channels_are_private_files_one_per_rank(tmp_path: Path) -> None:
    ch = RankChannels.open(tmp_path / "w", ranks=2, count_step=3, final_step=9)
    assert os.stat(tmp_path / "w").st_mode & 0o777 == 0o700
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["key.0", "key.1", "report.0.jsonl",
                                                                  "report.1.jsonl"]
    # the key, then the counted step: never in the environment, which /proc/self/environ keeps
    assert (tmp_path / "w" / "key.1").read_bytes() == ch.keys[1] + b"\n3" and ch.keys[0] != ch.keys[1]
    assert os.stat(tmp_path / "w" / "key.0").st_mode & 0o777 == 0o600
    assert ch.env == {RANK_WITNESS_ENV: f"{tmp_path / 'w'},0,9"}
    assert RankChannels.open(tmp_path / "x", ranks=1, count_step=2, final_step=None).env[RANK_WITNESS_ENV] == \
        f"{tmp_path / 'x'},0"


def test_each_rank_is_authenticated_under_its_own_key(tmp_path: Path) -> None:
    ch = RankChannels.open(tmp_path / "w", ranks=3, count_step=2, final_step=None)
    good = report(source_sha256=ch.expected_sha256)
    _signed(ch, 0, good.to_dict())
    text = json.dumps(good.to_dict())  # rank 1's line signed with rank 0's key: someone else wrote it
    with open(ch.directory / "report.1.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"witness": text, "mac": hmac.new(ch.keys[0], text.encode(), "sha256").hexdigest()}))
    results = ch.results()
    assert results[0] == WitnessResult(report=good, error=None)
    assert results[1].error == "a witness report failed authentication (spoofed)"
    assert results[2].report is None and results[2].error.startswith("the witness was requested but wrote no report")


def _ex(**kw: object) -> Execution:
    fields: dict = {"events": (), "returncode": 0, "wall_s": 1.0, "peak_rss_bytes": 0, **kw}
    return Execution(**fields)


def test_one_rank_is_the_trials_own_report_without_a_rank_prefix() -> None:
    out = merged_witness({0: WitnessResult(report=report(), error="tampered")})
    assert out == {"witness": {**report().to_dict(), "rank": 0}, "witness_ranks": (), "witness_error": "tampered",
                   "witness_skipped": None}
    assert merged_witness({}) == {"witness": None, "witness_ranks": (), "witness_error": None,
                                  "witness_skipped": None}


def test_several_ranks_keep_every_report_and_name_the_first_problem() -> None:
    out = merged_witness({1: _ex(witness={"flops": 2}, witness_skipped="no optimizer"),
                          0: _ex(witness={"flops": 1}), 2: _ex(witness_error="late")})
    assert out["witness"] == {"flops": 1, "rank": 0}
    assert out["witness_ranks"] == ({"flops": 1, "rank": 0}, {"flops": 2, "rank": 1})
    assert (out["witness_error"], out["witness_skipped"]) == ("rank 2: late", "rank 1: no optimizer")
    no_zero = merged_witness({3: _ex(witness={"flops": 3}), 5: replace(_ex(), witness={"flops": 5})})
    assert no_zero["witness"] == {"flops": 3, "rank": 3}
