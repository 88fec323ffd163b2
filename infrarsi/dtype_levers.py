"""Low-precision levers this device only emulates: measured by the doctor, left out of the search.

bf16 autocast is the largest single speedup on a GPU and on a CPU with AVX-512
bf16 or AMX, and a large *slowdown* on a CPU without them: PyTorch then runs
bf16 matrix products through a conversion path (measured on an AVX2-only EPYC:
bf16 matmuls at 1/15 of fp32's rate, a tinygpt step 14x slower). Trying such a
candidate tells the search nothing it could not know from the doctor's own
matmul probe, at several minutes a trial. So a dtype whose measured peak is
below :data:`EMULATED_BELOW` of fp32's is *emulated here*, and every setting
that selects it (a dtype knob's value, a bf16/fp16 switch, an autocast patch)
is left out of the search with the figures that justify it.

A setting that does not say which dtype it selects (an ``--amp`` switch, a model-
written patch whose text names none) stays in: it may pick a dtype that is fast.
A knob's default is never left out; it is the baseline.

On a device without a GPU, the catalog's GPU-only patches (TF32 and cuDNN flags,
pinned memory, an fp16 scaler: ``PatchSpec.gpu_only``) change nothing but
the source, so they are left out too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infrarsi.contract.model import Constraint, Knob, KnobValue
from infrarsi.decisions import knob_decides
from infrarsi.dtypes import LOW_PRECISION_SPELLINGS, TORCH_NAMES, low_precision_in
from infrarsi.patches import PatchSpec

#: A low-precision dtype whose best measured matmul rate is below this share of fp32's is emulated.
#: Native bf16/fp16 runs at 2-16x fp32 (tensor cores, AVX-512 bf16, AMX); emulation at 1/20-1/5. Half
#: of fp32 sits far from both, so a noisy probe on a shared machine cannot flip the verdict.
EMULATED_BELOW = 0.5



def emulated_dtypes(peaks: Mapping[str, float], *, below: float = EMULATED_BELOW) -> dict[str, float]:
    """Per low-precision dtype the doctor measured below ``below`` of fp32's rate, that ratio."""
    fp32 = peaks.get("fp32")
    if not fp32:
        return {}
    return {d: peaks[d] / fp32 for d in LOW_PRECISION_SPELLINGS if peaks.get(d) and peaks[d] / fp32 < below}


def knob_value_dtype(knob: Knob, value: KnobValue) -> str | None:
    """The compute dtype ``knob = value`` selects, where it says (None: it does not, or not a dtype knob)."""
    if "compute_dtype" not in knob_decides(knob):
        return None
    if isinstance(value, bool):  # --bf16 / --fp16 switches: the name says the dtype, True selects it
        return low_precision_in(knob.name) if value else None
    return low_precision_in(str(value))


def knob_choices(knob: Knob) -> tuple[KnobValue, ...]:
    """The values a knob offers the search (a bool knob's two, whether or not the contract lists them)."""
    return tuple(knob.values) if knob.values is not None else ((True, False) if knob.kind == "bool" else ())


def knob_dtypes(knobs: Sequence[Knob]) -> tuple[str, ...]:
    """Torch dtypes some knob's value selects for the compute (``--dtype bf16``, ``--bf16``, Lightning's
    ``precision=bf16-mixed``, a Hydra ``trainer.precision``): what the contract itself offers, and so allows
    a candidate's matrix products to run in (the precision invariant, :func:`infrarsi.doctor.allowed_dtypes`)."""
    found = {TORCH_NAMES[d] for knob in knobs for v in knob_choices(knob) if (d := knob_value_dtype(knob, v))}
    return tuple(sorted(found))


