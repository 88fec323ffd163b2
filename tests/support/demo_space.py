"""The demo's search space: the knobs `infrarsi init` drafts for tinygpt and the catalog's patches."""

from __future__ import annotations

from bot.patching.catalog import CATALOG
from infrarsi.contract.model import Knob
from infrarsi.patches import PatchSpec
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

# The knobs `infrarsi init` drafts for the demo's tinygpt (fixtures/tinygpt/train.py's performance flags).
DEMO_KNOBS = (
    Knob(name="micro_batch", kind="int", default=2, values=(1, 2, 4, 8, 16), flag="--micro-batch"),
    Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype"),
    Knob(name="compile", kind="int", default=0, values=(0, 1), flag="--compile"),
    Knob(name="threads", kind="int", default=0, values=(0, 1, 2), flag="--threads"),
    Knob(name="optimizer", kind="categorical", default="adamw", values=("adamw", "adamw_foreach", "adamw_fused"),
         flag="--optimizer"),
    Knob(name="grad_ckpt", kind="int", default=0, values=(0, 1), flag="--grad-ckpt"),
)
PATCHES: tuple[PatchSpec, ...] = tuple(e.spec(("model.py",)) for e in CATALOG)
SPACE = SearchSpace.from_contract(DEMO_KNOBS, (), PATCHES)


def demo_record(no: int, c: Candidate) -> TrialRecord:
    values = c.knob_dict()
    t = 0.1 * (0.6 if values["dtype"] == "bf16" else 1.0) * (0.8 if c.patches else 1.0)
    return TrialRecord(run_id="p", trial_no=no, candidate=c, outcome=Outcome.OK,
                       metrics=TrialMetrics(step_time_s=t, step_times_s=(t,) * 4, peak_mem_bytes=2**28))
