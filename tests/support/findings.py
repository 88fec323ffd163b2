"""Builders of plausible findings, shared by the bank's tests and the search engine's.

A test helper, not shipped in the product: a new bank backend's test suite
imports it from here.
"""

from __future__ import annotations

from typing import Any

from infrarsi.bank.records import Effect, Finding, FindingOutcome, FrozenMap, hardware_fingerprint, workload_fingerprint
from infrarsi.trial_record import Candidate

H100 = hardware_fingerprint({"device": "cuda", "cpu_model": "AMD EPYC 9654", "cpu_count": 192,
                             "memory_bytes": 2 * 2**40, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
                             "gpu_memory_bytes": 80 * 2**30, "torch": "2.4.1", "cuda": "12.4"}, world_size=8)
A100 = hardware_fingerprint({**H100, "gpu_model": "NVIDIA A100-SXM4-80GB", "cpu_model": "AMD EPYC 7763",
                             "torch": "2.4.0", "cuda": "12.1"})
CPU = hardware_fingerprint({"device": "cpu", "cpu_model": "Intel Xeon", "cpu_count": 16, "memory_bytes": 2**37,
                            "gpu_count": 0, "torch": "2.4.1"}, world_size=1)


def dense(parameters: int = 1_300_000_000, **kw: Any) -> FrozenMap:
    return workload_fingerprint(**{"family": "dense", "parameters": parameters, "sequence_length": 2048,
                                   "global_batch": 512, "world_size": 8, **kw})


def moe(parameters: int = 8_000_000_000, **kw: Any) -> FrozenMap:
    return workload_fingerprint(**{"family": "moe", "parameters": parameters, "sequence_length": 4096,
                                   "global_batch": 256, "world_size": 8, "experts": 8, "top_k": 2, **kw})


def make_finding(n: int = 0, *, hardware: Any = H100, workload: Any = None, knobs: dict[str, Any] | None = None,
                 patches: tuple[str, ...] = (), time_ratio: float | None = 0.8,
                 outcome: FindingOutcome | str = FindingOutcome.PROMOTED, run_id: str = "run-1",
                 repo: str = "tinygpt", created_at: float = 1_700_000_000.0) -> Finding:
    """A finding whose candidate (and so id) depends on ``n`` unless ``knobs``/``patches`` are given."""
    cand = Candidate.of(knobs if knobs is not None else {"micro_batch": 2 ** (n % 6), "trial": n}, patches)
    ci = (time_ratio * 0.95, time_ratio * 1.05) if time_ratio is not None else (None, None)
    return Finding(hardware=hardware, workload=workload if workload is not None else dense(), candidate=cand,
                   effect=Effect(time_ratio=time_ratio, ci_low=ci[0], ci_high=ci[1], memory_ratio=1.0),
                   outcome=FindingOutcome(outcome), run_id=run_id, repo=repo, created_at=created_at + n)


def write_findings(bank_path: str, ids_path: str, worker: int, count: int, start: Any = None) -> None:
    """Add ``count`` findings one by one, appending each id to ``ids_path`` once its ``add`` returned.

    The body of the concurrency test's writer processes (importable, so it
    works with the ``spawn`` start method): whatever the file lists must be
    in the bank even if this process is killed at any instant.
    """
    from infrarsi.bank.store import SqliteBank

    bank = SqliteBank(bank_path)
    if start is not None:
        start.wait()
    with open(ids_path, "a", encoding="utf-8") as out:
        for i in range(count):
            finding = make_finding(worker * 100_000 + i, run_id=f"worker-{worker}")
            bank.add(finding)
            out.write(finding.id + "\n")
            out.flush()
    bank.close()
