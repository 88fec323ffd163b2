"""What ``init`` learns from a repo beyond its argparse flags, gathered in one place for the drafter.

Settings in every config convention (:mod:`discover`), their roles (:mod:`classify`)
and knob tables (:mod:`knob_entries`), tokens per step and training length from
them, the step line (:mod:`steplines`), the paths the job names (:mod:`path_refs`) and the data outside
git among them (:mod:`data_paths`).
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.stages.init.contract_draft import ContractDraft
from bot.stages.init.classify import Classified, classify, current
from bot.stages.init.data_paths import draft_data_paths
from bot.stages.init.discover import discover
from bot.stages.init.setting import Setting
from bot.stages.init.knob_entries import KnobPlan, infer_tokens, plan_knobs
from infrarsi.contract.entry import given_values
from bot.stages.init.steplines_meters import meter_step_lines
from bot.stages.init.path_refs import OUTPUT_SETTING, PathRef, path_references
from bot.stages.init.clock_choice import interval_setting, optimizer_clock_reason
from bot.stages.init.steplines import EvalLine, StepLine, find_eval_lines, find_step_lines
from infrarsi.source_text import read_source

if TYPE_CHECKING:
    from infrarsi.seams.proposer import RepoSummary

_LOG_INTERVAL = re.compile(r"^(log_interval|log_every|print_every|print_freq|log_freq|log_iters|"
                           r"log_steps|display_interval|log_step)$")


@dataclass(kw_only=True)
class Found:
    settings: list[Setting]
    classified: Classified
    plan: KnobPlan
    tokens: tuple[int, str] | None = None
    data_paths: list[str] = field(default_factory=list)
    data_note: str = ""
    extra_args: list[str] = field(default_factory=list)  # added to workload.args (e.g. HF logging every step)
    step_lines: list[StepLine] = field(default_factory=list)
    eval_lines: list[EvalLine] = field(default_factory=list)  # loss lines printed beside an evaluation's
    steps_per_line: int = 1
    # Why the printed lines cannot time the steps (bot/stages/init/clock_choice.py): then the bot's own step clock
    # (timing.source = "optimizer") does; empty: the printed line is the clock.
    optimizer_clock: str = ""
    given: dict[str, str] = field(default_factory=dict)  # the values the command (and a config file) gives

    def describe(self) -> str:
        names = self.classified.names()
        return (f"{len(self.settings)} settings found; fixed: {', '.join(names['fixed'][:8]) or 'none'}; "
                f"coupled: {', '.join(names['coupled']) or 'none'}")


def local_imports(summary: RepoSummary) -> list[str]:
    """The entry script and the repo's Python files it imports (where its step line may be printed)."""
    if summary.entry is None:
        return []
    out = [summary.entry]
    try:
        source = read_source(summary.root / summary.entry)
    except (OSError, UnicodeError):
        return out
    mods = set(re.findall(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", source, re.M))
    names = {m for pair in mods for m in pair if m}
    for f in summary.files:
        stem = f.path[:-3].replace("/", ".")
        if f.path != summary.entry and any(stem == n or stem.endswith("." + n) or n.startswith(stem + ".")
                                           for n in names):
            out.append(f.path)
    return out


def _config_file_values(summary: RepoSummary, user_args: list[str], settings: list[Setting],
                        workdir: str = ".") -> dict[str, str]:
    """nanoGPT-style config files on the command (``python train.py config/x.py --k=v``) override globals."""
    if not any(s.convention == "globals" for s in settings):
        return {}
    out: dict[str, str] = {}
    for arg in user_args:
        path = summary.root / workdir / arg
        if arg.startswith("-") or "=" in arg or not arg.endswith(".py") or not path.is_file():
            continue
        try:
            tree = ast.parse(read_source(path))
        except (SyntaxError, OSError, UnicodeError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    value = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError):
                    continue
                out[f"--{node.targets[0].id}"] = str(value)
    return out


def discover_all(summary: RepoSummary, user_args: list[str], *, taken: set[str], env: dict[str, str] | None = None,
                 workdir: str = ".", data_seq: tuple[int, str] | None = None) -> Found:
    """Everything ``init`` reads beyond argparse; ``env`` is what the command sets (``VAR=value python ...``), the
    value of a setting read from that variable; ``data_seq`` a sequence length the job takes from its data."""
    settings = discover(summary.root, summary.entry)
    given = {**(env or {}), **_config_file_values(summary, user_args, settings, workdir), **given_values(user_args)}
    classified = classify(settings, given)
    plan = plan_knobs(classified, given, taken=taken)
    found = Found(settings=settings, classified=classified, plan=plan,
                  tokens=infer_tokens(settings, classified, given, data_seq))
    files = local_imports(summary)
    for rel in files:
        try:
            source = read_source(summary.root / rel)
            found.step_lines += meter_step_lines(source) + find_step_lines(source)
            found.eval_lines += find_eval_lines(source)
        except (OSError, UnicodeError):
            continue
    if any(s.origin == "HF Trainer log dict" for s in found.step_lines[:1]):
        logging_steps = next((s for s in settings if s.key == "logging_steps"), None)
        k = current(logging_steps, given) if logging_steps else None
        if "--logging_steps" not in given and logging_steps is not None:
            found.extra_args += ["--logging_steps", "1"]
            k = 1
        found.steps_per_line = k if isinstance(k, int) and k > 0 else 1
    elif found.step_lines:
        best = found.step_lines[0]
        # the interval the print is guarded by (`if it % eval_interval == 0:`), else a logging interval by its name
        interval = interval_setting(settings, best.interval) or next(
            (s for s in settings if _LOG_INTERVAL.match(s.leaf)), None)
        k = current(interval, given) if interval else None
        if best.evaluation:
            pass  # every line follows an evaluation, however often it comes: the bot's own clock (below)
        elif isinstance(k, int) and not isinstance(k, bool) and k > 1:
            every_step = _every_step(interval) if interval.token not in given else None
            if every_step:
                # Printing every step changes no computation and makes a trial k times shorter (pytorch/examples'
                # word_language_model logs every 200 batches: 8 lines were 1,600 steps, 2.5 min on a CPU).
                found.extra_args += every_step
            else:
                found.steps_per_line = k  # the job prints every k optimizer steps (the user chose k)
        elif best.every > 1:
            found.steps_per_line = best.every  # `if it % 10 == 0:` around the print, a literal
    found.optimizer_clock = optimizer_clock_reason(found.step_lines[0] if found.step_lines else None,
                                                   found.steps_per_line, found.eval_lines, settings, given) or ""
    if found.optimizer_clock and found.step_lines:
        found.extra_args = []  # the printed lines are not read: nothing need change how often they come
        found.steps_per_line = 1
    found.given = given
    return found


def job_paths(found: Found, summary: RepoSummary, user_args: list[str], *, workdir: str = ".",
              job_files: list[str] | None = None) -> list[PathRef]:
    """The paths the job names: in ``job_files`` (the repo's files it runs; default: the entry script and what it
    imports), in the settings' values (an output folder setting marked as written) and on the command."""
    values = [(str(v), f"{s.token}'s value", bool(OUTPUT_SETTING.search(s.leaf)))
              for s in found.settings if isinstance(v := current(s, found.given), str)]
    values += [(arg, "the command", False) for arg in user_args if not arg.startswith("-")]
    return path_references(summary.root, workdir=workdir, entry=summary.entry, values=values,
                           files=job_files if job_files is not None else local_imports(summary))


def find_data(found: Found, summary: RepoSummary, user_args: list[str], refs: list[PathRef], *,
              workdir: str = ".") -> None:
    """``found.data_paths``: what the job reads that git does not track (:mod:`data_paths`)."""
    near = list(dict.fromkeys([workdir, posixpath.dirname(summary.entry or "") or "."]))
    found.data_paths, found.data_note = draft_data_paths(summary.root, [f.path for f in summary.files],
                                                         " ".join(user_args), outside=summary.outside_git,
                                                         refs=refs, near=near)


def _every_step(interval: Setting) -> list[str] | None:
    """The arguments that set a logging interval to 1, where the convention passes it on the command line."""
    if interval.passing == "flag-space":
        return [interval.token, "1"]
    if interval.passing in ("flag-equals", "hydra"):
        return [f"{interval.token}=1"]
    return None


def set_step_line(draft: ContractDraft, summary: RepoSummary, step_regex: str | None, default: str,
                  found: Found) -> None:
    """timing.source/stdout_regex/stream/steps_per_line: the flag's regex, else the line the code prints, or the
    bot's own step clock where those lines cannot time the steps (``found.optimizer_clock`` says why)."""
    if step_regex is None and found.optimizer_clock:
        draft.set("timing.source", "optimizer", f"guessed: {found.optimizer_clock}; so the bot times each optimizer "
                  "step itself (torch.optim's, or a hand-written update after backward()) and ends the job after the "
                  "measured steps; `infrarsi check --run` confirms it")
        return
    draft.set("timing.source", "stdout", "step lines are read from the job's output")
    if step_regex is not None:
        draft.set("timing.stdout_regex", step_regex, "given with --step-regex")
        return
    if not found.step_lines:
        draft.set("timing.stdout_regex", default, f"default: no print or logging call with a loss found in "
                  f"{summary.entry or 'the entry point'}; run `infrarsi check --run` to see the lines it prints")
        return
    best = found.step_lines[0]
    where = f"line {best.line} of {summary.entry}" if best.line else "the trainer it runs"
    draft.set("timing.stdout_regex", best.regex, f"guessed: derived from the {best.origin} at {where}; "
              "`infrarsi check --run` confirms it sees one line per step")
    if best.stream != "stdout":
        draft.set("timing.stream", best.stream, f"guessed: {best.origin} writes to {best.stream}")
    if found.steps_per_line > 1:
        draft.set("timing.steps_per_line", found.steps_per_line, "guessed: the job logs every "
                  f"{found.steps_per_line} optimizer steps")
    if found.extra_args:
        draft.notes["workload.args"] = draft.notes.get("workload.args", "") + (
            f"; {' '.join(found.extra_args)} added so that every optimizer step prints its loss")

