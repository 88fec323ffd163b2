"""Draft a contract from a human command and a static scan (the built-in, offline drafter).

Every value this module had to guess carries a note; the TOML writer puts the
note above the value as a comment, so a reviewer sees what was inferred.
"""

from __future__ import annotations

import re
from typing import Any

from bot.stages.init import conventions
from bot.stages.init.contract_draft import ContractDraft
from bot.patching.reach import analyse
from bot.stages.init.cores import usable_cores
from bot.stages.init.data_seq_len import data_sequence_length
from bot.stages.init.errors import DraftError
from infrarsi.contract.model import LossSpec
from infrarsi.contract.entry import given_values, strip_flags
from bot.stages.init.job import read_job
from bot.stages.init.launcher import LaunchError
from bot.stages.init.classify import current
from bot.stages.init.moe_draft import moe_note, read_moe, split_knob_names
from bot.stages.init.parallel_knobs import plan_parallel
from bot.stages.init.precision_draft import draft_precision
from bot.stages.init.loader_batch import loader_batch
from infrarsi.seams.proposer import ArgFlag, RepoSummary
from bot.stages.init.scope_draft import draft_scope
from bot.stages.init.train_length import read_length, set_length
from infrarsi.contract.knob_codec import guess_value

# Flag names (argparse dests) that are performance knobs: they change how the job
# runs, not what it computes. Everything else defines the workload and is fixed.
_KNOB_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^(micro_?batch(_size)?|mbs|micro_bs|per_device_(train_)?batch_size)$", "micro-batch size"),
    (r"^(dtype|precision|amp|autocast|mixed_precision|amp_dtype)$", "numeric precision"),
    (r"^(compile|torch_compile|use_compile)$", "torch.compile"),
    (r"^(threads|num_threads|nthreads|torch_threads|intra_op_threads)$", "thread count"),
    (r"^(optimizer|optim|optimizer_impl)$", "optimizer implementation"),
    (r"^(grad_ckpt|gradient_checkpointing|activation_checkpointing|checkpoint_activations|recompute)$",
     "activation checkpointing"),
    (r"^(num_workers|workers|dataloader_workers)$", "data-loader workers"),
    (r"^(fused|foreach|flash|use_flash|sdpa|fused_adam)$", "fused kernels"),
)
_GLOBAL_BATCH = re.compile(r"^(global_batch(_size)?|total_batch(_size)?|batch_size|gbs)$")
_SEQ_LEN = re.compile(r"^(seq_len|seq_length|block_size|context_length|max_seq_len|sequence_length|ctx_len)$")
# Upper bound on the loss band's half-width (relative); the doctor measures the width itself. At 2% a
# patch that ran one block of three passed (docs/trials.md, "Invariants"); bf16 on the fixtures moves a
# short loss curve by well under 0.5%.
LOSS_RTOL_CAP = 0.005
_DEFAULT_STDOUT_REGEX = r"step\s+(?P<step>\d+).*?loss[\s:=|]+(?P<loss>[-+0-9.eE]+|nan|inf)"


def _knob_reason(dest: str) -> str | None:
    for pattern, reason in _KNOB_PATTERNS:
        if re.match(pattern, dest):
            return reason
    return None


def canonical_flags(argv: list[str], flags: tuple[ArgFlag, ...]) -> list[str]:
    """``argv`` with each argparse alias spelled as the argument's main flag (``-b 128`` → ``--batch-size 128``).

    A knob is passed by its main flag after the fixed arguments; an alias left among those would set the
    same argument twice, and its value would not be the knob's default (timm's train.py: ``-b``)."""
    main = {alias: f.flag for f in flags for alias in f.aliases}
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(main[name] + eq + value if name in main else arg)
    return out


def _value_of(flag: ArgFlag, given: dict[str, str]) -> Any:
    if flag.flag in given:
        return guess_value(given[flag.flag])
    return flag.default if flag.has_default else None


def _powers_of_two_dividing(n: int) -> list[int]:
    return [v for v in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if v <= n and n % v == 0]


