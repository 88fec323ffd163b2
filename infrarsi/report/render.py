"""Markdown renderings of a :class:`~infrarsi.report.model.Report`: ``report.md`` and the pull-request body.

Both have the same six sections (Summary, Changes, Verification, Failed
trials, Model calibration, Reproduce). The body starts with a hidden marker
carrying the run id and a hash of the rest of the body, so the bot recognises
its own pull requests and sees whether an update changes anything. A body
stays under GitHub's 65,536-character limit: long tables are cut to fewer rows
with a pointer to the full report.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from infrarsi.report.charts import memory_chart, step_time_chart, verification_chart
from infrarsi.report.model import CalibrationRow, Invariant, Report, TrialRow, Verification

SECTIONS = ("Summary", "Changes", "Verification", "Failed trials", "Model calibration", "Reproduce")
GITHUB_BODY_LIMIT = 65_536
MARKER_RE = re.compile(r"<!-- infrarsi:run=(?P<run>[A-Za-z0-9._-]+) hash=(?P<hash>[0-9a-f]{16}) -->")


def body_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def marker(run_id: str, content: str) -> str:
    return f"<!-- infrarsi:run={run_id} hash={body_hash(content)} -->"


def parse_marker(body: str) -> tuple[str, str] | None:
    """``(run_id, hash)`` of a body the bot wrote, or None for anyone else's."""
    match = MARKER_RE.search(body)
    return (match["run"], match["hash"]) if match else None


def body_changed(old_body: str, new_body: str) -> bool:
    """Whether ``new_body`` says something ``old_body`` did not (the markers' hashes differ)."""
    old, new = parse_marker(old_body), parse_marker(new_body)
    return old is None or new is None or old != new


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:.1f} ms"


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f} MiB"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _hardware(report: Report) -> str:
    hw = report.hardware
    device = hw.get("gpu_model") or hw.get("cpu_model") or hw.get("device") or "unknown device"
    parts = [str(device)]
    for key in ("device", "world_size", "torch", "cuda"):
        if hw.get(key) and str(hw.get(key)) != str(device):
            parts.append(f"{key} {hw[key]}")
    return ", ".join(parts)


def _mfu_cell(r: Report, arm: str) -> str:
    """An arm's MFU with the dtype whose peak it is against, or "defect" (the notes say why)."""
    if any(d.startswith(f"{arm}:") for d in r.mfu_defects):
        return "defect (see below)"
    value, dtype = (r.mfu_before, r.mfu_before_dtype) if arm == "before" else (r.mfu_after, r.mfu_after_dtype)
    return _pct(value) + (f" of the {dtype} peak" if value is not None and dtype else "")


def _summary(r: Report) -> list[str]:
    out = ["## Summary", ""]
    if r.promoted and r.speedup is not None:
        lo, hi = r.speedup_ci or (float("nan"), float("nan"))
        out.append(f"**Verified speedup {r.speedup:.2f}x** ({(r.ci_level or 0):.0%} CI [{lo:.2f}, {hi:.2f}], "
                   f"p = {r.p_value:.3g}): {r.change_summary}.")
    else:
        out.append("**No verified speedup.** " + (r.notes[0] if r.notes else ""))
    out += ["", "| | before | after |", "|---|---|---|",
            f"| step time | {_ms(r.step_time_before_s)} | {_ms(r.step_time_after_s)} |",
            f"| MFU | {_mfu_cell(r, 'before')} | {_mfu_cell(r, 'after')} |",
            f"| peak memory{' (host)' if _has_gpu(r) else ''} | {_mib(r.peak_mem_before_bytes)} | "
            f"{_mib(r.peak_mem_after_bytes)} |",
            *([f"| peak GPU memory{_capacity(r)} | {_mib(r.gpu_peak_before_bytes)} | {_mib(r.gpu_peak_after_bytes)} |"]
              if _has_gpu(r) else []), "",
            f"Measured on {_hardware(r)}; run `{r.run_id}`"
            + (f", base commit `{r.base_commit[:10]}`" if r.base_commit else "") + "."]
    out += [f"- {n}" for n in r.notes[1 if not r.promoted else 0:]]
    if r.llm:
        out += ["", llm_cost_line(r)]
    return out


