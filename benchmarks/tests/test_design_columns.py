"""The engine's derived design columns on simulated jobs: with a column the engine predicts a layout it never ran
(group placement, the pipeline bubble, the sharding priors, the model-state bytes); without it, it misses.

They drive the engine through the tuner benchmark's bridge from a simulated job to a contract and records
(benchmarks/search_tuners.py); the columns' arithmetic has its own tests beside each module in tests/."""

from __future__ import annotations

import numpy as np

from benchmarks.search_tuners import engine_space, prediction_error, simulated_records, to_candidate, without_derived
from infrarsi.parallel.states_column import MODEL_STATES
from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.search.derived import PIPELINE_BUBBLE
from infrarsi.search.engine import SearchEngine
from infrarsi.search.space import SearchSpace
from simlab.cluster import SimulatedJob


def test_the_engine_predicts_experts_kept_in_a_node_from_runs_that_spread_them() -> None:
    """Simulated mixtral-8x7b on two H100 nodes: every measured layout with experts spread (tp = 8, ep = 2;
    tp = 4, ep = 4) sends the all-to-all over the network. tp = 4, ep = 2 keeps it on NVLink; per-knob
    slopes read the network's cost as a cost of ep and tp and miss it there."""
    job = SimulatedJob("mixtral-8x7b", "h100-2x8", seed=0)
    base = {**job.space.default(), "zero": 1, "recompute": "selective", "sequence_parallel": True,
            "flash_attention": True, "grouped_gemm": True, "micro_batch": 2}
    tried = [{**base, "tp": tp, "ep": ep, "pp": pp} for tp, ep, pp in
             ((8, 1, 2), (8, 2, 1), (4, 4, 1), (4, 1, 4), (8, 1, 1), (4, 1, 2))]
    records = simulated_records(job, tried)
    assert all(r.outcome.value == "ok" for r in records)
    target = {**base, "tp": 4, "ep": 2, "pp": 1}
    space = engine_space(job)
    plain = without_derived(space, "off_node:")
    assert len(plain.derived) < len(space.derived)
    errors = {label: prediction_error(s, job, records, target)
              for label, s in (("with", space), ("without", plain))}
    assert abs(errors["with"]) < 0.05 < abs(errors["without"]), errors  # 4.5% and 7.3% at the time of writing


def test_the_engine_extrapolates_to_fewer_micro_batches_with_the_column() -> None:
    """Simulated llama2-7b on four H100 nodes at tp = 8: trials at micro-batches 1 and 2 (32 to 64
    micro-batches per step, a small bubble) predict pp = 4 at micro-batch 8 (8 micro-batches, three idle
    slots in eleven). Per-knob slopes read the bubble as a cost of pp alone and miss it there."""
    job = SimulatedJob("llama2-7b", "h100-4x8", seed=0)
    dims = job.space.dimensions
    base = {**job.space.default(), "zero": 1, "recompute": "selective", "tp": 8}
    tried = [{**base, "pp": pp, "micro_batch": mb, "vpp": vpp} for pp in (2, 4) for mb in (1, 2) for vpp in (1, 2)]
    tried.append({**base, "pp": 1})
    records = simulated_records(job, tried)
    target = {**base, "pp": 4, "micro_batch": 8}
    truth = job.expected(target).step_time_s
    assert truth is not None
    space = engine_space(job)
    plain = SearchSpace.from_contract([a.knob for a in space.axes], space.constraints, list(space.patches.values()))
    assert PIPELINE_BUBBLE in space.feature_names and PIPELINE_BUBBLE not in plain.feature_names
    errors = {}
    for label, s in (("with", space), ("without", plain)):
        engine = SearchEngine(s, builtin_priors(s, job.cluster.world_size), memory_limit=job.cluster.usable_hbm_bytes,
                              seed=0)
        engine.observe(records)
        mu, _ = engine.models.time.predict(engine.models.design([to_candidate(target, dims)]))
        errors[label] = abs(float(np.exp(mu[0])) / truth - 1.0)
    assert errors["with"] < 0.04 < errors["without"], errors


def test_the_engine_predicts_a_lower_tp_under_zero_3_from_trials_at_tp_8() -> None:
    """Simulated llama2-70b on two H100 nodes: trials that ran at tp = 8 under ZeRO-3 say little about the
    states at tp = 2, which ZeRO-3 shards over the same 16 GPUs. Without the sharding priors the engine
    extrapolated "tp divides the states" and put the optimum (tp = 2) at twice its true peak."""
    job = SimulatedJob("llama2-70b", "h100-2x8", seed=0)
    space = engine_space(job)
    dims = job.space.dimensions
    base = job.space.default()
    tried = [{**base, "tp": 8, "micro_batch": mb, "sequence_parallel": sp, "flash_attention": fa}
             for mb in (1, 2, 4) for sp in (False, True) for fa in (False, True)]
    records = simulated_records(job, tried)
    target = {**base, "tp": 2, "micro_batch": 2, "sequence_parallel": True, "flash_attention": True}
    truth = job.expected(target).peak_mem_bytes
    errors = {}
    for label, world in (("with", job.cluster.world_size), ("without", None)):
        engine = SearchEngine(space, builtin_priors(space, world), memory_limit=job.cluster.usable_hbm_bytes, seed=0)
        engine.observe(records)
        models = engine.models
        mu, _ = models.memory.predict(models.design([to_candidate(target, dims)]))
        errors[label] = abs(float(np.exp(mu[0])) / truth - 1.0)
    assert errors["with"] < 0.25 < errors["without"], errors


def test_the_engine_predicts_the_states_of_an_unseen_stage_and_layout() -> None:
    """Simulated mixtral-8x7b on two H100 nodes: trials at ZeRO-2 with tp = 4, ep = 2 and at ZeRO-1 with
    tp = 8 predict ZeRO-1 at tp = 4, ep = 2 (the pair's optimum, 71 of 73.5 usable GiB)."""
    job = SimulatedJob("mixtral-8x7b", "h100-2x8", seed=0)
    base = {**job.space.default(), "sequence_parallel": True, "flash_attention": True, "fused_norm": True,
            "fused_cross_entropy": True, "grouped_gemm": True, "recompute": "none", "micro_batch": 2}
    tried = [{**base, "tp": 4, "ep": 2, "zero": 2}, {**base, "tp": 4, "ep": 2, "zero": 2, "micro_batch": 8,
                                                     "recompute": "full"},
             {**base, "tp": 8, "pp": 2, "zero": 1, "micro_batch": 4, "recompute": "selective"},
             {**base, "tp": 8, "ep": 2, "zero": 1, "micro_batch": 4, "recompute": "selective"},
             {**base, "tp": 2, "ep": 8, "zero": 1, "recompute": "selective", "micro_batch": 1},
             {**base, "tp": 8, "pp": 2, "zero": 0}]
    records = simulated_records(job, tried)
    assert all(r.outcome.value == "ok" for r in records)
    target = {**base, "tp": 4, "ep": 2, "zero": 1}
    space = engine_space(job)
    plain = without_derived(space, MODEL_STATES)
    assert len(plain.derived) < len(space.derived)
    errors = {label: prediction_error(s, job, records, target, memory=True)
              for label, s in (("with", space), ("without", plain))}
    assert abs(errors["with"]) < 0.02 < abs(errors["without"]), errors  # 0.8% and 3.7% at the time of writing
