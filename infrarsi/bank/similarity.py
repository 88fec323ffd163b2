"""How far a finding transfers: similarity of fingerprints, and the ranking of bank candidates.

Both similarities are weighted means of per-key closeness, so they lie in
``[0, 1]``, are symmetric, and are exactly 1 for identical fingerprints.

* Workloads of different families (dense vs. MoE) share nothing: the
  similarity is 0, whatever else matches. Sizes (parameters, sequence length,
  batch, ...) are compared on a log scale, because a 1B and a 2B model are as
  alike as a 10B and a 20B one.
* Hardware is dominated by the device kind and the GPU model: a knob that wins
  on an H100 says little about a CPU, something about an A100.

:func:`transfer` turns findings into candidates for a new run, ranked by
similarity x verified gain. Every transfer is a *prior*: it earns a candidate
a place in the first batch, never a promotion; the candidate is verified on
this machine like any other. Findings from other hardware get a lower weight
still (:data:`OTHER_HARDWARE_DISCOUNT`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from infrarsi.bank.records import FAILURE_OUTCOMES, Finding, FindingOutcome, Scalar
from infrarsi.trial_record import Candidate

#: Weight factor for findings made on other hardware (see :func:`same_hardware`).
OTHER_HARDWARE_DISCOUNT: float = 0.5
#: Transfers weighing less than this are dropped: too far away to be worth a trial.
MIN_WEIGHT: float = 0.05

_LN4 = math.log(4.0)
_LN10 = math.log(10.0)

# (key, weight, log-scale) -- a ratio of e**scale between two sizes gives closeness 1/e.
_WORKLOAD_SIZES: tuple[tuple[str, float, float], ...] = (
    ("parameters", 0.35, _LN10),
    ("sequence_length", 0.15, _LN4),
    ("global_batch", 0.15, _LN4),
    ("world_size", 0.10, _LN4),
    ("experts", 0.15, _LN4),
    ("top_k", 0.10, _LN4),
)
_HARDWARE_WEIGHTS: dict[str, float] = {
    "device": 0.30, "gpu_model": 0.30, "gpu_count": 0.10, "world_size": 0.05, "cpu_model": 0.05,
    "memory_bytes": 0.05, "torch": 0.10, "cuda": 0.05,
}


def closeness(a: Scalar, b: Scalar, *, scale: float = _LN4) -> float:
    """``exp(-|ln(a/b)| / scale)`` for two positive sizes; 1 if both unknown, 0.5 if one is."""
    if a is None and b is None:
        return 1.0
    if a is None or b is None:
        return 0.5
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool) and a > 0 and b > 0:
        return math.exp(-abs(math.log(a) - math.log(b)) / scale)  # symmetric to the last bit
    return 1.0 if a == b else 0.0


def _same(a: Scalar, b: Scalar) -> float:
    if isinstance(a, str) and isinstance(b, str):
        return 1.0 if a.strip().lower() == b.strip().lower() else 0.0
    return 1.0 if a == b else 0.0


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _gpu_model(a: Scalar, b: Scalar) -> float:
    """Same model 1; a related one ("H100 SXM" vs "H100 PCIe") up to 0.5 by shared name tokens."""
    if _same(a, b):
        return 1.0
    if isinstance(a, str) and isinstance(b, str):
        ta, tb = _tokens(a), _tokens(b)
        if ta and tb:
            return 0.5 * len(ta & tb) / len(ta | tb)
    return 0.0


def _version(a: Scalar, b: Scalar) -> float:
    """Same major.minor 1, same major 0.5: minor releases change kernels, majors change more."""
    if a is None and b is None:
        return 1.0
    if not isinstance(a, str) or not isinstance(b, str):
        return 0.0
    pa, pb = re.findall(r"\d+", a)[:2], re.findall(r"\d+", b)[:2]
    if pa and pa == pb:
        return 1.0
    return 0.5 if pa and pb and pa[0] == pb[0] else 0.0


def hardware_similarity(a: Mapping[str, Scalar], b: Mapping[str, Scalar]) -> float:
    """Similarity in [0, 1] of two hardware fingerprints; device kind and GPU model weigh most."""
    parts = {
        "device": _same(a.get("device"), b.get("device")),
        "gpu_model": _gpu_model(a.get("gpu_model"), b.get("gpu_model")),
        "gpu_count": closeness(a.get("gpu_count"), b.get("gpu_count")) if (a.get("gpu_count") or b.get("gpu_count"))
        else 1.0,  # 0 and None both mean "no GPU"
        "world_size": closeness(a.get("world_size"), b.get("world_size")),
        "cpu_model": _same(a.get("cpu_model"), b.get("cpu_model")),
        "memory_bytes": closeness(a.get("memory_bytes"), b.get("memory_bytes")),
        "torch": _version(a.get("torch"), b.get("torch")),
        "cuda": _version(a.get("cuda"), b.get("cuda")),
    }
    # Same summation order above and below: identical fingerprints give exactly 1.0.
    return _clamp(sum(_HARDWARE_WEIGHTS[k] * parts[k] for k in _HARDWARE_WEIGHTS) / sum(_HARDWARE_WEIGHTS.values()))


def same_hardware(a: Mapping[str, Scalar], b: Mapping[str, Scalar]) -> bool:
    """Same device kind, GPU model and GPU count (and CPU model on a CPU): results carry over best."""
    keys = ["device", "gpu_model"]
    if a.get("device") == "cpu" or b.get("device") == "cpu":
        keys.append("cpu_model")
    return all(_same(a.get(k), b.get(k)) == 1.0 for k in keys) and (a.get("gpu_count") or 0) == (b.get("gpu_count") or 0)


def workload_similarity(a: Mapping[str, Scalar], b: Mapping[str, Scalar]) -> float:
    """Similarity in [0, 1] of two workloads: 0 across families, else log-ratio closeness of sizes."""
    if _same(a.get("family"), b.get("family")) != 1.0:
        return 0.0
    total = sum(w for _, w, _ in _WORKLOAD_SIZES)
    return _clamp(sum(w * closeness(a.get(k), b.get(k), scale=s) for k, w, s in _WORKLOAD_SIZES) / total)


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


@dataclass(frozen=True, kw_only=True, slots=True)
class Transfer:
    """A candidate the bank suggests for a new run, and why.

    ``weight`` is what the search engine takes (``(candidate, weight)``
    pairs, see :func:`as_pairs`); ``score = weight x expected gain`` is what
    transfers are ranked by.
    """

    candidate: Candidate
    weight: float
    score: float
    time_ratio: float  # of the best supporting finding
    same_hardware: bool
    hardware_similarity: float
    workload_similarity: float
    finding_ids: tuple[str, ...]  # promoted findings behind this candidate, best first
    failures: int = 0  # similar findings where this candidate failed (each lowered the weight)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Support:
    finding: Finding
    weight: float
    hw: float
    wl: float
    same: bool


def finding_weight(finding: Finding, hardware: Mapping[str, Scalar], workload: Mapping[str, Scalar]) -> _Support:
    wl = workload_similarity(finding.workload, workload)
    hw = hardware_similarity(finding.hardware, hardware)
    same = same_hardware(finding.hardware, hardware)
    weight = wl * hw * (1.0 if same else OTHER_HARDWARE_DISCOUNT)
    return _Support(finding=finding, weight=weight, hw=hw, wl=wl, same=same)


def transfer(findings: Iterable[Finding], hardware: Mapping[str, Scalar], workload: Mapping[str, Scalar], *,
             top: int = 5, min_weight: float = MIN_WEIGHT) -> list[Transfer]:
    """The ``top`` candidates worth trying first on (``hardware``, ``workload``), best first.

    Per candidate, the promoted finding with the highest ``weight x gain``
    speaks for it; every similar failure (invalid, OOM, crash, timeout) of the
    same candidate multiplies its weight by ``1 - failure weight``, so an OOM
    on this very setup rules it out, and one on a far-away job barely counts.
    ``not_significant`` findings neither help nor hurt. The baseline is never
    a transfer.
    """
    support: dict[str, list[_Support]] = {}
    against: dict[str, list[_Support]] = {}
    candidates: dict[str, Candidate] = {}
    for finding in findings:
        if not finding.candidate.knobs and not finding.candidate.patches:
            continue
        s = finding_weight(finding, hardware, workload)
        if s.weight <= 0:
            continue
        key = finding.candidate.digest()
        candidates.setdefault(key, finding.candidate)
        if finding.outcome is FindingOutcome.PROMOTED and finding.effect.gain > 0:
            support.setdefault(key, []).append(s)
        elif finding.outcome in FAILURE_OUTCOMES:
            against.setdefault(key, []).append(s)
    out: list[Transfer] = []
    for key, rows in support.items():
        rows.sort(key=lambda r: (-r.weight * r.finding.effect.gain, r.finding.id))
        best = rows[0]
        penalty = math.prod(1.0 - f.weight for f in against.get(key, ()))
        weight = best.weight * penalty
        if weight < min_weight:
            continue
        out.append(Transfer(candidate=candidates[key], weight=weight, score=weight * best.finding.effect.gain,
                            time_ratio=best.finding.effect.time_ratio or 1.0, same_hardware=best.same,
                            hardware_similarity=best.hw, workload_similarity=best.wl,
                            finding_ids=tuple(r.finding.id for r in rows), failures=len(against.get(key, ()))))
    out.sort(key=lambda t: (-t.score, -t.weight, t.candidate.digest()))
    return out[:top]


def as_pairs(transfers: Sequence[Transfer]) -> list[tuple[Candidate, float]]:
    """``(candidate, weight)`` pairs, the form ``SearchEngine.initial_batch(bank_candidates=...)`` takes."""
    return [(t.candidate, t.weight) for t in transfers]
