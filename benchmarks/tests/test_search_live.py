"""The live confirmation's bookkeeping (benchmarks/search_live.py): a killed live run resumes from its
journal without repeating a trial, a journal from another run is refused, and the replay band it is
judged against is the replay's p10-p90.

The live trials themselves are ``infrarsi trial`` (``benchmarks.measure_space.trial``, exercised by the
measurement); here the runner answers from the synthetic table of ``benchmarks/tests/tables.py``, counting
the calls, so that what is checked is which calls reach it."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from benchmarks.search_live import Journal, live_method, main, replay_band, replay_median
from benchmarks.search_table import replay
from benchmarks.space_table import TableBench, TableError
from benchmarks.tests.tables import synthetic_table


def _runner(calls: list[dict], table=None):
    bench = TableBench(table or synthetic_table(), seed=3)

    def run(config):
        calls.append(dict(config))
        return bench.run(config)
    return run


def test_a_killed_live_run_resumes_from_its_journal_without_repeating_a_trial(tmp_path: Path) -> None:
    table, path = synthetic_table(), tmp_path / "live.jsonl"
    first: list[dict] = []
    row, _ = live_method(table, "greedy", 6, 0, _runner(first), Journal.open(path), lambda _: None)
    assert 6 <= len(first) == len(path.read_text().splitlines())  # every search trial and verification rerun
    again: list[dict] = []
    row2, _ = live_method(table, "greedy", 6, 0, _runner(again), Journal.open(path), lambda _: None)
    assert again == []  # all answered by the journal
    assert row2 == row
    # a run cut short: the journal keeps its first half; the rest is run, once
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n")
    rest: list[dict] = []
    row3, _ = live_method(table, "greedy", 6, 0, _runner(rest), Journal.open(path), lambda _: None)
    assert len(rest) == len(first) - 3 and row3.best_fraction == row.best_fraction


def test_verification_pairs_can_be_capped_and_the_cap_is_checked(tmp_path: Path, capsys) -> None:
    # live reruns are real trials: --max-pairs caps each verified candidate's pairs (best found is unchanged)
    noisy = synthetic_table()
    for runs in noisy.runs.values():  # 20% run-to-run noise: the replay's rule asks for more than 4 pairs
        for i, r in enumerate(runs):
            if r.step_time_s:
                runs[i] = replace(r, step_time_s=r.step_time_s * (0.8, 1.0, 1.25)[i])
    full: list[dict] = []
    row, _ = live_method(noisy, "random", 6, 0, _runner(full, noisy), Journal.open(tmp_path / "a.jsonl"),
                         lambda _: None)
    capped: list[dict] = []
    row4, _ = live_method(noisy, "random", 6, 0, _runner(capped, noisy), Journal.open(tmp_path / "b.jsonl"),
                          lambda _: None, max_pairs=4)
    assert len(capped) < len(full) and row4.best_fraction == row.best_fraction
    assert len(capped) <= 6 + 3 * 4 * 2
    with pytest.raises(SystemExit):
        main(["t.json", "--max-pairs", "2"])
    assert "--max-pairs: between 4" in capsys.readouterr().err


def test_a_journal_from_another_run_is_refused_by_name(tmp_path: Path) -> None:
    table, path = synthetic_table(), tmp_path / "live.jsonl"
    live_method(table, "greedy", 4, 0, _runner([]), Journal.open(path), lambda _: None)
    # greedy's trials filed under random's name, as a journal of another seed or method would read
    with pytest.raises(TableError, match=r"live.jsonl: random@1/search call \d+ was .*, now .*another table, seed"):
        live_method(table, "random", 4, 1, _runner([]), Journal(path=path, done={
            ("random@1/search", i): v for (s, i), v in Journal.open(path).done.items() if s == "greedy/search"}),
            lambda _: None)
    path.write_text("not json\n")
    with pytest.raises(TableError, match=r"live.jsonl:1: not a journal line"):
        Journal.open(path)


def test_the_band_is_the_replay_p10_to_p90_of_the_same_method_and_budget() -> None:
    table = synthetic_table()
    rows = [asdict(r) for s in range(10) for r in replay(table, "random", s, (4,))]
    band = replay_band(rows, "synthetic", "random", 4)
    best = sorted(r["best_fraction"] for r in rows)
    assert band is not None and best[0] <= band[0] <= band[1] <= best[-1]
    assert band[0] <= replay_median(rows, "synthetic", "random", 4) <= band[1]
    assert replay_band(rows, "synthetic", "greedy", 4) is None


def test_a_live_check_on_another_machine_is_refused_naming_what_differs(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.search_live import main
    from benchmarks.space_table import save

    table = synthetic_table()
    table.machine = {"cpu": "Elsewhere CPU", "cores": 64, "flags": {"avx2": True, "avx512_bf16": False, "amx": True}}
    path = tmp_path / "t.json"
    save(table, path)
    assert main([str(path), "--journal", str(tmp_path / "j.jsonl"), "--replay", str(tmp_path / "none.json")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: measured on Elsewhere CPU, 64 cores (avx2 yes, avx512_bf16 no, amx yes), "
                          "this is ") and err.endswith("a live check belongs on the table's machine")
    assert "\n" not in err


def test_the_section_says_how_this_machines_times_compare_with_the_tables(tmp_path: Path) -> None:
    """Seen on 2026-12-05: a second live run two days after the table, on another host of the same CPU kind,
    ran fp32 configurations at 0.79x the table's times and bf16 at 1.00x; what a method measured fastest moved."""
    from benchmarks.search_live import drift
    from benchmarks.space_table import Run

    table = synthetic_table()
    journal = Journal.open(tmp_path / "live.jsonl")
    for i, (dtype, mb, p) in enumerate([(d, m, p) for d in ("fp32", "bf16") for m in (1, 2) for p in (False, True)]):
        config = {"dtype": dtype, "micro_batch": mb, "fast_patch": p}
        base = {"fp32": 1.0, "bf16": 0.6}[dtype] * {1: 1.1, 2: 1.0}[mb] * (0.9 if p else 1.0)
        today = base * (0.8 if dtype == "fp32" else 1.0)  # fp32 runs faster today
        for k in range(3):
            journal.add("m/search", 3 * i + k, config, Run(outcome="ok", step_time_s=today, peak_mem_bytes=2**30,
                                                            cost_s=1.0, round=-1))
    journal.add("m/search", 99, {"dtype": "fp32", "micro_batch": 4, "fast_patch": False},  # an OOM: not compared
                Run(outcome="oom", step_time_s=None, peak_mem_bytes=3 * 2**30, censored=True, cost_s=1.0, round=-1))
    line = drift(table, journal)
    assert line.startswith("Live against the table, over the 24 live trials of configurations the table ran ok")
    assert "furthest from that: `dtype=fp32` 0.80x (12 trials), `dtype=bf16` 1.00x (12 trials)" in line
    assert drift(table, Journal.open(tmp_path / "empty.jsonl")) == ""