def _has_gpu(r: Report) -> bool:
    return r.gpu_peak_before_bytes is not None or r.gpu_peak_after_bytes is not None


def _capacity(r: Report) -> str:
    return f" (of {_mib(r.gpu_capacity_bytes)})" if r.gpu_capacity_bytes else ""


def llm_cost_line(r: Report) -> str:
    """What the LLM proposer cost, next to what the run bought: tokens in/out, dollars, the dated price table."""
    llm = r.llm or {}
    tin, tout = int(llm.get("input_tokens") or 0), int(llm.get("output_tokens") or 0)
    cost = float(llm.get("cost_usd") or 0.0)
    bought = f"for a verified {r.speedup:.2f}x speedup" if r.promoted and r.speedup else "for no verified speedup"
    calls = f"{llm.get('calls', 0)} calls" + (f" (+{llm['cached_calls']} cached)" if llm.get("cached_calls") else "")
    prices = (f"at {llm['prices_source']} as of {llm['prices_as_of']}" if llm.get("prices_as_of")
              else "at the proposer's price table (undated: run.json predates it)")
    return (f"**LLM cost**: {tin:,} tokens in, {tout:,} out, **${cost:.4f}** {bought} "
            f"({llm.get('model') or llm.get('proposer', 'LLM')}, {calls}; {prices}).")


def _changes(r: Report) -> list[str]:
    out = ["## Changes", ""]
    if not r.promoted:
        return out + ["None: nothing was verified."]
    if r.precision_change:
        out += [r.precision_change, ""]
    if r.knob_changes:
        out += ["| knob | old | new | where it is set |", "|---|---|---|---|"]
        out += [f"| `{c.name}` | `{c.old}` | `{c.new}` | {_cell(c.where)} |" for c in r.knob_changes]
    else:
        out.append("No knob changes.")
    out.append("")
    out += patch_sections(r)
    if r.winner_branch:
        out += ["", f"Trial commit `{(r.winner_commit or '')[:10]}` on `{r.winner_branch}`."]
    return out


def _verif_table(v: Verification) -> list[str]:
    n = max(len(v.baseline_step_s), len(v.candidate_step_s))
    out = ["| pair | baseline | candidate |", "|---|---|---|"]
    for i in range(n):
        b = _ms(v.baseline_step_s[i]) if i < len(v.baseline_step_s) else "-"
        c = _ms(v.candidate_step_s[i]) if i < len(v.candidate_step_s) else "-"
        out.append(f"| {i + 1} | {b} | {c} |")
    return out


def _verification(r: Report) -> list[str]:
    out = ["## Verification", ""]
    v = r.verification
    if v is not None:
        out.append(f"Interleaved A/B from fresh processes: {len(v.baseline_step_s)} baseline and "
                   f"{len(v.candidate_step_s)} candidate runs (median step time of each run)"
                   + (f"; {_stopped(v)}." if v.stop else "."))
        out += [""] + _verif_table(v) + [""]
        lo, hi = v.ci or (float("nan"), float("nan"))
        out.append(f"Test: {v.test}; p = {v.p_value:.3g}, speedup {v.speedup:.3f}x, "
                   f"{(v.ci_level or 0):.0%} CI [{lo:.3f}, {hi:.3f}]. Verdict: **{v.verdict}** — {_cell(v.reason)}")
        out += [""] + _invariant_table(v.invariants)
        out += [""] + verification_chart(v)
    else:
        out.append("No candidate passed verification.")
    if r.other_verdicts:
        out += ["", "Other candidates verified:", "",
                "| candidate | verdict | speedup | pairs | reason |", "|---|---|---|---|---|"]
        out += [f"| `{_cell(o.candidate)}` | {o.verdict} | {f'{o.speedup:.2f}x' if o.speedup else '-'} | "
                f"{_stopped(o) if o.stop else '-'} | {_cell(o.reason)} |" for o in r.other_verdicts]
    return out