def _knob_table(flag: ArgFlag, current: Any, global_batch: int | None) -> tuple[dict[str, Any], str] | None:
    reason = _knob_reason(flag.dest)
    if reason is None:
        return None
    note = f"guessed: {flag.flag} looks like a knob for {reason} (line {flag.line} of the entry script)"
    table: dict[str, Any] = {"flag": flag.flag}
    choices = list(flag.choices) if flag.choices else None
    if flag.action in ("store_true", "store_false"):
        table.update(kind="bool", switch=True, default=bool(current) if flag.action == "store_true" else False)
    elif choices and sorted(map(str, choices)) == ["0", "1"]:
        table.update(kind="bool", default=bool(int(current or 0)))
    elif choices:
        table.update(kind="categorical", values=choices, default=current if current in choices else choices[0])
    elif flag.type == "int" and "micro" in reason and global_batch:
        default = int(current or 1)  # kept among the values even when it does not divide: the user's own setting
        table.update(kind="int", values=sorted({default, *_powers_of_two_dividing(global_batch)}), default=default)
        note += f"; values are the powers of two dividing the global batch ({global_batch})"
    elif flag.type == "int" and "thread" in reason:
        cores = usable_cores()
        values = sorted({int(current or 0), *[v for v in (1, 2, 4, 8, 16, 32, 64) if v <= cores]})
        table.update(kind="int", values=values, default=int(current or 0))
        note += f"; values up to this machine's {cores} cores"
    elif flag.type == "int" and "worker" in reason:
        table.update(kind="int", values=sorted({int(current or 0), 0, 1, 2, 4}), default=int(current or 0))
    else:
        return None
    if flag.help:
        note += f" — help: {flag.help!r}"
    return table, note


def _moe_task(draft: ContractDraft, knobs: dict[str, dict[str, Any]], found: Any,
              values: dict[str, Any]) -> list[str]:
    """Mark an MoE job's workload and say whether its micro-batch is part of the task (moe_draft.py); where it is,
    the split knobs are taken out (their values pinned: the arguments returned) with the constraints that tie
    them."""
    settings = {s.key: current(s, found.given) for s in found.settings}
    task = read_moe({**settings, **values})
    if task is None:
        return []
    draft.set("workload.family", "moe", "guessed: the job's settings name experts (for the experience bank)")
    draft.set("workload.experts", task.experts)
    if task.top_k:
        draft.set("workload.top_k", task.top_k)
    split = split_knob_names(knobs, found.plan.constraints)
    note = moe_note(task, split)
    draft.said.append(note)
    draft.notes["workload.family"] += f"; {note}"
    if not task.micro_batch_in_task:
        return []
    pinned: list[str] = []
    for name in split:
        table = knobs.pop(name)
        draft.notes.pop(f"knobs.{name}", None)
        if "flag" in table and table.get("default") is not None:
            pinned += [table["flag"], str(table["default"])] if table.get("form") != "equals" else \
                [f"{table['flag']}={table['default']}"]
    found.plan.constraints[:] = [c for c in found.plan.constraints if not set(c.get("knobs", ())) & set(split)]
    return pinned


