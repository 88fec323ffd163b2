"""Mermaid charts of a report: what reviewers would rather look at than read (GitHub renders them in place).

Three ``xychart-beta`` charts, each a list of markdown lines (a fenced
``mermaid`` block and a caption):

- every trial's step time in trial order, failed trials at 0 and named by their
  outcome on the x-axis (``7 oom``);
- the verification's interleaved runs, baseline (bars) and candidate (line) pair by pair;
- every trial's peak memory against the limit (line); an OOM is censored: its
  bar stands at the limit and its label says ``≥`` (the real peak is at least that).

Pure: built from :class:`~infrarsi.report.model.Report` only. Numbers are plain
decimals and labels are quoted without quotes inside, as Mermaid's xychart
grammar requires (``tests/test_report_charts.py`` parses them with Mermaid itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infrarsi.report.model import Report, TrialRow, Verification

#: Trials shown per chart at most (the latest); a longer run's report.md table has every one.
MAX_TRIALS = 80


def _label(text: str) -> str:
    return '"' + text.replace('"', "'").replace("\n", " ") + '"'


def _num(v: float) -> str:
    return f"{v:.2f}"


def _block(title: str, labels: Sequence[str], y_title: str, series: Sequence[tuple[str, Sequence[float]]],
           caption: str) -> list[str]:
    lines = ["```mermaid", "xychart-beta", f"    title {_label(title)}",
             "    x-axis [" + ", ".join(_label(x) for x in labels) + "]", f"    y-axis {_label(y_title)}"]
    lines += [f"    {kind} [" + ", ".join(_num(v) for v in values) + "]" for kind, values in series]
    return lines + ["```", "", caption]


def _shown(trials: Sequence[TrialRow]) -> tuple[TrialRow, ...]:
    return tuple(trials[-MAX_TRIALS:])


def step_time_chart(report: Report) -> list[str]:
    """Step time of every trial in order; failed ones at 0, labelled by outcome. Empty without trials."""
    trials = _shown(report.trials)
    if not trials:
        return []
    labels = [str(t.trial_no) if t.outcome == "ok" else f"{t.trial_no} {t.outcome}" for t in trials]
    ms = [(t.step_time_s or 0.0) * 1000 if t.outcome == "ok" else 0.0 for t in trials]
    cut = f" (the last {len(trials)} of {len(report.trials)})" if len(trials) < len(report.trials) else ""
    return _block("Step time per trial, in order (ms)", labels, "ms per step", [("bar", ms)],
                  f"Every trial{cut} in the order it ran (doctor, search, verification); a failed trial has no "
                  "step time: its bar is 0 and its label names the outcome.")


def verification_chart(v: Verification) -> list[str]:
    """The interleaved A/B runs pair by pair: baseline bars, candidate line."""
    n = min(len(v.baseline_step_s), len(v.candidate_step_s))
    if n == 0:
        return []
    labels = [f"pair {i + 1}" for i in range(n)]
    return _block("Verification: median step time per run (ms)", labels, "ms per step",
                  [("bar", [s * 1000 for s in v.baseline_step_s[:n]]),
                   ("line", [s * 1000 for s in v.candidate_step_s[:n]])],
                  "Bars: the baseline's run of each pair; line: the candidate's run of the same pair "
                  "(interleaved, each from a fresh process).")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryPoint:
    trial_no: int
    outcome: str
    mib: float
    censored: bool  # an OOM: the real peak is at least ``mib``


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySeries:
    """Each trial's peak in the memory that runs out: the GPU's when the run has GPU readings, else the host's."""

    what: str  # "memory" or "GPU memory"
    limit_mib: float | None
    limit_text: str
    points: tuple[MemoryPoint, ...]


def memory_series(report: Report, trials: Sequence[TrialRow] | None = None) -> MemorySeries | None:
    rows = report.trials if trials is None else trials
    if any(t.gpu_peak_bytes or t.gpu_oom for t in rows):
        limit = report.gpu_capacity_bytes
        points = tuple(MemoryPoint(trial_no=t.trial_no, outcome=t.outcome, censored=t.gpu_oom,
                                   mib=max(t.gpu_peak_bytes or 0, (limit or 0) if t.gpu_oom else 0) / 2**20)
                       for t in rows)
        return MemorySeries(what="GPU memory", limit_mib=limit / 2**20 if limit else None, points=points,
                            limit_text="what the GPU's allocator could grow to")
    if not any(t.peak_mem_bytes for t in rows):
        return None
    limit = report.memory_limit_bytes
    points = tuple(MemoryPoint(trial_no=t.trial_no, outcome=t.outcome, censored=t.outcome == "oom",
                               mib=max(t.peak_mem_bytes or 0, (limit or 0) if t.outcome == "oom" else 0) / 2**20)
                   for t in rows)
    return MemorySeries(what="memory", limit_mib=limit / 2**20 if limit else None, points=points,
                        limit_text="the limit")


def memory_chart(report: Report) -> list[str]:
    """Peak memory of every trial against the limit; OOMs censored at the limit (labelled ``≥``). On a GPU
    the GPU's allocator peak against what it could grow to."""
    series = memory_series(report, _shown(report.trials))
    if series is None:
        return []
    labels = [f"{p.trial_no} oom ≥" if p.censored else str(p.trial_no) if p.outcome == "ok"
              else f"{p.trial_no} {p.outcome}" for p in series.points]
    bars: list[tuple[str, Sequence[float]]] = [("bar", [p.mib for p in series.points])]
    if series.limit_mib:
        bars.append(("line", [series.limit_mib] * len(series.points)))
    caption = (f"Bars: each trial's peak {series.what} (MiB); "
               + (f"line: {series.limit_text}, {series.limit_mib:,.0f} MiB; " if series.limit_mib
                  else "no memory limit in the contract; " if series.what == "memory" else "")
               + "an OOM is censored: its real peak is at least its bar (label `≥`), not a measurement.")
    return _block(f"Peak {series.what} per trial (MiB)", labels, "MiB", bars, caption)


def mermaid_blocks(markdown: str) -> list[str]:
    """The text of every fenced ``mermaid`` block in ``markdown`` (what GitHub hands to Mermaid)."""
    blocks, current = [], None
    for line in markdown.splitlines():
        if current is None and line.strip() == "```mermaid":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks
