"""A dtype the device only emulates is left out of the search, with the doctor's figures as the reason."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bot.patching.catalog import CATALOG
from infrarsi.search.blame import Judgements
from bot.stages.run.search import _space
from infrarsi.contract.model import Knob
from infrarsi.contract.precision import PrecisionPolicy
from infrarsi.doctor import allowed_dtypes
from infrarsi.dtype_levers import (device_exclusions, emulated_dtypes, for_doctor, knob_dtypes, knob_value_dtype,
                                   patch_dtype, precision_exclusions)
from infrarsi.patches import Effect, PatchSpec
from infrarsi.trial_record import Candidate

AVX2 = {"fp32": 150e9, "bf16": 10e9}  # what the doctor measured on an AVX2-only EPYC
AMX = {"fp32": 150e9, "bf16": 900e9}
EFFECT = Effect(time_ratio=0.9, time_sigma=0.2, mem_ratio=1.0, mem_sigma=0.1, source="test")
GPU = {"fp32": 60e12, "bf16": 900e12, "fp16": 900e12, "tf32": 400e12}


def _patch(pid: str, title: str, decides: tuple[str, ...] = ("compute_dtype",), gpu_only: bool = False) -> PatchSpec:
    return PatchSpec(id=pid, title=title, rationale="", targets=("model.py::Model.forward",), effect=EFFECT,
                     kind="codemod", codemod=pid, decides=decides, gpu_only=gpu_only)


def test_only_a_dtype_measured_well_below_fp32_is_emulated() -> None:
    assert emulated_dtypes(AVX2) == pytest.approx({"bf16": 10 / 150})
    assert emulated_dtypes(AMX) == {} and emulated_dtypes(GPU) == {}
    assert emulated_dtypes({"fp32": 150e9, "bf16": 100e9}) == {}  # slower but not emulated: the search decides
    assert emulated_dtypes({"bf16": 1e9}) == {}  # no fp32 figure: nothing to compare with


@pytest.mark.parametrize(("knob", "value", "dtype"), [
    (Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16")), "bf16", "bf16"),
    (Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16")), "fp32", None),
    (Knob(name="bf16", kind="bool", default=False, flag="--bf16"), True, "bf16"),  # HF Trainer's switch
    (Knob(name="bf16", kind="bool", default=False, flag="--bf16"), False, None),
    (Knob(name="fp16", kind="bool", default=False, flag="--fp16"), True, "fp16"),
    (Knob(name="precision", kind="categorical", default="32-true",
          values=("32-true", "bf16-mixed", "16-mixed")), "bf16-mixed", "bf16"),  # Lightning
    (Knob(name="precision", kind="categorical", default="32-true",
          values=("32-true", "bf16-mixed", "16-mixed")), "16-mixed", "fp16"),
    (Knob(name="amp", kind="bool", default=False, flag="--amp"), True, None),  # says no dtype: stays in
    (Knob(name="trainer_precision", kind="categorical", default="fp32", values=("fp32", "bf16")), "bf16", "bf16"),
    (Knob(name="attn_impl", kind="categorical", default="eager", values=("eager", "bf16_kernel")), "bf16_kernel",
     None),  # decides no compute dtype
])
def test_a_setting_selects_a_dtype_only_where_it_decides_the_compute_dtype_and_names_it(knob, value, dtype) -> None:
    assert knob_value_dtype(knob, value) == dtype


def test_the_catalog_bf16_patches_are_recognised_and_no_other() -> None:
    specs = [_patch(e.codemod, e.title, e.decides) for e in CATALOG]
    assert {s.id for s in specs if patch_dtype(s) == "bf16"} >= {"autocast_bf16", "autocast_forward_bf16", "hf_bf16",
                                                                   "lightning_bf16_precision"}
    assert all(patch_dtype(s) in (None, "bf16", "fp16") for s in specs)
    assert patch_dtype(_patch("fused_gelu", "tanh GELU in one kernel", decides=())) is None


def test_on_an_emulating_device_the_space_holds_no_bf16_setting_but_keeps_the_baseline() -> None:
    knobs = (Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype"),
             Knob(name="micro_batch", kind="int", default=2, values=(1, 2, 4), flag="--micro-batch"))
    contract = SimpleNamespace(knobs=knobs, constraints=(), launch=SimpleNamespace(world_size=1, ranks_per_node=1),
                               workload=SimpleNamespace(command=("python", "train.py"), args=()))
    patches = {p.id: p for p in (_patch("autocast_forward_bf16", "bf16 autocast inside the model's forward"),
                                 _patch("fused_gelu", "tanh GELU", decides=()))}
    events: list[dict] = []
    doctor = SimpleNamespace(peak_flops=AVX2, fingerprint={"device": "gpu-less test", "executor": "local"}, work=None)

    space = _space(contract, patches, Judgements(), doctor, events.append)  # type: ignore[arg-type]
    base = {"dtype": "fp32", "micro_batch": 2}
    assert space.contains(space.baseline())
    assert space.contains(Candidate.of({**base, "micro_batch": 4}, ("fused_gelu",)))
    assert not space.contains(Candidate.of({**base, "dtype": "bf16"}))
    assert not space.contains(Candidate.of(base, ("autocast_forward_bf16",)))
    [event] = events
    assert event["event"] == "device" and "bf16 is emulated on this device" in event["message"]
    assert "knob dtype=bf16" in event["message"] and "patch autocast_forward_bf16" in event["message"]

    events.clear()
    space = _space(contract, patches, Judgements(), SimpleNamespace(peak_flops=AMX, fingerprint={}, work=None),
                   events.append)  # type: ignore[arg-type]
    assert space.contains(Candidate.of({**base, "dtype": "bf16"})) and not events
    assert space.contains(Candidate.of(base, ("autocast_forward_bf16",)))


LIGHTNING = Knob(name="precision", kind="categorical", default="32-true", values=("32-true", "bf16-mixed"),
                 flag="--trainer.precision")
HF_BF16 = Knob(name="bf16", kind="bool", default=False, flag="--bf16")
HYDRA = Knob(name="trainer_precision", kind="categorical", default="32", values=("32", "bf16-mixed"),
             override="trainer.precision")


@pytest.mark.parametrize("knob", [LIGHTNING, HF_BF16, HYDRA], ids=["lightning", "hf-switch", "hydra"])
def test_a_knob_that_offers_bf16_in_the_frameworks_spelling_lets_a_candidate_compute_in_bf16(knob: Knob) -> None:
    """The corpus's Lightning, HF Trainer and Hydra jobs: their bf16 candidates were judged invalid on the
    precision row ("the contract allows only float32") although the contract's own knob offered bf16."""
    assert knob_dtypes([knob]) == ("bfloat16",)
    contract = SimpleNamespace(knobs=(knob,), precision=PrecisionPolicy())
    assert allowed_dtypes(contract) == ("bfloat16",)  # type: ignore[arg-type]  # the baseline's own are added
    assert not precision_exclusions([_patch("autocast_forward_bf16", "bf16 autocast")], ("bfloat16", "float32"))


