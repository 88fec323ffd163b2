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


def memory_chart(report: Report) -> list[str]:
    """Peak memory of every trial against the limit; OOMs censored at the limit (labelled ``≥``)."""
    trials = _shown(report.trials)
    peaks = [t for t in trials if t.peak_mem_bytes]
    if not peaks:
        return []
    limit = report.memory_limit_bytes
    labels, mib = [], []
    for t in trials:
        value = (t.peak_mem_bytes or 0) / 2**20
        if t.outcome == "oom":
            labels.append(f"{t.trial_no} oom ≥")
            value = max(value, (limit or 0) / 2**20)
        else:
            labels.append(str(t.trial_no) if t.outcome == "ok" else f"{t.trial_no} {t.outcome}")
        mib.append(value)
    series: list[tuple[str, Sequence[float]]] = [("bar", mib)]
    if limit:
        series.append(("line", [limit / 2**20] * len(trials)))
    caption = ("Bars: each trial's peak memory (MiB); " + (f"line: the limit, {limit / 2**20:,.0f} MiB; " if limit
               else "no memory limit in the contract; ") + "an OOM is censored: its real peak is at least its bar "
               "(label `≥`), not a measurement.")
    return _block("Peak memory per trial (MiB)", labels, "MiB", series, caption)


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