def _invariant_table(invariants: Sequence[Invariant]) -> list[str]:
    """One row per invariant, however many runs checked it: "5/5 runs ok", and the first broken run's detail
    (or the first not-checked one's, or the first run's). A row that was not checked says so — never ok — and
    rows the contract waives, and rows the baseline fails too (the doctor's A/A check), are listed under the table
    with why they could not be checked."""
    groups: dict[str, list[Invariant]] = {}
    for i in invariants:
        groups.setdefault(i.name, []).append(i)
    out = ["| invariant | runs | detail |", "|---|---|---|"]
    waivers: list[str] = []
    excused: list[str] = []
    for name, checks in groups.items():
        ok = sum(1 for c in checks if c.ok)
        unchecked = [c for c in checks if (c.status or ("ok" if c.ok else "broken")) == "not_checked"]
        broken = [c for c in checks if not c.ok and c not in unchecked]
        shown = broken[0] if broken else unchecked[0] if unchecked else checks[0]
        if broken:
            mark = f"❌ {len(broken)}/{len(checks)} runs broken"
        elif unchecked:
            waived = all(c.waived for c in unchecked)
            fails = all(c.baseline_fails for c in unchecked)
            mark = (f"⚠️ not checked in {len(unchecked)}/{len(checks)} runs"
                    + (" (the baseline fails it too)" if fails else " (waived by the contract)" if waived else ""))
            if fails:
                excused.append(f"- `{name}`: {_cell(unchecked[0].detail)}")
            elif waived:
                waivers.append(f"- `{name}`: {_cell(unchecked[0].detail)}")
        else:
            mark = f"✅ {ok}/{len(checks)} runs ok"
        out.append(f"| {name} | {mark} | {_cell(shown.detail)} |")
    if waivers:
        out += ["", "Not checked, and waived by the contract (`[verify] waive` in infrarsi.toml):", "", *waivers]
    if excused:
        out += ["", "Not checked, because the baseline's own runs fail it too (the doctor held each baseline run to "
                "every row; such a row cannot tell a candidate from the baseline):", "", *excused]
    return out


_STOPS = {"efficacy": "stopped early: the speedup was clear", "futility": "stopped early: a speedup above the "
          "minimum effect had become unlikely", "max_pairs": "ran the plan's last look without a decision",
          "fixed": "a fixed number of pairs", "invariant": "stopped: a candidate run broke an invariant"}


def _stopped(v: Verification) -> str:
    """How many pairs a verification used and why it stopped there (docs/doctor.md, "Verification"), and how
    many runs it ran again because something outside disturbed them."""
    again = (f"; {len(v.reruns)} run{'s' if len(v.reruns) != 1 else ''} disturbed from outside and run again "
             f"(trial{'s' if len(v.reruns) != 1 else ''} {', '.join(map(str, v.reruns))})") if v.reruns else ""
    return f"{v.pairs} pairs, {_STOPS.get(v.stop, v.stop)}{again}"


def _trial_rows(rows: Sequence[TrialRow]) -> list[str]:
    return [f"| {t.trial_no} | {t.stage} | `{_cell(t.candidate)}` | {t.outcome} | {_cell(t.reason[:200])} | "
            f"{t.cost_s:.1f} |" for t in rows]


def _trial_charts(r: Report) -> list[str]:
    """Step time and peak memory of every trial, as pictures (infrarsi/report/charts.py), before the table."""
    out: list[str] = []
    for chart in (step_time_chart(r), memory_chart(r)):
        if chart:
            out += chart + [""]
    return out


def _failed(r: Report, limit: int | None, full: str | None) -> list[str]:
    failed = r.failed
    out = ["## Failed trials", ""] + _trial_charts(r)
    if not failed:
        out.append(f"None: all {len(r.trials)} trials ran ok.")
    else:
        shown = failed if limit is None else failed[:limit]
        out += ["| trial | stage | candidate | outcome | reason | cost (device-s) |", "|---|---|---|---|---|---|"]
        out += _trial_rows(shown)
        if len(shown) < len(failed):
            out.append(f"| … | | {len(failed) - len(shown)} more rows | | see the full report"
                       + (f": {full}" if full else "") + " | |")
    out += ["", f"Total cost of failure: **{r.failed_cost_s:.1f} device-seconds** of {r.total_cost_s:.1f} spent "
                f"on {len(r.trials)} trials."]
    if r.crash_suspects:
        out.append("The search blamed its failed trials on settings that never ran elsewhere, and avoided them: "
                   + ", ".join(f"`{_cell(setting)}` ({blame:.1f} of {failures} failed trial{'s' * (failures != 1)})"
                               for setting, failures, blame in r.crash_suspects) + ".")
    if r.oom:
        listed = r.oom if limit is None else r.oom[:limit]
        more = f", and {len(r.oom) - len(listed)} more in the full report" if len(listed) < len(r.oom) else ""
        out.append(f"Out of memory: {len(r.oom)} trial(s), " + ", ".join(
            f"#{t.trial_no} `{_cell(t.candidate)}` ({t.cost_s:.1f} s, {_oom_peak(t)})" for t in listed) + more + ".")
    out += llm_summary(r)
    return out