def draft_contract(command: str, summary: RepoSummary, *, tokens_per_step: int | None = None,
                   step_regex: str | None = None) -> ContractDraft:
    """A contract for ``command`` in the scanned repo; raises :class:`DraftError` when it must ask."""
    if not command.strip():
        raise DraftError("the command is empty; pass --command \"python train.py ...\"")
    try:
        job = read_job(command, summary.root)
    except LaunchError as e:
        raise DraftError(f"--command: {e}") from None
    launch = job.launch
    draft = ContractDraft()
    draft.set("version", 1)
    prog = list(job.prog)
    user_args = canonical_flags(list(job.args), summary.flags)
    given = given_values(user_args)

    values = {f.dest: _value_of(f, given) for f in summary.flags}
    global_batch = next((v for d, v in values.items() if _GLOBAL_BATCH.match(d) and isinstance(v, int)), None)
    seq_len = next((v for d, v in values.items() if _SEQ_LEN.match(d) and isinstance(v, int)), None)

    knobs: dict[str, dict[str, Any]] = {}
    for f in summary.flags:
        made = _knob_table(f, values[f.dest], global_batch)
        if made is not None:
            table, note = made
            knobs[f.dest] = table
            draft.notes[f"knobs.{f.dest}"] = note
    data_seq = None if seq_len else data_sequence_length(summary.root, workdir=job.workdir, flag_values=values,
                                                         files=conventions.local_imports(summary))
    found = conventions.discover_all(summary, user_args, taken=set(knobs), env=dict(job.shell.env),
                                     workdir=job.workdir,
                                     data_seq=(data_seq.length, data_seq.note) if data_seq else None)
    for name, table in found.plan.knobs.items():
        knobs[name] = table
    draft.notes.update(found.plan.notes)
    layout = plan_parallel(found.settings, given, world_size=launch.world_size if launch else 1,
                           ranks_per_node=launch.ranks_per_node if launch else 1, taken=set(knobs))
    knobs.update(layout.knobs)
    draft.notes.update(layout.notes)
    found.plan.deferred += layout.deferred
    if launch is not None:
        launch.write(draft)
    pinned = _moe_task(draft, knobs, found, values)
    knob_flags = {t["flag"] for t in knobs.values() if "flag" in t}
    fixed = strip_flags(user_args, knob_flags) + found.extra_args + pinned
    draft.set("workload.command", prog, "the entry command; 'python' means the interpreter that runs infrarsi"
              + (f"\n{job.shell.note()}" if job.shell.origin or job.shell.dropped else ""))
    draft.set("workload.args", fixed, "fixed arguments that define the job; every candidate runs with them")
    if job.workdir != ".":
        draft.set("workload.workdir", job.workdir, f"from the command: cd {job.workdir}; the job starts there")
    env = {k: v for k, v in job.shell.env if k not in {t.get("env") for t in knobs.values()}}
    if env:
        draft.set("workload.env", env, "from the command: the environment it sets for the job")

    if tokens_per_step is not None:
        draft.set("workload.tokens_per_step", tokens_per_step, "given on the command line")
    elif global_batch and seq_len and found.classified.token_batch is None and not found.classified.coupled:
        gb = next(f for f in summary.flags if _GLOBAL_BATCH.match(f.dest))
        sl = next(f for f in summary.flags if _SEQ_LEN.match(f.dest))
        draft.set("workload.tokens_per_step", global_batch * seq_len,
                  f"guessed: {gb.flag} ({global_batch}) x {sl.flag} ({seq_len})")
    elif global_batch and data_seq and found.classified.token_batch is None and not found.classified.coupled:
        gb = next(f for f in summary.flags if _GLOBAL_BATCH.match(f.dest))
        draft.set("workload.tokens_per_step", global_batch * data_seq.length,
                  f"guessed: {gb.flag} ({global_batch}) x the sequence length {data_seq.length}: {data_seq.note}")
    elif found.tokens is not None:
        draft.set("workload.tokens_per_step", found.tokens[0], found.tokens[1])
    elif (loader := loader_batch(summary)) is not None:
        draft.set("workload.tokens_per_step", loader[0], loader[1])
    else:
        draft.tokens_unread = (f"no batch size and sequence length found in {summary.entry or 'the command'}: "
                               f"{found.describe()}")
        draft.set("workload.tokens_per_step", 1, "not read from the code: measured below before anything is written")

    uses_probe = any(f.uses_probe for f in summary.files)
    if uses_probe and step_regex is None:
        draft.set("timing.source", "probe", "guessed: the repo imports infrarsi.probe")
    else:
        conventions.set_step_line(draft, summary, step_regex, _DEFAULT_STDOUT_REGEX, found)
    length = read_length(summary.flags, values, found.settings, found.given)
    timing = draft.data.get("timing", {})
    set_length(draft, length, per_line=timing.get("steps_per_line", 1),
               unit="optimizer steps" if timing.get("source") == "optimizer" else "step lines")

    draft.set("loss.rtol", LOSS_RTOL_CAP, f"drafted: an upper bound, tighter than the {LossSpec().rtol} a "
              "contract without this line gets (docs/contract.md); `infrarsi doctor` sets the band from the "
              "baseline's own run-to-run spread and what a dtype change moves (docs/doctor.md)")
    draft.set("loss.final_rtol", LOSS_RTOL_CAP, f"drafted: an upper bound on the final loss's tolerance, tighter than "
              f"the {LossSpec().final_rtol} a contract without this line gets; the doctor calibrates it")

    reach = analyse(summary.root, [*prog, *fixed], workdir=job.workdir,
                    knobs={*knobs, *(t["flag"].lstrip("-").split("=")[0] for t in knobs.values() if "flag" in t)})
    scope = draft_scope(summary, reach)
    draft.set("scope.editable", scope.editable, scope.editable_note)
    draft.set("scope.locked", scope.locked, scope.locked_note)
    draft.set("scope.allow_imports", False, "default: patches may not add imports")
    refs = conventions.job_paths(found, summary, user_args, workdir=job.workdir,
                                 job_files=sorted(reach.modules) if reach.modules else None)
    conventions.find_data(found, summary, user_args, refs, workdir=job.workdir)

    for name, table in knobs.items():
        for key, value in table.items():
            draft.set(f"knobs.{name}.{key}", value)
    micro = next((n for n in knobs if "micro" in (_knob_reason(n) or "")), None)
    if micro and global_batch:
        draft.data.setdefault("constraints", []).append(
            {"kind": "divides", "knob": micro, "value": global_batch, "reason": "gradient accumulation needs whole micro-batches"})
        draft.notes["constraints"] = "guessed: the micro-batch must divide the global batch"

    if found.data_paths:
        draft.set("data.paths", found.data_paths, found.data_note)
    if found.plan.deferred:
        draft.notes["workload.args"] += ("; settings found but not offered as knobs (the contract cannot pass them "
                                         "this way yet): " + "; ".join(found.plan.deferred))
    for c in found.plan.constraints:
        draft.data.setdefault("constraints", []).append(c)
        draft.notes.setdefault("constraints", "guessed: " + c["reason"])

    draft_precision(draft)
    draft.set("budget.trials", 30, "default")
    draft.set("budget.trial_timeout_s", 600, "default: a trial running longer is killed as a timeout")
    draft.set("approvers.users", [], "nobody yet: add the logins of the team leads who approve promotions")
    return draft
