"""``infrarsi check --run``: run the baseline once and say whether the step regex saw one line per step.

A guessed regex is only a guess until the job's own output confirms it. When it
does not, the user gets the lines the job printed and a regex that would have
matched them, instead of a trial that is ``invalid`` half an hour later.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from bot.executors.streams import StepCollector, regex_handler
from bot.stages.init.steplines import regex_for_lines
from infrarsi.contract.model import Contract
from infrarsi.seams.executor import Executor
from infrarsi.trial_record import StepEvent


@dataclass(frozen=True, kw_only=True, slots=True)
class DryRun:
    ok: bool
    message: str
    seen: int
    expected: int
    suggested_regex: str | None = None


def _lines(log_dir: Path, stream: str) -> list[str]:
    path = log_dir / f"{stream}.log"
    if not path.is_file():
        return []
    text = path.read_bytes().decode("utf-8", "replace")
    return [ln for ln in re.split(r"\r\n|\r|\n", text) if ln.strip()]


def no_step_line_message(lines: list[str], *, regex: str | None, seen: int, expected: int,
                         stream: str = "stdout") -> str:
    """What the user reads when the regex did not see one line per step: the lines, and a regex that fits."""
    head = f"the step regex saw {seen} step lines, expected {expected} ({regex!r} on {stream})"
    loss_lines = [ln for ln in lines if re.search(r"loss", ln, re.I)]
    shown = (loss_lines or lines)[-12:]
    body = "\n".join(f"  | {ln[:200]}" for ln in shown) if shown else f"  (the job printed nothing on {stream})"
    what = "lines with 'loss' it printed" if loss_lines else f"the last lines it printed on {stream}"
    suggested = regex_for_lines(lines)
    if suggested:
        tail = (f"a regex that matches them: {suggested!r}\n"
                f"set it with `infrarsi init REPO --step-regex '{suggested}'` or timing.stdout_regex")
    else:
        tail = ("no line carries a training loss; print one line per step with the step and the loss "
                "(e.g. print(f\"step {step} loss {loss.item():.4f}\")), or emit events with infrarsi.probe")
    return f"{head}\n{what}:\n{body}\n{tail}"


def dry_run(contract: Contract, *, executor: Executor, log_dir: Path, timeout_s: float | None = None) -> DryRun:
    """Run the baseline once (no journal, no lock re-check) and judge its step events."""
    from bot.stages.run.run_trial import trial_spec
    from infrarsi.trial_record import Candidate

    spec = trial_spec(contract, Candidate.of(contract.defaults(), ()), tree=contract.root, memory_limit_bytes=None,
                      timeout_s=timeout_s, log_dir=log_dir)
    execution = executor.execute(spec)
    timing = contract.timing
    expected = timing.total_steps
    seen = len(execution.events)
    if execution.returncode not in (0, None) and not execution.stopped_after_steps and seen < expected:
        tail = execution.stderr_tail.strip().splitlines()[-8:]
        return DryRun(ok=False, seen=seen, expected=expected,
                      message=f"the baseline failed (exit status {execution.returncode}) after {seen} step "
                      f"events:\n" + "\n".join(f"  | {ln}" for ln in tail))
    if timing.source == "optimizer":
        ok = seen >= expected
        stopped = " (then stopped it)" if execution.stopped_after_steps else ""
        losses = [round(e.loss, 4) for e in execution.events[:3] if e.loss is not None]
        msg = (f"ok: the bot's own step clock saw {seen} optimizer steps in {execution.wall_s:.1f} s{stopped}"
               + (f"; first losses {losses}" if losses else "") if ok else
               f"the bot's own step clock saw {seen} optimizer steps, expected {expected} (a torch.optim "
               "optimizer's steps, or a hand-written update after backward())")
        return DryRun(ok=ok, message=msg, seen=seen, expected=expected)
    if timing.source == "probe":
        ok = seen >= expected
        msg = (f"ok: the probe reported {seen} step events (expected {expected})" if ok else
               f"the probe reported {seen} step events, expected {expected}")
        return DryRun(ok=ok, message=msg, seen=seen, expected=expected)
    lines = _lines(log_dir, timing.stream)
    matched = regex_steps(lines, timing.stdout_regex or "")
    if len(matched) < min(seen, expected):  # the other events came from the probe channel, not the regex
        return DryRun(ok=False, seen=len(matched), expected=expected, suggested_regex=regex_for_lines(lines),
                      message=no_step_line_message(lines, regex=timing.stdout_regex, seen=len(matched),
                                                   expected=expected, stream=timing.stream)
                      + f"\n({seen} step events came from the infrarsi.probe channel instead; set timing.source = "
                        "'probe' to time those)")
    steps = [e.step for e in execution.events if e.step is not None]
    if seen >= expected and (len(steps) < 2 or _one_per_step(steps, timing.steps_per_line)):
        stopped = " (then stopped it)" if execution.stopped_after_steps else ""
        return DryRun(ok=True, seen=seen, expected=expected,
                      message=f"ok: the regex saw {seen} step lines in {execution.wall_s:.1f} s{stopped}; "
                      f"first losses {[round(e.loss, 4) for e in execution.events[:3] if e.loss is not None]}")
    if seen >= expected:
        gaps = sorted({b - a for a, b in zip(steps, steps[1:]) if b > a})
        return DryRun(ok=False, seen=seen, expected=expected,
                      message=f"the regex saw {seen} lines but their steps advance by {gaps} (timing.steps_per_line "
                      f"= {timing.steps_per_line}); set timing.steps_per_line to the logging interval")
    message = no_step_line_message(lines, regex=timing.stdout_regex, seen=seen, expected=expected,
                                   stream=timing.stream)
    return DryRun(ok=False, message=message, seen=seen, expected=expected, suggested_regex=regex_for_lines(lines))


def regex_steps(lines: list[str], regex: str) -> list[StepEvent]:
    """The step events ``regex`` reads from the job's printed ``lines``, as a trial's stream reader reads them
    (a repainted progress-bar step counts once)."""
    collector = StepCollector()
    handle = regex_handler(collector, regex) if regex else None
    for line in lines if handle is not None else ():
        handle(line, 0.0)
    return collector.steps


def _one_per_step(steps: list[int], per_line: int) -> bool:
    """Consecutive step numbers advance by ``per_line`` (a new epoch may restart the count)."""
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    return not gaps or all(g == per_line for g in gaps)


CLOCKS = {"optimizer": "the bot's own step clock (timing.source = \"optimizer\": one event per optimizer step, "
                        "written by the bot's code in the job's interpreter)",
          "stdout": "the job's printed lines (timing.source = \"stdout\")",
          "probe": "the job's infrarsi.probe events (timing.source = \"probe\")"}


def clock_line(contract: Contract) -> str:
    """Which clock the contract times steps with, and why (the comment init wrote above ``timing.source``)."""
    timing = contract.timing
    what = CLOCKS.get(timing.source, timing.source)
    if timing.source == "stdout" and timing.steps_per_line > 1:
        what += f", {timing.steps_per_line} optimizer steps per line"
    why = source_note(contract.root)
    return f"clock: {what}" + (f"; {why}" if why else "")


def source_note(root: Path) -> str:
    """The comment directly above ``source =`` in infrarsi.toml's [timing] table (empty: none)."""
    try:
        lines = (root / "infrarsi.toml").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError):
        return ""
    table = ""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("["):
            table = stripped
        elif table == "[timing]" and re.match(r"source\s*=", stripped):
            notes = []
            for above in reversed(lines[:i]):
                if not above.strip().startswith("#"):
                    break
                notes.insert(0, above.strip().lstrip("#").strip())
            return " ".join(notes)
    return ""


def check_run(contract: Contract, root: Path) -> int:
    """``infrarsi check --run``: print which clock times the steps and why, then the dry run's verdict; 0 when it
    saw one step event per step."""
    from bot.executors.registry import build_executor
    from infrarsi.rundir import check_run_logs

    log_dir = check_run_logs(root)
    shutil.rmtree(log_dir, ignore_errors=True)  # the executor appends; old lines would count
    print(clock_line(contract))
    result = dry_run(contract, executor=build_executor(contract), log_dir=log_dir)
    print(result.message)
    return 0 if result.ok else 1
