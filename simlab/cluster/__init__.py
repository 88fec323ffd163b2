"""A simulator of multi-node LLM training whose optimum is known, for comparing tuning methods.

Pure numpy: no torch, no subprocess, no network. Entry points::

    from simlab.cluster import SimulatedJob, catalog
    job = SimulatedJob("llama2-7b", "h100-1x8", seed=0)
    job.space.dimensions, job.space.default(), job.space.enumerate()
    job.run(config)            # noisy SimResult: outcome, step_time_s, peak_mem_bytes, mfu, reason, cost_s
    job.expected(config)       # noiseless
    job.ground_truth()         # optimum by exhaustive enumeration, and the default's MFU

Formulas, constants and their sources: ``docs/simulator.md``.
"""

from simlab.cluster.hardware import CLUSTERS, Cluster, cluster
from simlab.cluster.knobs import DEFAULT, DIMENSIONS, Dimension
from simlab.cluster.simulator import GroundTruth, SimResult, SimulatedJob, catalog
from simlab.cluster.space import Space, space_for
from simlab.cluster.workloads import WORKLOADS, Workload, workload

__all__ = [
    "CLUSTERS", "Cluster", "DEFAULT", "DIMENSIONS", "Dimension", "GroundTruth", "SimResult", "SimulatedJob",
    "Space", "WORKLOADS", "Workload", "catalog", "cluster", "space_for", "workload",
]
