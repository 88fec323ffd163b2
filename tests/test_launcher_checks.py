"""Parallel layouts the launcher rejects before the first step are left out of the search, from the world size."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from infrarsi.search.blame import Judgements
from infrarsi.parallel.launcher_checks import launcher_constraints
from infrarsi.parallel.roles import find_roles, fixed_global_batch
from bot.stages.run.search import _space
from infrarsi.contract.model import Constraint, Knob
from simlab.cluster import SimulatedJob
from infrarsi.trial_record import Candidate

TP = Knob(name="tensor_model_parallel_size", kind="int", default=1, values=(1, 2, 4, 8),
          flag="--tensor-model-parallel-size")
PP = Knob(name="pp", kind="int", default=1, values=(1, 2, 4), flag="--pipeline-model-parallel-size")
EP = Knob(name="ep", kind="int", default=1, values=(1, 2, 4, 8))
VPP = Knob(name="vpp", kind="int", default=1, values=(1, 2))
MB = Knob(name="mbs", kind="int", default=1, values=(1, 2, 4, 8), flag="--micro-batch-size")


def _forbidden(constraints: tuple[Constraint, ...]) -> set[tuple[tuple[str, object], ...]]:
    return {c.when for c in constraints}


def test_on_eight_ranks_the_layouts_megatron_rejects_are_forbidden_by_their_own_knobs() -> None:
    out = launcher_constraints([TP, PP, EP, VPP], 8)
    forbidden = _forbidden(out)
    tp = TP.name
    assert ((tp, 8), ("pp", 2)) in forbidden and ((tp, 4), ("pp", 4)) in forbidden
    assert ((tp, 4), ("pp", 2)) not in forbidden  # 8 ranks: tp 4 x pp 2 is the whole world
    assert ((tp, 2), ("pp", 2), ("ep", 4)) in forbidden  # dp = 2 experts' ranks for 4 expert groups
    assert ((tp, 1), ("pp", 1), ("ep", 8)) not in forbidden
    assert (("pp", 1), ("vpp", 2)) in forbidden
    assert all(c.kind == "forbid" and c.reason for c in out)
    assert "not divisible" in next(c.reason for c in out if c.when == ((tp, 8), ("pp", 2)))


def test_nothing_without_known_ranks_or_when_the_baseline_itself_breaks_a_rule() -> None:
    assert launcher_constraints([TP, PP], None) == ()
    assert launcher_constraints([TP, PP], 1) == ()  # a local command may start its own ranks
    assert launcher_constraints([MB, VPP], 8) == ()  # no parallel degree to check
    wide = Knob(name="tp", kind="int", default=8, values=(1, 2, 4, 8))
    assert launcher_constraints([wide, PP], 4) == ()  # the baseline ran at tp 8: the job has more than 4 ranks


def test_a_fixed_global_batch_forbids_micro_batches_that_do_not_split_it() -> None:
    argv = ("python", "pretrain_gpt.py", "--global-batch-size", "16")
    assert fixed_global_batch([TP, MB], (), argv) == 16
    assert fixed_global_batch([TP], (), argv) is None  # no micro-batch knob: nothing to split
    divides = Constraint(kind="divides", knob="mbs", value=32, reason="global batch")
    assert fixed_global_batch([TP, MB], (divides,), argv) == 32
    forbidden = _forbidden(launcher_constraints([TP, PP, MB], 8, 16))
    # tp 1, pp 1: dp 8, so 16 sequences are 2 per replica: micro-batch 4 and 8 do not fit
    assert ((TP.name, 1), ("pp", 1), ("mbs", 4)) in forbidden
    assert ((TP.name, 1), ("pp", 1), ("mbs", 2)) not in forbidden
    assert ((TP.name, 8), ("pp", 1), ("mbs", 8)) not in forbidden  # dp 1: 16 = 2 x 8


def test_roles_come_from_the_name_or_the_flag_and_override_leaf() -> None:
    hydra = Knob(name="model_pp", kind="int", default=1, values=(1, 2), override="model.pipeline_model_parallel_size")
    roles = find_roles([TP, hydra, MB])
    assert roles["tp"] == TP.name and roles["pp"] == "model_pp" and roles["micro_batch"] == "mbs"
    assert roles["ep"] is None and roles["vpp"] is None


def test_the_checks_agree_with_the_simulators_launcher_rules() -> None:
    """Every layout of tp, pp, ep, vpp and micro-batch on mixtral-8x7b / two H100 nodes: the checks forbid it
    exactly when the simulator crashes it for the world size, the expert groups, virtual stages or the batch."""
    job = SimulatedJob("mixtral-8x7b", "h100-2x8")
    dims = {d.name: d for d in job.space.dimensions}
    knobs = [Knob(name=n, kind="int", default=1, values=tuple(dims[n].values)) for n in ("tp", "pp", "ep", "vpp")]
    knobs.append(Knob(name="micro_batch", kind="int", default=1, values=tuple(dims["micro_batch"].values)))
    constraints = launcher_constraints(knobs, job.cluster.world_size, job.workload.global_batch)
    rules = {"world_size", "ep_experts", "vpp_needs_pp", "batch"}
    base = {**job.space.default(), "zero": 1}
    checked = 0
    for tp, pp, ep, vpp, mb in itertools.product(*(k.values for k in knobs)):
        config = {**base, "tp": tp, "pp": pp, "ep": ep, "vpp": vpp, "micro_batch": mb}
        values = {"tp": tp, "pp": pp, "ep": ep, "vpp": vpp, "micro_batch": mb}
        forbidden = not all(c.allows(values) for c in constraints)
        result = job.expected(config)
        crashed_by_rule = result.outcome == "crash" and any(_rule_message(r, result.reason) for r in rules)
        assert forbidden == crashed_by_rule, (values, result.outcome, result.reason)
        checked += 1
    assert checked == len(list(itertools.product(*(k.values for k in knobs)))) > 500


def _rule_message(rule: str, reason: str) -> bool:
    return {"world_size": "world size", "ep_experts": "expert-parallel size", "vpp_needs_pp": "virtual pipeline",
            "batch": "global batch size"}[rule] in reason


def test_the_run_stage_leaves_them_out_and_says_so() -> None:
    contract = SimpleNamespace(knobs=(TP, PP), constraints=(), launch=SimpleNamespace(world_size=8, ranks_per_node=8),
                               workload=SimpleNamespace(command=("python", "pretrain_gpt.py"), args=()))
    doctor = SimpleNamespace(peak_flops={}, fingerprint={}, work=None)
    events: list[dict] = []
    space = _space(contract, {}, Judgements(), doctor, events.append)  # type: ignore[arg-type]
    assert space.contains(Candidate.of({TP.name: 4, "pp": 2}))
    assert not space.contains(Candidate.of({TP.name: 8, "pp": 2}))
    [event] = events
    assert event["event"] == "launcher" and event["message"].startswith("launcher: 3 parallel layouts left out")
    assert "on 8 ranks" in event["message"]


@pytest.mark.parametrize("world", [2, 16])
def test_every_layout_left_is_one_the_world_can_hold(world: int) -> None:
    constraints = launcher_constraints([TP, PP], world)
    for tp, pp in itertools.product(TP.values or (), PP.values or ()):
        allowed = all(c.allows({TP.name: tp, "pp": pp}) for c in constraints)
        assert allowed == (world % (int(tp) * int(pp)) == 0)
