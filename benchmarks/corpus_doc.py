"""docs/CORPUS.md rendered from the committed corpus data (benchmarks/data/corpus.json), and nothing else.

The measurement (``benchmarks/corpus.py measure``) takes an hour or more; the
doc is a pure function of what it recorded, so the table can be re-rendered (and
checked against the data in a test) without a trial. The interval is labelled at
the level the verification recorded (``ci_level`` of each verdict, and of each
fixture's contract: 1 - 2 alpha, 90% at the default alpha of 0.05), never at a
level it was not computed at.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATA_VERSION = 1


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("version") != DATA_VERSION:
        raise ValueError(f"{path}: corpus data version {data.get('version')!r}, expected {DATA_VERSION}")
    return data


def dump(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": DATA_VERSION, **data}, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def ci_level(rows: Sequence[dict[str, Any]]) -> float | None:
    """The one interval level every verdict of the corpus was computed at (None when no verdict says)."""
    levels = {round(float(v["ci_level"]), 4) for r in rows for v in r.get("verdicts", []) if v.get("ci_level")}
    levels |= {round(float(r["ci_level"]), 4) for r in rows if r.get("ci_level")}  # the contract's, for every row
    if len(levels) > 1:
        raise ValueError(f"verdicts at several interval levels {sorted(levels)}: one table cannot label them")
    return levels.pop() if levels else None


def _speedup(row: dict[str, Any]) -> str:
    if row.get("pending"):  # a fixture added since the last measurement: its row says so until the next one
        return f"not measured yet ({row['pending']})"
    if row.get("error"):
        return f"error: {row['error']}"
    promoted = row.get("promoted")
    if promoted is None:
        held = [v for v in row.get("verdicts", []) if v.get("verdict") == "quarantined" and v.get("speedup")]
        if not held:
            return "nothing promoted"
        best = max(held, key=lambda v: v["speedup"])  # above verify.max_speedup: held for a person to review
        return f"nothing promoted; quarantined for review: {best['speedup']:.2f}x{_interval(best)} `{best['candidate']}`"
    return f"**{promoted['speedup']:.2f}x**{_interval(promoted)} `{promoted['candidate']}`"


def _interval(verdict: dict[str, Any]) -> str:
    ci = verdict.get("ci") or [None, None]
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if None not in ci else ""


def _pairs(row: dict[str, Any]) -> str:
    return ", ".join(f"{v.get('pairs', 0)} ({v.get('stop') or v.get('verdict')})" for v in row.get("verdicts", [])) \
        or "–"


def render(data: dict[str, Any], *, data_path: str = "benchmarks/data/corpus.json") -> str:
    """The markdown of docs/CORPUS.md for ``data`` (as :func:`load` returns it)."""
    rows = data["rows"]
    level = ci_level(rows)
    label = f"{level:.0%} CI" if level is not None else "CI"
    machine = data["machine"]
    lines = [
        "# Corpus: the bot on every fixture, from its command alone",
        "",
        f"Rendered from `{data_path}` by `python benchmarks/corpus.py render` — do not edit by hand. The data was "
        f"measured by `{data['command']}` (re-measure with it; it renders this page too).",
        "",
        f"Machine: {machine['cpu']}; {machine['cores']} cores; avx512_bf16: {machine['avx512_bf16']}, "
        f"amx: {machine['amx']}; torch {machine['torch']}. {machine.get('note', '')}".rstrip(),
        "",
        f"Budget: {data['budget']} search trials per fixture, built-in proposer, local executor, no experience bank. "
        f"Total wall time **{data['total_s'] / 60:.1f} min**.",
        "",
        "| fixture | contract | knobs | patches applicable (unreached) | trials | failed (cost) | verified speedup "
        f"[{label}] and winner | verification pairs (stop) | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        unreached = f" ({', '.join(row['unreached'])})" if row.get("unreached") else ""
        lines.append(
            f"| {row['fixture']} | {row.get('contract') or '–'} | {', '.join(row.get('knobs', [])) or '–'} | "
            f"{', '.join(row.get('applicable', [])) or '–'}{unreached} | {row.get('trials', 0)} | "
            f"{row.get('failed', 0)} ({row.get('failed_cost_s', 0.0):.0f} s) | {_speedup(row)} | {_pairs(row)} | "
            f"{row.get('wall_s', 0.0) / 60:.1f} min |")
    lines += [
        "",
        "Reading the table: *patches applicable* are the catalog entries that rewrite something in the editable "
        "scope on a path the entry point reaches; *unreached* ones found their pattern only where the job never "
        "goes and cost no trial. The interval is the verification's bootstrap interval on the speedup, two-sided "
        "at 1 - 2 alpha of the contract's verify.alpha" + (f" ({level:.0%})" if level is not None else "") + "; its "
        "lower bound is the one-sided 1 - alpha bound a promotion needs. A "
        "verification stops for efficacy, futility or at its pair budget (`docs/doctor.md`); a speedup above "
        "`verify.max_speedup` is quarantined for a person to review, never promoted. `tunedgpt` is the control: "
        "nothing should be promoted there.",
        "",
    ]
    why = [f"- {row['fixture']}: {why_nothing_promoted(row)}" for row in rows
           if row.get("promoted") is None and not row.get("error")]
    if why:
        lines += ["Why nothing was promoted, for each such row: every candidate verified, its verdict and why "
                  "(`invalid` names the row that broke, `not_significant` the pairs it ran):", "", *why, ""]
    notes = sorted({f"- {row['fixture']}: {note}" for row in rows for note in row.get("notes", [])})
    if notes:
        lines += ["What `run` left out on this device (`docs/doctor.md`):", "", *notes, ""]
    return "\n".join(lines)


def why_nothing_promoted(row: dict[str, Any]) -> str:
    """One line: each verified candidate's verdict with its reason cut short, or that none was verified."""
    verdicts = row.get("verdicts", [])
    if not verdicts:
        return ("no candidate was verified (none measured faster than the baseline in the search, or every one was "
                "left out: see the notes below)")
    said = []
    for v in verdicts:
        kind = v.get("kind") or v.get("verdict") or "?"
        reason = " ".join((v.get("reason") or "").split())
        if kind == "not_significant":
            reason = f"at {v.get('pairs', 0)} pairs ({v.get('stop') or '?'}): " + reason.split(": ", 1)[-1]
        said.append(f"`{kind}` {reason[:170]}{'…' if len(reason) > 170 else ''}")
    return "; ".join(said)