def _oom_peak(t: TrialRow) -> str:
    """How far an out-of-memory trial got: the GPU's allocator, when that was the memory that ran out."""
    if t.gpu_oom:
        return "out of GPU memory" + (f", the allocator at {_mib(t.gpu_peak_bytes)}" if t.gpu_peak_bytes else "")
    return f"peak ≥ {_mib(t.peak_mem_bytes)}"


def patch_sections(r: Report) -> list[str]:
    """Each patch of the winner: who proposed it and why, its hunks under it, its code collapsed."""
    if not r.patches:
        return ["No code patches."]
    out: list[str] = []
    for p in r.patches:
        by = f" — {p.author}" if p.author else ""
        out.append(f"- patch `{p.patch_id}`{by}" + (f": {_cell(p.title)}" if p.title else "")
                   + (f" ([diff]({r.diff_link}))" if r.diff_link else ""))
        if p.rationale:
            out.append(f"  - why: {_cell(p.rationale)}")
        if p.evidence:
            out.append(f"  - evidence: {_cell(p.evidence)}")
        for s in p.sources:
            lines = f"lines {s.line_start}–{s.line_end}" if s.line_start else "new"
            out.append(f"  - `{s.path}` · `{s.symbol}` · {lines} (+{s.lines_added} −{s.lines_removed})")
        if p.source:
            out += ["", "  <details><summary>source of the replacement "
                    f"({len(p.source.splitlines())} lines)</summary>", "", "  ```python"]
            out += [f"  {line}" if line else "" for line in p.source.rstrip("\n").splitlines()]
            out += ["  ```", "", "  </details>", ""]
    return out


def llm_summary(r: Report) -> list[str]:
    """What the model proposer cost and what became of its patches: figures, then one line per patch."""
    llm = r.llm
    if not llm:
        return []
    calls = f"{llm.get('calls', 0)} request(s) sent"
    if llm.get("cached_calls"):
        calls += f", {llm['cached_calls']} answered from the cache"
    if llm.get("blocked_calls"):
        calls += f", {llm['blocked_calls']} blocked by the token budget"
    model = f" ({llm['model']})" if llm.get("model") else ""
    out = [f"LLM proposer{model}: {calls}; {llm.get('tokens', 0)} tokens, ${float(llm.get('cost_usd') or 0):.4f}"
           + (f"; {llm['note']}" if llm.get("note") else "") + "."]
    proposed = llm.get("patches_proposed") or ()
    if proposed:
        out += ["", "| proposed patch | targets | status | reason |", "|---|---|---|---|"]
        out += [f"| `{p.get('id')}` | {_cell(', '.join(p.get('targets') or ()))} | {p.get('status', 'accepted')} | "
                f"{_cell(str(p.get('reason') or '')[:200])} |" for p in proposed]
    failed = llm.get("failed_proposals") or ()
    if failed:
        out.append(f"Failed proposals: {len(failed)} (" + "; ".join(
            _cell(str(f.get("error", ""))[:120]) for f in failed) + ").")
    return out


