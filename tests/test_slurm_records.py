"""What travels through a Slurm job's shared directory: the launch and each rank's record, and their merge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bot.executors.slurm.records import (merge_ranks, read_json, read_ranks, record_file, spec_from_dict,
                                         spec_to_dict, write_json)
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.seams.executor_codec import CODEC_VERSION, execution_to_dict
from infrarsi.trial_record import StepEvent


def _ex(**kw: object) -> Execution:
    fields: dict = {"events": (), "returncode": 0, "wall_s": 1.0, "peak_rss_bytes": 0, **kw}
    return Execution(**fields)


def test_ranks_merge_into_one_execution() -> None:
    steps = (StepEvent(step=1, stamp=1.0), StepEvent(step=2, stamp=2.0))
    ok = merge_ranks({0: _ex(events=steps, peak_rss_bytes=100, pids=(1,)), 1: _ex(peak_rss_bytes=300, pids=(2,))})
    assert ok is not None and ok.events == steps and ok.peak_rss_bytes == 300 and ok.pids == (1, 2)
    assert ok.returncode == 0 and ok.failed_rank is None
    # rank 1 failed on its own; rank 0 was stopped by srun afterwards
    crashed = merge_ranks({0: _ex(returncode=-9, stderr_tail="killed"), 1: _ex(returncode=1, stderr_tail="boom")})
    assert crashed is not None and (crashed.returncode, crashed.failed_rank, crashed.stderr_tail) == (1, 1, "boom")
    oom = merge_ranks({0: _ex(returncode=-9), 1: _ex(returncode=-9, killed_for="memory", peak_rss_bytes=9)})
    assert oom is not None and oom.killed_for == "memory" and oom.peak_rss_bytes == 9
    assert merge_ranks({}) is None
    # GPU memory: the fullest rank's peak and held memory, the tightest rank's capacity
    gpus = merge_ranks({0: _ex(device_peak_mem_bytes=50, device_steady_bytes=30, device_capacity_bytes=79),
                        1: _ex(device_peak_mem_bytes=60, device_steady_bytes=35, device_capacity_bytes=78),
                        2: _ex()})
    assert gpus is not None
    assert (gpus.device_peak_mem_bytes, gpus.device_steady_bytes, gpus.device_capacity_bytes) == (60, 35, 78)
    single = merge_ranks({0: _ex(returncode=1)})
    assert single is not None and single.failed_rank is None


def test_ranks_stopped_after_rank_0_saw_every_step_are_collateral_and_every_rank_reports() -> None:
    # rank 0's agent ended its job after the measured steps; rank 1 lost its collective and srun stopped it
    done = merge_ranks({0: _ex(returncode=-15, stopped_after_steps=True, witness={"rank": "0", "flops": 1},
                               lock_changed=()),
                        1: _ex(returncode=-9, killed_for="interrupt", witness={"rank": "1", "flops": 1},
                               lock_changed=())})
    assert done is not None and done.killed_for is None and done.failed_rank is None and done.stopped_after_steps
    assert [w["rank"] for w in done.witness_ranks] == [0, 1] and done.witness == {"rank": 0, "flops": 1}
    assert done.lock_changed == ()
    # a rank over its memory limit is not collateral, and a rank that found a locked file changed is named
    oom = merge_ranks({0: _ex(returncode=-15, stopped_after_steps=True, lock_changed=()),
                       1: _ex(returncode=-9, killed_for="memory", lock_changed=("harness.py",))})
    assert oom is not None and oom.killed_for == "memory" and oom.lock_changed == ("harness.py",)
    # one rank's witness could not be trusted: the trial says which
    spoofed = merge_ranks({0: _ex(witness={"flops": 1}), 1: _ex(witness_error="a witness report failed "
                                                                 "authentication (spoofed)")})
    assert spoofed is not None and spoofed.witness_error == "rank 1: a witness report failed authentication (spoofed)"


def test_json_is_written_whole_with_its_mode_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    write_json(path, {"b": 1, "a": [1, 2]}, mode=0o600)
    assert read_json(path) == {"a": [1, 2], "b": 1}
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["spec.json"]  # no temporary file left behind
    write_json(path, {"c": 3})
    assert read_json(path) == {"c": 3}


def test_unreadable_json_is_none_and_a_newer_schema_is_refused(tmp_path: Path) -> None:
    assert read_json(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_json(tmp_path / "bad.json") is None
    (tmp_path / "list.json").write_text("[1, 2]")
    assert read_json(tmp_path / "list.json") is None
    (tmp_path / "new.json").write_text(json.dumps({"schema_version": CODEC_VERSION + 1}))
    with pytest.raises(ValueError, match=f"schema {CODEC_VERSION + 1} is newer than this InfraRSI"):
        read_json(tmp_path / "new.json")


def test_the_launch_round_trips_with_what_the_agents_need() -> None:
    spec = TrialSpec(argv=("python", "train.py"), cwd="/w", env=(("A", "1"),), timeout_s=30.0, expected_steps=8,
                     root="/w", lock=(("harness.py", "ab" * 32),))
    data = spec_to_dict(spec, base_env={"PATH": "/bin"}, world_size=4, tasks_per_node=2)
    assert (data["base_env"], data["world_size"], data["tasks_per_node"]) == ({"PATH": "/bin"}, 4, 2)
    assert spec_from_dict(json.loads(json.dumps(data))) == spec


def test_every_ranks_record_is_read_by_its_rank(tmp_path: Path) -> None:
    for rank, rc in ((0, 0), (1, 3)):
        write_json(tmp_path / record_file(rank), execution_to_dict(_ex(returncode=rc), rank=rank, node=f"n{rank}"))
    (tmp_path / record_file(2)).write_text("torn")  # a rank still writing: skipped
    ranks = read_ranks(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert ranks[1][0].returncode == 3 and ranks[1][1]["node"] == "n1"
    assert record_file(7) == "record.7.json"
