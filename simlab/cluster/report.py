"""The table of ground truths, one row per catalogued (workload, cluster) pair.

``python -m simlab.cluster`` prints it as Markdown (the table in ``docs/simulator.md``).
"""

from __future__ import annotations

from simlab.cluster.knobs import DEFAULT, Value
from simlab.cluster.simulator import GroundTruth, SimulatedJob, catalog

_SHORT = {"micro_batch": "mb", "recompute": "rc", "sequence_parallel": "sp", "overlap_grad_reduce": "ogr",
          "overlap_param_gather": "opg", "bucket_mb": "bucket", "flash_attention": "flash",
          "fused_cross_entropy": "fce", "fused_norm": "fnorm", "grouped_gemm": "ggemm",
          "tp_comm_overlap": "tpov"}


def describe_config(config: dict[str, Value]) -> str:
    """Compact form: parallel sizes always, other knobs only where they differ from the default."""
    parts = [f"tp{config['tp']} pp{config['pp']}" + (f" ep{config['ep']}" if "ep" in config else "")
             + f" mb{config['micro_batch']} rc={config['recompute']} zero={config['zero']}"]
    for name, value in config.items():
        if name in ("tp", "pp", "ep", "micro_batch", "recompute", "zero") or value == DEFAULT[name]:
            continue
        short = _SHORT.get(name, name)
        parts.append(short if value is True else f"{short}={value}")
    return " ".join(parts)


def ground_truths() -> list[GroundTruth]:
    return [SimulatedJob(w, c).ground_truth() for w, c in catalog()]


def markdown_table(rows: list[GroundTruth] | None = None) -> str:
    rows = ground_truths() if rows is None else rows
    lines = ["| workload | cluster | default MFU | optimum MFU | optimum step (s) | optimum config | ties | "
             "space | ok | oom | crash |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in rows:
        default = f"{g.default_mfu:.1%}" if g.default_mfu is not None else g.default_outcome.upper()
        lines.append(f"| {g.workload} | {g.cluster} | {default} | {g.mfu:.1%} | {g.step_time_s:.2f} | "
                     f"{describe_config(g.config)} | {g.n_optimal} | {g.space_size:,} | {g.n_ok:,} | "
                     f"{g.n_oom:,} | {g.n_crash:,} |")
    return "\n".join(lines)