def _calibration(r: Report) -> list[str]:
    out = ["## Model calibration", ""]
    if not r.calibration:
        return out + ["No effect model was fitted."]
    out += ["Multiplicative effect on step time (below 1 is faster); prior before the run, posterior after it. "
            "Main effects first; \"in the winner\" is whether the winner's candidate switches the term on.", "",
            "| effect | prior | posterior | in the winner |", "|---|---|---|---|"]
    mains = [c for c in r.calibration if c.kind == "main"]
    terms = [c for c in r.calibration if c.kind != "main"]

    def row(c: CalibrationRow) -> str:
        return (f"| `{_cell(c.effect)}` | {c.prior_ratio:.3f} (sd {c.prior_sd:.2f}) | {c.posterior_ratio:.3f} "
                f"(sd {c.posterior_sd:.2f}) | {'yes' if c.in_winner else 'no'} |")

    out += [row(c) for c in mains]
    if terms:
        out += ["", f"Interaction terms that moved from their prior by more than the time model's noise "
                    f"(σ = {terms[0].noise:.3f} in log step time):", "",
                "| term | prior | posterior | in the winner |", "|---|---|---|---|"]
        out += [row(c) for c in terms]
    else:
        out += ["", "No interaction term moved by more than the time model's noise."]
    return out


def _reproduce(r: Report) -> list[str]:
    out = ["## Reproduce", "", "```bash", "# baseline", r.reproduce.get("baseline", "")]
    if "candidate" in r.reproduce:
        checkout = f"git checkout {r.winner_branch}  # the trial commit\n" if r.winner_branch else ""
        out += ["# candidate", checkout + r.reproduce["candidate"]]
    if "verify" in r.reproduce:
        out += ["# interleaved A/B verification of the same candidate", r.reproduce["verify"]]
    return out + ["```"]


def _quarantined(r: Report) -> list[str]:
    """Patches left for a person, never run: a section of their own, only when there are any."""
    if not r.quarantined:
        return []
    out = ["## Quarantined for a person", "",
           "These patches added what a speed patch never needs; they never ran. A person should read each line "
           "named before anything like them is tried (docs/trials.md, \"The quarantine\").", ""]
    for q in r.quarantined:
        out.append(f"- {', '.join(f'`{p}`' for p in q.patches)} ({q.when})")
        out += [f"  - {_cell(f)}" for f in q.findings]
    return out


def render_sections(report: Report, *, failed_limit: int | None = None, full_report: str | None = None) -> str:
    parts = [_summary(report), _changes(report), _verification(report), _failed(report, failed_limit, full_report),
             _quarantined(report), _calibration(report), _reproduce(report)]
    parts = [p for p in parts if p]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def _all_trials(report: Report) -> list[str]:
    out = ["## All trials", "", "| trial | stage | candidate | outcome | step time | peak memory | cost (device-s) |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {t.trial_no} | {t.stage} | `{_cell(t.candidate)}` | {t.outcome} | {_ms(t.step_time_s)} | "
            f"{_mib(t.peak_mem_bytes)} | {t.cost_s:.1f} |" for t in report.trials]
    return out


def render_markdown(report: Report) -> str:
    """``report.md``: every section in full, then every trial."""
    title = f"# InfraRSI report — run {report.run_id}\n\n"
    return title + render_sections(report) + "\n" + "\n".join(_all_trials(report)) + "\n"


def pr_title(report: Report) -> str:
    if report.promoted and report.speedup is not None:
        return f"InfraRSI: {report.speedup:.2f}x faster training step ({report.change_summary})"[:250]
    return f"InfraRSI: run {report.run_id}"


def render_pr_body(report: Report, *, full_report: str | None = None, limit: int = GITHUB_BODY_LIMIT) -> str:
    """The pull-request body: the six sections, a marker first, cut to fit ``limit`` characters."""
    footer = f"\n---\nFull report: {full_report}\n" if full_report else ""
    failed_limit: int | None = None
    while True:
        content = render_sections(report, failed_limit=failed_limit, full_report=full_report) + footer
        body = marker(report.run_id, content) + "\n" + content
        if len(body) <= limit:
            return body
        n = len(report.failed) if failed_limit is None else failed_limit
        if n == 0:
            break
        failed_limit = n // 2
    cut = f"\n\n… cut to fit the forge's limit; see the full report{': ' + full_report if full_report else ''}\n"
    content = content[: limit - len(cut) - 80] + cut
    return marker(report.run_id, content) + "\n" + content
