"""``infrarsi report --png``: the report's three charts as PNG files, for people who read reports outside GitHub.

The same series as the Mermaid charts of ``report.md`` (:mod:`infrarsi.report.charts`): step time of
every trial in order with failed trials marked by outcome, the verification's baseline and candidate runs
pair by pair, peak memory against the limit with OOMs as censored marks (``≥``). matplotlib is an optional
dependency (``pip install 'infrarsi[png]'``); without it the command says so and exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.report.charts import memory_series
from infrarsi.report.model import Report

__all__ = ["PngError", "write_pngs"]

OUTCOME_COLOURS = {"ok": "tab:blue", "oom": "tab:red", "crash": "tab:orange", "timeout": "tab:purple",
                   "invalid": "tab:brown", "rejected": "tab:gray"}


class PngError(InfraRSIError):
    """PNG charts were asked for and cannot be drawn (matplotlib is not installed)."""

    exit_code = BAD_INPUT


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PngError("--png needs matplotlib, which is not installed: pip install 'infrarsi[png]' "
                       "(or pip install matplotlib), then rerun `infrarsi report --png`") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _step_times(plt: Any, report: Report, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4))
    nos = [t.trial_no for t in report.trials]
    ok = [(t.trial_no, (t.step_time_s or 0) * 1000) for t in report.trials if t.outcome == "ok" and t.step_time_s]
    ax.plot([n for n, _ in ok], [v for _, v in ok], "o-", color=OUTCOME_COLOURS["ok"], label="ok")
    floor = min((v for _, v in ok), default=1.0)
    for outcome in sorted({t.outcome for t in report.trials} - {"ok"}):
        xs = [t.trial_no for t in report.trials if t.outcome == outcome]
        ax.scatter(xs, [floor * 0.9] * len(xs), marker="x", color=OUTCOME_COLOURS.get(outcome, "black"),
                   label=f"{outcome} (no step time)")
    ax.set(title=f"Step time per trial, run {report.run_id}", xlabel="trial", ylabel="ms per step")
    if nos:
        ax.set_xticks(nos if len(nos) <= 40 else nos[:: max(1, len(nos) // 40)])
    ax.legend(loc="best", fontsize="small")
    path = out / "step_time.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _verification(plt: Any, report: Report, out: Path) -> Path | None:
    v = report.verification
    if v is None or not v.baseline_step_s:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    n = min(len(v.baseline_step_s), len(v.candidate_step_s))
    pairs = list(range(1, n + 1))
    ax.bar([p - 0.2 for p in pairs], [s * 1000 for s in v.baseline_step_s[:n]], width=0.4, label="baseline")
    ax.bar([p + 0.2 for p in pairs], [s * 1000 for s in v.candidate_step_s[:n]], width=0.4, label="candidate")
    ax.set(title=f"Verification: {v.speedup or 0:.2f}x, {v.verdict}", xlabel="pair (interleaved A/B)",
           ylabel="median ms per step", xticks=pairs)
    ax.legend()
    path = out / "verification.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _memory(plt: Any, report: Report, out: Path) -> Path | None:
    series = memory_series(report)
    if series is None:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    measured = [p for p in series.points if not p.censored and p.mib]
    censored = [p for p in series.points if p.censored]
    ax.scatter([p.trial_no for p in measured], [p.mib for p in measured], label="peak")
    if censored:
        ax.scatter([p.trial_no for p in censored], [p.mib for p in censored], marker="^",
                   color=OUTCOME_COLOURS["oom"], label="oom: at least (censored)")
    if series.limit_mib:
        ax.axhline(series.limit_mib, color="black", linestyle="--", label="limit")
    ax.set(title=f"Peak {series.what} per trial", xlabel="trial", ylabel="MiB")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="best", fontsize="small")
    path = out / "memory.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_pngs(report: Report, out: Path) -> list[Path]:
    """Draw the charts into ``out`` (created); returns the files written. :class:`PngError` without matplotlib."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = [_step_times(plt, report, out), _verification(plt, report, out), _memory(plt, report, out)]
    return [p for p in written if p is not None]