def precision_exclusions(patches: Sequence[PatchSpec], allowed: Sequence[str]) -> DeviceExclusions:
    """The patches that switch the compute to a dtype the contract does not allow (``allowed``: torch names,
    the doctor's witnessed reference's). Every candidate with one would end invalid on the precision row and
    the patch be judged invalid for a rule the contract could have stated: they are left out, and the note
    says how to allow the dtype (``[precision] allow``, or a dtype knob that offers it)."""
    if not allowed:
        return DeviceExclusions()  # no witnessed reference: nothing says what is allowed
    out = [spec.id for spec in patches if (d := patch_dtype(spec)) and TORCH_NAMES[d] not in allowed]
    if not out:
        return DeviceExclusions()
    wanted = sorted({TORCH_NAMES[d] for spec in patches if (d := patch_dtype(spec)) and spec.id in out})
    policy = ", ".join(f'"{d}"' for d in (*allowed, *wanted))
    return DeviceExclusions(patches=tuple(out), notes=(
        f"the contract allows matrix products in {', '.join(allowed)} only; left out of the search: "
        f"{', '.join(f'patch {p}' for p in out)} (a different numeric result is the user's call: "
        f"[precision] allow = [{policy}] in the contract allows it, docs/contract.md)",))


def patch_dtype(spec: PatchSpec) -> str | None:
    """The compute dtype a patch that decides ``compute_dtype`` selects, from its id or title."""
    if "compute_dtype" not in spec.decides:
        return None
    return low_precision_in(spec.id) or low_precision_in(spec.title)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceExclusions:
    """What the search leaves out on this device, and why, in one line per dtype."""

    constraints: tuple[Constraint, ...] = ()  # forbid knob=value
    patches: tuple[str, ...] = ()  # patch ids, each excluded alone
    notes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.constraints or self.patches)

    def plus(self, other: DeviceExclusions) -> DeviceExclusions:
        return DeviceExclusions(constraints=self.constraints + other.constraints,
                                patches=tuple(dict.fromkeys(self.patches + other.patches)),
                                notes=self.notes + other.notes)


#: Executors whose trials run on the machine the doctor's device probe measured. Under a scheduler or a CI
#: runner the probe describes the bot's machine, not the trials' (docs/github.md), so nothing is left out.
PROBED_WHERE_TRIALS_RUN = ("local", "torchrun")


def for_doctor(knobs: Sequence[Knob], patches: Sequence[PatchSpec],
               fingerprint: Mapping[str, object], peaks: Mapping[str, float]) -> DeviceExclusions:
    """:func:`device_exclusions` where the doctor's probe measured the trials' own device, else nothing."""
    if fingerprint.get("executor", "local") not in PROBED_WHERE_TRIALS_RUN:
        return DeviceExclusions()
    device = fingerprint.get("device")
    return device_exclusions(knobs, patches, peaks, device if isinstance(device, str) else None)


def device_exclusions(knobs: Sequence[Knob], patches: Sequence[PatchSpec],
                      peaks: Mapping[str, float], device: str | None = None) -> DeviceExclusions:
    """The settings that select a dtype this device emulates (:func:`emulated_dtypes` of the doctor's peaks),
    and on a ``device`` that is a CPU the GPU-only patches."""
    slow = emulated_dtypes(peaks)
    constraints: list[Constraint] = []
    patch_ids: list[str] = []
    notes: list[str] = []
    if device == "cpu":
        cpu_idle = [spec.id for spec in patches if spec.gpu_only]
        patch_ids += cpu_idle
        if cpu_idle:
            notes.append(f"this device has no GPU; GPU-only patches left out of the search: {', '.join(cpu_idle)}")
    for dtype, ratio in sorted(slow.items()):
        reason = (f"{dtype} matmuls measured at {peaks[dtype] / 1e9:.3g} GFLOP/s against fp32's "
                  f"{peaks['fp32'] / 1e9:.3g} ({ratio:.2g}x): {dtype} is emulated on this device")
        settings = []
        for knob in knobs:
            for value in knob_choices(knob):
                if value != knob.default and knob_value_dtype(knob, value) == dtype:
                    constraints.append(Constraint(kind="forbid", when=((knob.name, value),), reason=reason))
                    settings.append(f"knob {knob.name}={value}")
        for spec in patches:
            if patch_dtype(spec) == dtype:
                patch_ids.append(spec.id)
                settings.append(f"patch {spec.id}")
        if settings:
            notes.append(f"{reason}; left out of the search: {', '.join(settings)}")
    return DeviceExclusions(constraints=tuple(constraints), patches=tuple(patch_ids), notes=tuple(notes))