def test_a_patch_that_computes_in_a_dtype_the_contract_does_not_allow_is_left_out_with_the_way_to_allow_it() -> None:
    bf16 = _patch("autocast_forward_bf16", "bf16 autocast inside the model's forward")
    gelu = _patch("fused_gelu", "tanh GELU", decides=())
    left = precision_exclusions([bf16, gelu], ("float32",))
    assert left.patches == ("autocast_forward_bf16",)
    [note] = left.notes
    assert "allows matrix products in float32 only" in note
    assert '[precision] allow = ["float32", "bfloat16"]' in note, note
    assert not precision_exclusions([bf16, gelu], ())  # no witnessed reference: nothing says what is allowed

    knobs = (Knob(name="micro_batch", kind="int", default=2, values=(1, 2), flag="--micro-batch"),)
    contract = SimpleNamespace(knobs=knobs, constraints=(), launch=SimpleNamespace(world_size=1, ranks_per_node=1),
                               workload=SimpleNamespace(command=("python", "train.py"), args=()))
    doctor = SimpleNamespace(peak_flops=AMX, fingerprint={}, work=SimpleNamespace(allowed_dtypes=("float32",)))
    events: list[dict] = []
    space = _space(contract, {p.id: p for p in (bf16, gelu)}, Judgements(), doctor, events.append)  # type: ignore[arg-type]
    assert not space.contains(Candidate.of({"micro_batch": 2}, ("autocast_forward_bf16",)))
    assert space.contains(Candidate.of({"micro_batch": 2}, ("fused_gelu",)))
    assert any("allows matrix products in float32 only" in e["message"] for e in events)


def test_a_dtype_knob_whose_default_is_bf16_keeps_its_baseline() -> None:
    knob = Knob(name="dtype", kind="categorical", default="bf16", values=("fp32", "bf16"))
    assert not device_exclusions([knob], [], AVX2)


def test_on_a_cpu_the_gpu_only_patches_are_left_out_and_on_a_gpu_they_stay() -> None:
    flags = _patch("cuda_backend_flags", "TF32 matmul and cudnn.benchmark (GPU only)", decides=(), gpu_only=True)
    gelu = _patch("fused_gelu", "tanh GELU", decides=())
    cpu = device_exclusions([], [flags, gelu], AMX, "cpu")
    assert cpu.patches == ("cuda_backend_flags",) and "no GPU" in cpu.notes[0]
    assert not device_exclusions([], [flags, gelu], GPU, "cuda")


def test_a_probe_of_the_bots_machine_leaves_nothing_out_for_remote_runners() -> None:
    """Under Actions or Slurm the doctor's probe measured the bot's machine, not the trials' device."""
    flags = _patch("cuda_backend_flags", "TF32 matmul and cudnn.benchmark (GPU only)", decides=(), gpu_only=True)
    bf16 = Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"))
    local = for_doctor([bf16], [flags], {"device": "cpu", "executor": "local"}, AVX2)
    assert local.patches == ("cuda_backend_flags",) and len(local.constraints) == 1
    for executor in ("actions", "slurm"):
        assert not for_doctor([bf16], [flags], {"device": "cpu", "executor": executor}, AVX2)


def test_the_plausibility_ceiling_is_the_fastest_dtype_not_an_emulated_bf16() -> None:
    from bot.stages.run.verify import plausibility_ceiling

    assert plausibility_ceiling(AVX2) == AVX2["fp32"]  # bf16 emulated at 1/15: fp32 is the ceiling
    assert plausibility_ceiling(GPU) == GPU["bf16"] and plausibility_ceiling({}) is None
