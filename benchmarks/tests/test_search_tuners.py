"""The tuner benchmark's methods and harness (benchmarks/search_tuners.py, benchmarks/search.py).

Behaviour only, on small budgets: every method respects its budget, starts from
the default, is deterministic for a seed, and sees the same noise stream as the
others; the static checks agree with the simulator; the report is generated.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import search as bench
from benchmarks.search_tuners import (
    METHODS,
    engine_space,
    known_valid,
    Trial,
    play,
    random_configs,
    to_candidate,
    to_config,
)
from simlab.cluster import SimulatedJob

PAIR = ("llama2-7b", "h100-1x8")
MOE = ("mixtral-8x7b", "h100-2x8")
BUDGET = {"infrarsi": 4}  # the engine refits its models per trial: keep it short here


def _budget(name: str) -> int:
    return BUDGET.get(name, 12)


@pytest.mark.parametrize("name", list(METHODS))
def test_method_respects_budget_starts_from_default_and_is_deterministic(name):
    runs = [play(METHODS[name], SimulatedJob(*PAIR, seed=3), _budget(name), 3) for _ in range(2)]
    a, b = runs
    assert 1 <= len(a) <= _budget(name)
    assert a[0].config == SimulatedJob(*PAIR).space.default()
    assert [(t.config, t.outcome, t.step_time_s) for t in a] == [(t.config, t.outcome, t.step_time_s) for t in b]
    world = SimulatedJob(*PAIR).cluster.world_size
    assert all(known_valid(t.config, world) for t in a)  # nothing the launcher would reject was run


def test_every_method_sees_the_same_noise_stream():
    """Trial i of every method on seed s has the same noise factor exp(sigma Z_i)."""
    truth = SimulatedJob(*PAIR)
    factors = {}
    for name in ("random", "greedy", "optuna-tpe"):
        trials = play(METHODS[name], SimulatedJob(*PAIR, seed=5), 12, 5)
        factors[name] = {i: t.step_time_s / truth.expected(t.config).step_time_s
                         for i, t in enumerate(trials) if t.outcome == "ok"}
    common = set.intersection(*(set(f) for f in factors.values()))
    assert 0 in common and len(common) >= 3
    for i in common:
        values = [f[i] for f in factors.values()]
        assert max(values) == pytest.approx(min(values), rel=1e-12)


@pytest.mark.parametrize("pair", [PAIR, MOE])
def test_static_checks_are_sound_and_match_the_engine_constraints(pair):
    job = SimulatedJob(*pair)
    space = engine_space(job)
    dims = job.space.dimensions
    rng = np.random.default_rng(0)
    for _ in range(300):
        config = {d.name: d.values[int(rng.integers(len(d.values)))] for d in dims}
        ok = known_valid(config, job.cluster.world_size)
        cand = to_candidate(config, dims)
        assert space.contains(cand) == ok
        assert to_config(cand, dims) == config
        if not ok:  # every configuration the static checks reject really crashes
            assert job.expected(config).outcome == "crash"
    draws = random_configs(job, rng)
    assert all(known_valid(next(draws), job.cluster.world_size) for _ in range(50))


def test_verification_promotes_a_real_speedup_and_not_the_default_twin():
    w, c = bench.catalog()[0]
    assert (w.name, c.name) == PAIR
    truth = SimulatedJob(w, c)
    gt = truth.ground_truth()
    fast = Trial(config=gt.config, outcome="ok", step_time_s=gt.step_time_s, peak_mem_bytes=0.0, cost_s=1.0)
    row, verdicts = bench.score("x", [fast], 1, w, c, 0, truth)
    assert verdicts[0].promoted and row.promoted and not row.false_promotion
    assert row.best_fraction == pytest.approx(1.0) and row.reached_at == 1
    # a configuration equal to the default in truth (sequence parallelism is a no-op at tp = 1)
    twin = dict(gt.default_config, sequence_parallel=True)
    assert truth.expected(twin).step_time_s == pytest.approx(gt.default_step_time_s)
    slow = Trial(config=twin, outcome="ok", step_time_s=gt.default_step_time_s * 0.9, peak_mem_bytes=0.0,
                 cost_s=1.0)
    row, verdicts = bench.score("x", [slow], 1, w, c, 0, truth)
    assert not row.noise_pick
    assert not row.promoted or row.false_promotion  # promoting it would be a false promotion, and counted


def test_report_is_generated_by_the_command_and_re_renders_from_its_json(tmp_path):
    out, raw = tmp_path / "BENCHMARKS.md", tmp_path / "search.json"
    assert bench.main(["--pairs", "llama2-7b:h100-1x8", "--seeds", "2", "--budgets", "5", "10",
                       "--methods", "random", "greedy", "--no-transfer", "--out", str(out), "--json", str(raw)]) == 0
    text = out.read_text()
    assert ".venv/bin/python -m benchmarks.search --pairs llama2-7b:h100-1x8" in text  # as run, with its niceness
    assert "| random | 10 |" in text and "| greedy | 5 |" in text
    again = tmp_path / "again.md"
    assert bench.main(["--render-from", str(raw), "--out", str(again)]) == 0
    assert again.read_text() == text


def test_trace_prints_every_trial_with_the_engines_beliefs_and_leaves_the_engine_alone(capsys):
    from benchmarks import search_trace
    from infrarsi.search.engine import SearchEngine

    observe = SearchEngine.observe
    assert search_trace.main(["llama2-7b", "h100-1x8", "--seed", "1", "--budget", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    trials = [line for line in out if line[:3].strip().isdigit()]
    assert len(trials) == 4 and "(default)" in trials[0]
    assert all("P(fit)" in line for line in trials)
    assert out[-1].startswith("engine at the optimum:")
    assert SearchEngine.observe is observe
