"""Acquisition: constrained EI, batches without repeats, the pairing move, stopping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from infrarsi.contract.model import Constraint, Knob
from infrarsi.search.acquisition import (
    Incumbent,
    build_pool,
    expected_improvement,
    expected_remaining_improvement,
    log_expected_improvement,
    memory_savers,
    pair_with_savers,
    propose_batch,
    score,
)
from infrarsi.search.engine import SearchEngine
from infrarsi.search.features import Priors
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord
from tests.support.patches import patch

GiB = 2 ** 30
LIMIT = 10 * GiB


def test_expected_improvement_closed_form_and_tail() -> None:
    mu, sd, best = np.array([0.0, 0.5, -0.3, 2.0]), np.array([0.2, 0.3, 0.1, 0.5]), 0.1
    z = (best - mu) / sd
    exact = (best - mu) * norm.cdf(z) + sd * norm.pdf(z)
    np.testing.assert_allclose(expected_improvement(mu, sd, best), exact, rtol=1e-10)
    far = log_expected_improvement(np.array([5.0, 10.0, 50.0, 1e4]), np.full(4, 0.1), 0.0)
    assert np.isfinite(far).all() and (np.diff(far) < 0).all()  # still ranks where EI underflows
    rng = np.random.default_rng(0)
    draws = rng.normal(0.2, 0.3, 400_000)
    assert expected_improvement(np.array([0.2]), np.array([0.3]), 0.0)[0] == \
        pytest.approx(np.maximum(0.0 - draws, 0).mean(), rel=0.01)


def compile_engine(*patches) -> tuple[SearchEngine, Candidate]:
    """An engine over a ``compile`` knob with tight priors and ``patches``, and the space's baseline."""
    knobs = (Knob(name="compile", kind="bool", default=False, flag="--compile"),)
    space = SearchSpace.from_contract(knobs, (), patches)
    tight = Priors(time={"compile=True": (math.log(0.97), 0.05)}, memory={"compile=True": (0.0, 0.05)},
                   knob_time_sd=0.05, knob_memory_sd=0.05)
    return SearchEngine(space, tight, memory_limit=LIMIT, seed=0), space.baseline()


def pairing_engine() -> tuple[SearchEngine, dict[str, Candidate]]:
    """Baseline at 75% of the limit; ``fast`` halves step time but adds 60% memory; ``saver`` takes 40% off."""
    engine, base = compile_engine(patch("fast", t=0.5, m=1.6), patch("saver", t=1.05, m=0.6),
                                  patch("meh", t=0.98, m=1.0))
    engine.observe([TrialRecord(run_id="r", trial_no=0, candidate=base, outcome=Outcome.OK,
                                metrics=TrialMetrics(step_time_s=1.0, peak_mem_bytes=int(0.75 * LIMIT)),
                                memory_limit_bytes=LIMIT)])
    kd = base.knob_dict()
    return engine, {"base": base, "fast": Candidate.of(kd, ["fast"]), "pair": Candidate.of(kd, ["fast", "saver"]),
                    "saver": Candidate.of(kd, ["saver"])}


def test_prefers_a_candidate_that_fits() -> None:
    engine, c = pairing_engine()
    m = engine.models
    s = score(m, [c["fast"], c["pair"]], engine.incumbent())
    assert s.log_ei[0] > s.log_ei[1]  # alone, fast is the bigger speed-up...
    assert s.prob_fits[0] < 0.1 < 0.9 < s.prob_fits[1]  # ...but predicted to OOM
    assert s.log_score[1] > s.log_score[0]
    first = engine.next_batch(3)[0]
    assert first.candidate == c["pair"] and first.prob_fits > 0.9


def test_pairing_move_adds_the_memory_saver() -> None:
    engine, c = pairing_engine()
    m = engine.models
    savers = memory_savers(m, c["fast"])
    assert savers[0] == c["pair"]  # the biggest predicted saving first
    assert m.memory.price("patch:saver").ratio < 0.7 and m.memory.price("patch:saver").bytes_at_baseline < 0
    assert m.memory.price("patch:fast").ratio > 1.4
    assert c["pair"] in pair_with_savers(m, c["fast"])
    pool = build_pool(m, np.random.default_rng(0), tried=set(), incumbent=engine.incumbent())
    cand, origin, note = pool[c["pair"].digest()]
    assert origin == "pairing" and "+saver" in note and "fast" in note
    assert c["fast"].digest() in pool  # the speed-up alone is still scored, just ranked lower


def test_batch_is_distinct_and_untried() -> None:
    engine, c = pairing_engine()
    tried = {c["base"].digest(), c["pair"].digest()}
    batch = propose_batch(engine.models, 6, np.random.default_rng(1), tried=tried, incumbent=engine.incumbent())
    digests = [p.candidate.digest() for p in batch]
    assert len(digests) == len(set(digests)) == 6
    assert not set(digests) & tried
    assert all(engine.space.contains(p.candidate) for p in batch)
    everything = propose_batch(engine.models, 100, np.random.default_rng(1), tried=tried,
                               incumbent=engine.incumbent())
    n_points = len(engine.space.enumerate() or [])
    assert len(everything) == n_points - len(tried)  # exhausts the space, never repeats


