"""A/A with the witness on: the baseline judged against its own reference passes every invariant.

``REDTEAM_AA_RUNS`` fresh witnessed baseline trials (default 50), each held to
the invariants verification uses, against a reference and loss band built by
the doctor's functions from two other witnessed baseline runs and one bf16
run. No run is judged against itself.
"""

from __future__ import annotations

import os

import pytest

from infrarsi.trial import Candidate
from infrarsi.verify import trial_invariants
from tests.redteam.bench import Bench

pytestmark = pytest.mark.slow


def test_the_baseline_passes_every_invariant_against_itself(gpt_bench: Bench) -> None:
    runs = int(os.environ.get("REDTEAM_AA_RUNS", "50"))
    baseline = Candidate.of(gpt_bench.ctx.contract.defaults())
    failures = []
    for _ in range(runs):
        record = gpt_bench.ctx.run("aa", baseline, witness=True)
        broken = [c for c in trial_invariants(record, gpt_bench.band, gpt_bench.reference) if not c.ok]
        if broken:
            failures.append(broken)
    print(f"\nA/A: {runs - len(failures)} of {runs} baseline runs passed every invariant")
    assert not failures, failures
