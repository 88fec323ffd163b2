"""Memory model of the simulator against hand-computed values (ZeRO paper, Korthikanti et al. 2022)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simlab.cluster import SimulatedJob, cluster, workload
from simlab.cluster.cost import evaluate
from simlab.cluster.memory import MiB, layer_activation_sbh, memory
from simlab.cluster.rules import derive
from simlab.cluster.space import space_for
from simlab.cluster.workloads import Workload

#: A GPT-3-style block (GeLU MLP of width 4h, multi-head attention): Korthikanti's formulas hold exactly.
GPT = Workload(name="gpt-test", layers=8, hidden=2048, heads=16, kv_heads=16, ffn=8192, vocab=50304,
               seq_len=2048, global_batch=64, gated_mlp=False, source="test")
H100 = cluster("h100-1x8")


def _cols(w: Workload, c, **knobs):
    space = space_for(w, c)
    config = dict(space.default(), **knobs)
    return space.columns_of(config)


def test_llama7b_parameter_count_per_layer_by_hand():
    w = workload("llama2-7b")
    attn = 4 * 4096 * 4096
    mlp = 3 * 4096 * 11008
    dense, expert = w.mean_layer_params()
    assert dense == attn + mlp + 2 * 4096 and expert == 0
    assert w.total_params == 32 * (attn + mlp + 8192) + 2 * 32000 * 4096 + 4096


@pytest.mark.parametrize(("zero", "params", "grads", "optim"), [
    (0, 2.0, 2.0, 12.0),        # 16 bytes per parameter
    (1, 2.0, 2.0, 12.0 / 8),    # P_os:    4 + 12/Nd
    (2, 2.0, 2.0 / 8, 12.0 / 8),  # P_os+g:  2 + 14/Nd
    (3, 2.0 / 8, 2.0 / 8, 12.0 / 8),  # P_os+g+p: 16/Nd
])
def test_model_states_follow_the_zero_paper(zero, params, grads, optim):
    w = workload("llama2-7b")
    psi = 32 * 202_383_360 + 2 * 32000 * 4096  # parameters on the single stage (final norm aside)
    cols = _cols(w, H100, zero=zero, overlap_param_gather=False)
    mem = memory(cols, derive(cols, w, H100), w, H100)
    assert mem.params[0] == pytest.approx(params * psi)
    assert mem.grads[0] == pytest.approx(grads * psi)
    assert mem.optimizer[0] == pytest.approx(optim * psi)


def test_korthikanti_per_layer_activation_variants():
    s, h, a = GPT.seq_len, GPT.hidden, GPT.heads
    scores = 5 * a * s / h
    base = dict(fused_norm=True, flash_attention=False, micro_batch=1)

    def stored(**knobs):
        st, work = layer_activation_sbh(_cols(GPT, H100, **{**base, **knobs}), GPT)
        return float(st[0]), float(work[0])

    assert stored(tp=1, recompute="none")[0] == pytest.approx(34 + scores)                 # sbh(34 + 5as/h)
    assert stored(tp=4, recompute="none")[0] == pytest.approx(10 + 24 / 4 + scores / 4)   # tensor parallel
    assert stored(tp=4, recompute="none", sequence_parallel=True)[0] == pytest.approx((34 + scores) / 4)
    assert stored(tp=4, recompute="selective", sequence_parallel=True)[0] == pytest.approx(34 / 4)
    assert stored(tp=1, recompute="selective")[0] == pytest.approx(34)
    full_stored, full_working = stored(tp=4, recompute="full", sequence_parallel=True)
    assert full_stored == pytest.approx(2 / 4)           # only the layer input, split by SP
    assert full_working == pytest.approx((34 + scores) / 4)  # one layer re-run in the backward
    # unfused norms keep 4sbh more, flash attention drops the score term
    assert stored(tp=1, recompute="none", fused_norm=False)[0] == pytest.approx(38 + scores)
    assert stored(tp=1, recompute="none", flash_attention=True)[0] == pytest.approx(34)


def test_total_activations_single_stage_by_hand():
    s, b, h, L, V = GPT.seq_len, 2, GPT.hidden, GPT.layers, GPT.vocab
    cols = _cols(GPT, H100, tp=1, pp=1, micro_batch=2, recompute="none", flash_attention=True,
                 fused_norm=True, fused_cross_entropy=True)
    mem = memory(cols, derive(cols, GPT, H100), GPT, H100)
    sbh = s * b * h
    expected = sbh * 34 * L + (8 * s * b + sbh) + (s * b * V * 4 + 2 * sbh)  # layers + embedding + logits
    assert mem.activations[0] == pytest.approx(expected)


def test_pipeline_first_stage_holds_pp_microbatches_and_interleaving_penalty():
    s, b, h, L, V = GPT.seq_len, 1, GPT.hidden, GPT.layers, GPT.vocab
    sbh = s * b * h
    knobs = dict(tp=1, micro_batch=1, recompute="none", flash_attention=True, fused_norm=True, zero=1,
                 fused_cross_entropy=True)
    for pp, vpp, factor in [(2, 1, 1.0), (4, 1, 1.0), (2, 2, 1 + 1 / 4), (4, 2, 1 + 3 / 8)]:
        cols = _cols(GPT, H100, pp=pp, vpp=vpp, **knobs)
        d = derive(cols, GPT, H100)
        assert d.m[0] >= pp
        mem = memory(cols, d, GPT, H100)
        first = sbh * 34 * (L / pp) * pp * factor + (8 * s * b + sbh) * pp * factor
        last = sbh * 34 * (L / pp) * factor + (s * b * V * 4 + 2 * sbh)  # one micro-batch, plus the logits
        assert first > last
        assert mem.activations[0] == pytest.approx(first)


def test_zero3_and_buckets_add_buffers():
    w = workload("llama2-7b")
    layer = 202_383_360
    cols = _cols(w, H100, zero=3, bucket_mb=100, overlap_grad_reduce=True, overlap_param_gather=True)
    mem = memory(cols, derive(cols, w, H100), w, H100)
    assert mem.buffers[0] == pytest.approx(2 * 100 * MiB + 3 * 2 * layer)


def test_more_tp_reduces_per_gpu_parameter_memory():
    job = SimulatedJob("llama2-7b", "h100-1x8")
    # ZeRO-1 keeps whole bf16 parameters on every data-parallel rank, so tp is what divides them.
    params = [job.breakdown(dict(job.space.default(), tp=tp, zero=1))["mem_params_bytes"] for tp in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(params, params[1:]))
    assert params[0] / params[3] == pytest.approx(8.0)


def test_flash_attention_saves_activation_memory_and_time():
    job = SimulatedJob("llama2-7b", "h100-1x8")
    base = dict(job.space.default(), tp=8, sequence_parallel=True, recompute="none", zero=1)
    off = job.expected(dict(base, flash_attention=False))
    on = job.expected(dict(base, flash_attention=True))
    assert on.peak_mem_bytes < off.peak_mem_bytes
    assert on.outcome == off.outcome == "ok" and on.step_time_s < off.step_time_s


def test_recompute_trades_memory_for_time():
    job = SimulatedJob("llama2-7b", "h100-1x8")
    base = dict(job.space.default(), tp=2, sequence_parallel=True, zero=1, flash_attention=False)
    results = {rc: job.expected(dict(base, recompute=rc)) for rc in ("none", "selective", "full")}
    assert all(r.outcome == "ok" for r in results.values())
    mem = [results[rc].peak_mem_bytes for rc in ("none", "selective", "full")]
    time = [results[rc].step_time_s for rc in ("none", "selective", "full")]
    assert mem[0] > mem[1] > mem[2]
    assert time[0] < time[1] < time[2]


def test_oom_above_usable_hbm_and_not_below():
    w = workload("llama2-7b")
    space = space_for(w, H100)
    config = dict(space.default(), zero=1, recompute="none", flash_attention=True, micro_batch=2)
    need = float(evaluate(space.columns_of(config), w, H100).memory.total[0])
    roomy = dataclasses.replace(H100, hbm_bytes=(need + H100.reserve_bytes) / (1 - H100.frag_fraction) * 1.01)
    tight = dataclasses.replace(H100, hbm_bytes=(need + H100.reserve_bytes) / (1 - H100.frag_fraction) * 0.99)
    assert SimulatedJob(w, roomy).expected(config).outcome == "ok"
    job = SimulatedJob(w, tight)
    assert job.expected(config).outcome == "oom"
    assert job.expected(config).peak_mem_bytes == pytest.approx(need)
    measured = job.run(config)
    assert measured.outcome == "oom" and measured.step_time_s is None and measured.mfu is None
    assert measured.peak_mem_bytes == tight.hbm_bytes  # censored, as a real OOM is
    assert "out of memory" in measured.reason
    assert measured.cost_s == job.oom_charge_s * tight.world_size


def test_memory_is_positive_everywhere():
    for name in ("llama2-70b", "deepseek-moe-16b"):
        w = workload(name)
        space = space_for(w, H100)
        total = evaluate(space.grid(), w, H100).memory.total
        assert np.all(np.isfinite(total)) and np.all(total > 0)
