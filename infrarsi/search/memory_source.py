"""Which memory the memory model fits: the host's resident set, or the GPU's allocator.

The bot samples every trial's resident set itself (``TrialMetrics.peak_mem_bytes``)
and kills a trial at the contract's memory limit. On a GPU that is not the
memory that runs out: the device does, the job dies of its allocator's
out-of-memory error, and the host's peak says nothing about how close it came.
Every trial's interpreter carries the device memory reporter
(``bot/executors/witness/site``), so a run on GPUs records the allocator's peak
reservation, what it held across steps and what it could have grown to
(``device_*`` in ``TrialMetrics``). When a run has such readings the model
fits them against the device's capacity; otherwise the host's, against the
contract's limit, as before.

In device mode an ``ok`` trial's device peak is exact, a trial that ran out of
GPU memory is right-censored at the capacity (it wanted more than there was),
and a trial the bot killed at the host's limit feeds nothing (its device peak
was not reached; the feasibility model still sees it ran).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from infrarsi.trial_record import Outcome, TrialRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySource:
    """Where the memory model's observations and limit come from."""

    kind: Literal["host", "device"]
    limit: float | None  # bytes; None: no limit known (every candidate fits)

    def reading(self, record: TrialRecord) -> tuple[float, bool] | None:
        """``(bytes, censored)`` of one record, or None when it says nothing about this memory."""
        m = record.metrics
        if self.kind == "device":
            if record.outcome == Outcome.OOM and m.device_peak_censored:
                bounds = [b for b in (m.device_peak_mem_bytes, m.device_capacity_bytes, self.limit) if b]
                return (float(max(bounds)), True) if bounds else None
            if record.outcome == Outcome.OK and m.device_peak_mem_bytes:
                return float(m.device_peak_mem_bytes), False
            return None
        if record.outcome == Outcome.OOM or m.peak_mem_censored:
            c = censor_point(record, self.limit)
            return (c, True) if c is not None else None
        if record.outcome == Outcome.OK and m.peak_mem_bytes:
            return float(m.peak_mem_bytes), False
        return None

    def steady_share(self, record: TrialRecord) -> float | None:
        """What a clean ``ok`` trial held across steps over its peak, in this memory; None when not measured."""
        m = record.metrics
        if record.outcome != Outcome.OK:
            return None
        if self.kind == "device":
            peak, steady = m.device_peak_mem_bytes, m.device_steady_mem_bytes
        else:
            peak, steady = (None if m.peak_mem_censored else m.peak_mem_bytes), m.steady_mem_bytes
        return steady / peak if peak and steady else None


def censor_point(record: TrialRecord, memory_limit: float | None) -> float | None:
    """The least host peak a censored trial is known to reach, in bytes, or None if unknown."""
    bounds = [b for b in (record.metrics.peak_mem_bytes, record.memory_limit_bytes) if b]
    if record.outcome == Outcome.OOM and not record.memory_limit_bytes and memory_limit:
        bounds.append(memory_limit)
    return float(max(bounds)) if bounds else None


def on_device(record: TrialRecord) -> bool:
    """The record has a GPU reading the device model can use."""
    m = record.metrics
    return bool((record.outcome == Outcome.OK and m.device_peak_mem_bytes)
                or (record.outcome == Outcome.OOM and m.device_peak_censored))


def memory_source(records: Sequence[TrialRecord], *, host_limit: float | None,
                  device_limit: float | None = None) -> MemorySource:
    """The device's memory when any record has a GPU reading and the device's size is known, else the host's.

    The device's limit is the median capacity the trials reported (the device less what the CUDA context and
    other processes hold), else ``device_limit`` (the doctor's ``gpu_memory_bytes``). Without either (a job's own
    ``probe.memory`` on a machine the doctor found no GPU on) the host's model stays: device peaks against no
    limit would call every candidate safe."""
    if not any(on_device(r) for r in records):
        return MemorySource(kind="host", limit=host_limit)
    capacities = [r.metrics.device_capacity_bytes for r in records if r.metrics.device_capacity_bytes]
    limit = float(np.median(capacities)) if capacities else device_limit
    if limit is None:
        return MemorySource(kind="host", limit=host_limit)
    return MemorySource(kind="device", limit=limit)
