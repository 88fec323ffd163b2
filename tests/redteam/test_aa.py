"""A/A with the witness on: the baseline judged against its own reference passes every invariant.

``REDTEAM_AA_RUNS`` fresh witnessed baseline trials (default 8 in the suite, to keep CI short;
``REDTEAM_AA_RUNS=50`` is the acceptance run of the same-computation issue), each held to
the invariants verification uses, against a reference and loss band built by
the doctor's functions from two other witnessed baseline runs and one bf16
run. No run is judged against itself. Every fifth run is followed by an
unwitnessed one, so the output also shows what the witness costs (printed,
never asserted: this machine's timings are not a benchmark).
"""

from __future__ import annotations

import os
import statistics

import pytest

from infrarsi.trial_record import Candidate
from infrarsi.verdict import trial_invariants
from tests.support.redteam.bench import Bench

pytestmark = pytest.mark.slow


def test_the_baseline_passes_every_invariant_against_itself(gpt_bench: Bench) -> None:
    runs = int(os.environ.get("REDTEAM_AA_RUNS", "8"))
    baseline = Candidate.of(gpt_bench.ctx.contract.defaults())
    failures = []
    witnessed, plain, counted, step_w, step_p = [], [], [], [], []
    for i in range(runs):
        record = gpt_bench.ctx.run("aa", baseline, witness=True)
        reference, _ = gpt_bench.references.for_candidate(baseline)
        broken = [c for c in trial_invariants(record, reference) if not c.ok]
        if broken:
            failures.append(broken)
        witnessed.append(record.metrics.wall_s)
        step_w.append(record.metrics.step_time_s or 0.0)
        counted.append((record.metrics.witness or {}).get("counted_s") or 0.0)
        if i % 5 == 4:
            other = gpt_bench.ctx.run("aa", baseline)
            plain.append(other.metrics.wall_s)
            step_p.append(other.metrics.step_time_s or 0.0)
    print(f"\nA/A: {runs - len(failures)} of {runs} baseline runs passed every invariant")
    if plain:
        med = statistics.median
        print(f"witness cost: wall {med(witnessed):.2f} s witnessed ({len(witnessed)} runs) vs {med(plain):.2f} s "
              f"unwitnessed ({len(plain)} runs), +{med(witnessed) - med(plain):.2f} s; counted step "
              f"{med(counted) * 1000:.0f} ms; measured step {med(step_w) * 1000:.1f} ms vs {med(step_p) * 1000:.1f} ms")
    assert not failures, failures
