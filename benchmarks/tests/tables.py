"""A synthetic measured table with a known optimum and an OOM configuration, for the table and live tests."""

from __future__ import annotations

from benchmarks.space_table import Run, Table
from infrarsi.contract.model import Constraint, Knob
from infrarsi.patches import Effect, PatchSpec

OK_COST, OOM_COST = 10.0, 5.0


def synthetic_table() -> Table:
    """dtype x micro_batch x one patch: time = base[dtype] x mb factor x 0.9 with the patch; fp32 at
    micro-batch 4 runs out of memory. Repeats at 0.99, 1.00, 1.01 of the time: the mean is the time."""
    patch = PatchSpec(id="fast_patch", title="fast", rationale="test", targets=("model.py",), kind="codemod",
                      codemod="fast_patch", effect=Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0,
                                                          mem_sigma=0.05, source="test"))
    table = Table(fixture="synthetic", machine={"cpu": "test"}, memory_limit_bytes=2.0 * 2**30,
                  knobs=(Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16")),
                         Knob(name="micro_batch", kind="int", default=2, values=(1, 2, 4))),
                  constraints=(Constraint(kind="divides", knob="micro_batch", value=4),), patches=(patch,), repeats=3)
    base = {"fp32": 1.0, "bf16": 0.6}
    mbf = {1: 1.1, 2: 1.0, 4: 0.9}
    for dtype in base:
        for mb in mbf:
            for p in (False, True):
                config = {"dtype": dtype, "micro_batch": mb, "fast_patch": p}
                for i, jitter in enumerate((0.99, 1.0, 1.01)):
                    if dtype == "fp32" and mb == 4:
                        table.add(config, Run(outcome="oom", step_time_s=None, peak_mem_bytes=2.1 * 2**30,
                                              censored=True, cost_s=OOM_COST, round=i))
                    else:
                        t = base[dtype] * mbf[mb] * (0.9 if p else 1.0) * jitter
                        table.add(config, Run(outcome="ok", step_time_s=t, peak_mem_bytes=2**30, cost_s=OK_COST,
                                              round=i))
    return table