def test_a_table_that_recorded_its_cpu_generation_is_checked_against_this_ones(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.measure_space import machine_fingerprint
    from benchmarks.search_live import main
    from benchmarks.space_table import save

    here = machine_fingerprint()
    table = synthetic_table()
    table.machine = {**here, "cpu_family_model": "1/2"}
    path = tmp_path / "t.json"
    save(table, path)
    assert main([str(path), "--journal", str(tmp_path / "j.jsonl"), "--replay", str(tmp_path / "none.json")]) != 0
    err = capsys.readouterr().err.strip()
    assert f"measured on {here['cpu']} family/model 1/2, " in err and "a live check belongs on the table's machine" in err


def test_a_second_seed_has_its_own_streams_and_the_wall_is_what_its_trials_cost(tmp_path: Path) -> None:
    from benchmarks.search_live import stream

    table, path = synthetic_table(), tmp_path / "live.jsonl"
    journal = Journal.open(path)
    _, wall0 = live_method(table, "random", 4, 0, _runner([]), journal, lambda _: None)
    _, wall1 = live_method(table, "random", 4, 1, _runner([]), journal, lambda _: None)
    names = {s for s, _ in journal.done}
    assert {stream("random", 0, "search"), stream("random", 1, "search")} <= names
    assert stream("random", 0, "search") == "random/search" and stream("random", 1, "verify") == "random@1/verify"
    own = sum(run.cost_s for (s, _), (_, run) in journal.done.items() if s.startswith("random@1/"))
    assert wall1 == pytest.approx(own) and wall0 > 0
    # resumed from the journal, a run states the same cost (no trial ran this time)
    again: list[dict] = []
    assert live_method(table, "random", 4, 1, _runner(again), Journal.open(path), lambda _: None)[1] == wall1
    assert again == []


def test_the_replay_of_a_live_runs_own_seed_holds_what_that_seed_can_find(tmp_path: Path) -> None:
    """Random's choices do not depend on what it measures: its seed fixes the configurations it tries, and the
    band for that seed can reach no higher than the truly best of them (seen on the AVX-512 table: seed 0 tries
    nothing above 0.76 of the optimum, under random's p10 over seeds, 0.778)."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.search import ALL_METHODS
    from benchmarks.search_live import seed_band
    from benchmarks.search_tuners import play
    from benchmarks.space_table import optimum, save, true_time

    table, path = synthetic_table(), tmp_path / "t.json"
    save(table, path)
    tried = play(ALL_METHODS["random"], TableBench(table, 0), 4, 5)
    ceiling = max(optimum(table)[1] / true_time(table, t.config) for t in tried if t.outcome == "ok")
    with ThreadPoolExecutor(2) as pool:
        low, high = seed_band(path, "random", 5, 4, 8, pool)
    assert low <= high <= ceiling + 1e-9
    # the live run of that seed, measured with one more draw of the noise, lands in it or at its edge
    row, _ = live_method(table, "random", 4, 5, _runner([]), Journal.open(tmp_path / "j.jsonl"), lambda _: None)
    assert row.best_fraction <= ceiling + 1e-9


def test_the_section_has_a_row_per_method_and_seed_and_counts_both_bands() -> None:
    from benchmarks.search import Row
    from benchmarks.search_live import Live, render

    def live(method: str, seed: int, best: float, band: tuple, own: tuple) -> Live:
        row = Row(method=method, workload="synthetic", cluster="live", seed=seed, budget=20, trials=20,
                  best_fraction=best, reached_at=None, oom_s=0.0, crash_s=0.0, total_s=60.0, promoted_fraction=best,
                  promoted=True, false_promotion=False, noise_pick=False)
        return Live(row=row, band=band, wall_s=60.0, replay_median=0.9, seed_band=own)

    text = render(synthetic_table(), [live("random", 0, 0.76, (0.78, 1.0), (0.70, 0.76)),
                             live("random", 1, 0.95, (0.78, 1.0), (0.80, 0.96))], 20, "cmd", "replay.json", draws=30)
    assert "| random | 0 | 0.760 | 0.780–1.000 | **no** | 0.700–0.760 | yes |" in text
    assert "| random | 1 | 0.950 | 0.780–1.000 | yes | 0.800–0.960 | yes |" in text
    assert "once per seed (0, 1)" in text and "against 30 draws of the table's noise" in text
    assert "1 of 2 live runs landed inside the replay's p10–p90 over seeds" in text
    assert "2 of 2 inside the replay of their own seed" in text