def big_space() -> SearchSpace:
    knobs = (Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4, 8, 16, 32), flag="--mb"),
             Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16", "fp16"), flag="--dt"),
             Knob(name="compile", kind="bool", default=False, flag="--compile"),
             Knob(name="threads", kind="int", default=4, low=1, high=64, log=True, flag="--threads"))
    constraints = (Constraint(kind="divides", knob="micro_batch", value=16),
                   Constraint(kind="forbid", when=(("dtype", "fp16"), ("compile", True))))
    patches = [patch(f"p{i}", t=0.9 + 0.02 * i, m=1.1 - 0.05 * i) for i in range(8)]
    patches += [patch("ckpt", t=1.2, m=0.5), patch("fa", conflicts=("fb",)), patch("fb", conflicts=("fa",)),
                patch("dep", requires=("p0",))]
    return SearchSpace.from_contract(knobs, constraints, patches)


def test_large_space_proposals_are_valid() -> None:
    space = big_space()
    assert space.enumerate() is None  # sampled pool + local search path
    engine = SearchEngine(space, Priors(memory={"micro_batch": (0.4, 0.1)}), memory_limit=LIMIT, seed=3)
    rng = np.random.default_rng(3)
    records = []
    for i, cand in enumerate([space.baseline(), *space.sample(rng, 11)]):
        mb = cand.knob_dict()["micro_batch"]
        peak = 0.3 * LIMIT * mb ** 0.5
        outcome = Outcome.OK if peak < LIMIT else Outcome.OOM
        records.append(TrialRecord(run_id="r", trial_no=i, candidate=cand, outcome=outcome, memory_limit_bytes=LIMIT,
                                   metrics=TrialMetrics(step_time_s=1.0 / mb ** 0.3 if outcome == Outcome.OK else None,
                                                        peak_mem_bytes=int(min(peak, LIMIT)),
                                                        peak_mem_censored=outcome == Outcome.OOM)))
    engine.observe(records)
    batch = engine.next_batch(5)
    assert len(batch) == 5
    tried = {c.digest() for c in engine.tried()}
    assert len({p.candidate.digest() for p in batch}) == 5
    for p in batch:
        assert space.contains(p.candidate), space.violations(p.candidate)
        assert p.candidate.digest() not in tried
        assert 0 <= p.prob_fits <= 1 and 0 <= p.prob_ok <= 1 and p.score >= 0
    # deterministic for a given seed and journal
    again = SearchEngine(space, engine.priors, memory_limit=LIMIT, seed=3)
    again.observe(list(reversed(records)))
    assert [p.candidate for p in again.next_batch(5)] == [p.candidate for p in batch]


def test_stop_advice() -> None:
    engine, c = pairing_engine()
    advice = engine.stop_advice(0.02)
    assert not advice.should_stop and advice.relative_improvement > 0.3
    assert advice.candidate == c["pair"]
    # pretend the pair ran and was as fast as hoped; nothing left can beat it by 2%
    every = engine.space.enumerate() or []
    done = [TrialRecord(run_id="r", trial_no=i + 1, candidate=cand, outcome=Outcome.OK,
                        metrics=TrialMetrics(step_time_s=0.5 if cand == c["pair"] else 1.0))
            for i, cand in enumerate(every) if cand != c["base"]][:4]
    engine.observe(done)
    m = engine.models
    tried = {x.digest() for x in engine.tried()}
    inc = Incumbent(candidate=c["pair"], log_time=math.log(0.3))  # an incumbent far ahead of every prediction
    late = expected_remaining_improvement(m, np.random.default_rng(0), tried=tried, incumbent=inc, min_effect=0.02)
    assert late.should_stop and late.relative_improvement < 0.02
    engine.observe([TrialRecord(run_id="r", trial_no=100 + i, candidate=cand, outcome=Outcome.REJECTED)
                    for i, cand in enumerate(every)])
    exhausted = engine.stop_advice(0.02)
    assert exhausted.should_stop and exhausted.candidate is None
    assert engine.next_batch(4) == []


def test_before_anything_runs_the_next_pick_is_the_one_most_likely_to_fit() -> None:
    """The baseline OOMed and nothing has run: ``fast`` promises the most but is as big as the baseline,
    ``saver`` is slower and small. Until a configuration runs, the chance of running comes first
    (constrained BO's rule while no feasible point is known); EI then ranks only among the likeliest."""
    engine, base = compile_engine(patch("fast", t=0.3, m=1.0, conflicts=("saver",)),
                                  patch("saver", t=1.0, m=0.5, conflicts=("fast",)))
    engine.observe([TrialRecord(run_id="r", trial_no=0, candidate=base, outcome=Outcome.OOM,
                                metrics=TrialMetrics(peak_mem_bytes=LIMIT, peak_mem_censored=True),
                                memory_limit_bytes=LIMIT)])
    kd = base.knob_dict()
    s = score(engine.models, [Candidate.of(kd, ["fast"]), Candidate.of(kd, ["saver"])], engine.incumbent())
    assert s.log_ei[0] > s.log_ei[1] and s.prob_fits[0] < 0.5 < s.prob_fits[1]
    assert s.log_score[0] > s.log_score[1]  # EI x P(fit) alone would take the gamble
    first = engine.next_batch(1)[0]
    assert "saver" in first.candidate.patches and first.prob_fits > 0.9
