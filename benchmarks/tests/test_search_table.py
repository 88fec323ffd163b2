"""The replay of tuners against a measured table (benchmarks/search_table.py, benchmarks/space_table.py).

A synthetic table with a known optimum and an OOM configuration, small enough to
reason about by hand: greedy (deterministic) is replayed on it and its best
found, trials to 95%, OOM device-seconds and verification are checked exactly.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.doc_sections import keep_marked, replace_section
from benchmarks.search_table import check_complete, render, replay
from benchmarks.search_tuners import key
from benchmarks.space_table import (SUPPLEMENT, Run, TableBench, TableError, coverage, from_json, load,
                                    optimum, save, sigma_log, supplement_share, to_json, true_time)
from benchmarks.tests.tables import OK_COST, OOM_COST, synthetic_table


def test_the_truth_of_a_table_is_the_mean_of_its_repeats_and_an_oom_has_none():
    table = synthetic_table()
    config, t_opt = optimum(table)
    assert config == {"dtype": "bf16", "micro_batch": 4, "fast_patch": True}
    assert t_opt == pytest.approx(0.6 * 0.9 * 0.9)
    assert true_time(table, {"dtype": "fp32", "micro_batch": 4, "fast_patch": False}) == float("inf")
    assert sigma_log(table) == pytest.approx(0.01, rel=0.01)
    assert coverage(table) == (12, 12)
    check_complete(table, "synthetic")
    bench = TableBench(table, seed=0)
    assert bench.valid(table.default()) and bench.run(table.default()).outcome == "ok"


def test_greedy_replayed_on_the_table_finds_the_optimum_and_pays_for_its_oom():
    """Greedy's path is fixed by the 10% margins (the 1% repeat jitter cannot reorder it): default;
    bf16; micro-batch 1 then 4 (moves to 4); the patch (the optimum, trial 5); a second pass tries fp32
    (OOM, trial 6) and micro-batch 1 and 2 with the patch, then stops: 8 trials."""
    table = synthetic_table()
    short, full = replay(table, "greedy", seed=0, budgets=(4, 10))
    assert full.trials == 8
    assert full.best_fraction == pytest.approx(1.0)
    assert full.reached_at == 5
    assert full.oom_s == OOM_COST and full.total_s == 7 * OK_COST + OOM_COST
    assert full.promoted and not full.false_promotion
    assert full.promoted_fraction == pytest.approx(1.0)
    # after 4 trials: bf16 at micro-batch 4 without the patch is the best seen, 0.9 of the optimum
    assert short.trials == 4 and short.reached_at is None and short.oom_s == 0.0
    assert short.best_fraction == pytest.approx(0.9)


def test_a_table_survives_json_and_a_broken_one_names_the_key():
    table = synthetic_table()
    again = from_json(json.loads(json.dumps(to_json(table))))
    assert again.runs == table.runs and again.configs == table.configs
    assert optimum(again) == optimum(table)
    data = to_json(table)
    del data["configs"][3]["runs"][0]["cost_s"]
    with pytest.raises(TableError, match=r"configs\[3\]\.runs\[0\]"):
        from_json(data, "t.json")
    partial = to_json(table)
    partial["configs"] = partial["configs"][:5]
    with pytest.raises(TableError, match="5 of the 12 configurations"):
        check_complete(from_json(partial), "t.json")


def test_a_fixtures_tables_from_two_machines_are_told_apart_by_their_file_names(tmp_path):
    # one fixture, a table per machine kind (AVX2 and AVX-512 bf16 measure different spaces): each table's
    # replay rows and section carry its file's stem, so neither overwrites the other's figures
    table = synthetic_table()
    for stem in ("synthetic", "synthetic-avx512"):
        save(table, tmp_path / f"{stem}.json")
    loaded = [load(tmp_path / f"{stem}.json") for stem in ("synthetic", "synthetic-avx512")]
    assert [t.label for t in loaded] == ["synthetic", "synthetic-avx512"]
    assert synthetic_table().label == "synthetic"  # not read from a file: the fixture's name
    rows = [r for t in loaded for r in replay(t, "greedy", seed=0, budgets=(10,))]
    assert [r.workload for r in rows] == ["synthetic", "synthetic-avx512"]
    text = render([(str(tmp_path / f"{t.label}.json"), t) for t in loaded], rows, ("greedy",), (10,), 1, 1.0, 1, "x")
    assert "### synthetic\n" in text and "### synthetic-avx512\n" in text


def test_steady_memory_survives_json_and_a_supplement_gives_the_defaults_runs_their_share():
    table = synthetic_table()
    other = {"dtype": "bf16", "micro_batch": 1, "fast_patch": False}
    table.add(other, Run(outcome="ok", step_time_s=0.7, peak_mem_bytes=2**30, cost_s=OK_COST, round=3,
                         steady_mem_bytes=0.75 * 2**30))
    again = from_json(json.loads(json.dumps(to_json(table))))
    assert again.runs == table.runs
    assert TableBench(table, seed=0).run(table.default()).steady_mem_bytes is None  # nothing measured, no supplement
    table.meta[SUPPLEMENT] = {"share": 0.8, "runs": [], "machine": {"cpu": "elsewhere"}}
    again = from_json(json.loads(json.dumps(to_json(table))))
    assert supplement_share(again) == 0.8
    bench = TableBench(again, seed=0)
    for _ in range(3):
        run = bench.run(again.default())
        assert run.steady_mem_bytes == pytest.approx(0.8 * run.peak_mem_bytes)
    assert {r.steady_mem_bytes for r in again.runs[key(other)]} == {None, 0.75 * 2**30}  # measured runs: as measured
    assert bench.run({"dtype": "fp32", "micro_batch": 1, "fast_patch": True}).steady_mem_bytes is None


def test_generated_sections_are_replaced_in_place_and_kept_when_the_page_is_rewritten():
    page = replace_section("# Benchmarks\n\nbody\n", "cost", "## Cost\n\nold")
    page = replace_section(page, "cost", "## Cost\n\nnew")
    assert page.count("## Cost") == 1 and "new" in page and "old" not in page
    rewritten = keep_marked(page, "# Benchmarks\n\nnew body\n")
    assert rewritten.startswith("# Benchmarks\n\nnew body") and "## Cost\n\nnew" in rewritten


def test_measurement_rounds_run_every_configuration_once_each_in_its_own_order():
    from benchmarks.measure_space import schedule

    configs = synthetic_table().design()
    plan = schedule(configs, 3, seed=0)
    rounds = [[c for r, c in plan if r == i] for i in range(3)]
    assert [r for r, _ in plan] == sorted(r for r, _ in plan)  # round by round
    assert all(sorted(map(str, rnd)) == sorted(map(str, configs)) for rnd in rounds)
    assert rounds[0] != rounds[1] != rounds[2]


def test_the_design_follows_the_machine_kind():
    # native bf16 (AVX-512 BF16 or AMX): dtype is measured, under tinygpt's own limit for that machine kind;
    # emulated: the thread count in dtype's place, still 160 points
    from benchmarks.measure_space import design_for

    native = design_for("tinygpt", {"flags": {"avx2": True, "avx512_bf16": True, "amx": False}})
    emulated = design_for("tinygpt", {"flags": {"avx2": True, "avx512_bf16": False, "amx": False}})
    assert "dtype" in native["knobs"] and "threads" not in native["knobs"] and native["memory_limit"] == "620MiB"
    assert "threads" in emulated["knobs"] and "dtype" not in emulated["knobs"] and emulated["memory_limit"] == "600MiB"
    assert "memory_limit_native_bf16" not in native and "memory_limit_native_bf16" not in emulated
    assert design_for("tinymoe", {"flags": {"amx": True}})["memory_limit"] == "700MiB"


@pytest.mark.parametrize("niceness,prefix", [(0, ""), (19, "nice -n 19 "), (-10, "nice -n -10 ")])
def test_a_measurement_records_the_niceness_it_really_ran_at(monkeypatch: pytest.MonkeyPatch, niceness: int,
                                                             prefix: str) -> None:
    from benchmarks import measure_space

    monkeypatch.setattr(measure_space.os, "nice", lambda inc: niceness + inc)
    assert measure_space.recorded_command("benchmarks.measure_space", ["tinymoe", "--workdir", "/tmp/w"]) == \
        f"{prefix}.venv/bin/python -m benchmarks.measure_space tinymoe --workdir /tmp/w"
