"""Load a contract strictly: from ``infrarsi.toml`` or the ``[tool.infrarsi]`` table of ``pyproject.toml``.

Every problem is a :class:`ContractError` naming the file, the key and what
was expected; nothing half-valid comes out of here.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from infrarsi.contract.errors import ContractError
from infrarsi.contract.entry import split_command
from infrarsi.contract.knob_codec import DEFAULT_BOOL_TEXT
from infrarsi.contract.model import (
    CONTRACT_VERSION,
    MERGE_SETTINGS,
    ActionsLaunch,
    ApplySpec,
    Approvers,
    Budget,
    Constraint,
    Contract,
    DataSpec,
    Knob,
    KnobValue,
    Launch,
    LossSpec,
    Scope,
    SlurmLaunch,
    Timing,
    VerifySpec,
    WAIVABLE,
    Workload,
)
from infrarsi.contract.precision import parse_precision
from infrarsi.contract.scope import check_scope
from infrarsi.contract.strict_toml import Table, describe
from infrarsi.rundir import STATE_DIR

CONTRACT_FILE = "infrarsi.toml"
PYPROJECT_FILE = "pyproject.toml"

_KNOB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OVERRIDE_KEY = re.compile(r"^\+{0,2}[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_0-9][A-Za-z0-9_\-]*)*$")
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "t": 10**12, "tb": 10**12}


def find_contract(root: Path) -> tuple[Path, str]:
    """Where the contract of ``root`` lives: its file and the key prefix inside it."""
    toml = root / CONTRACT_FILE
    if toml.is_file():
        return toml, ""
    pyproject = root / PYPROJECT_FILE
    if pyproject.is_file():
        data = _read_toml(pyproject)
        if isinstance(data.get("tool"), dict) and "infrarsi" in data["tool"]:
            return pyproject, "tool.infrarsi"
    raise ContractError(str(toml), "", "no contract found (no infrarsi.toml and no [tool.infrarsi] "
                        "in pyproject.toml); run `infrarsi init` first")


def load_contract(root: Path) -> Contract:
    """Find, read and validate the contract of the training repo at ``root``."""
    root = root.resolve()
    path, prefix = find_contract(root)
    data = _read_toml(path)
    if prefix:
        data = data["tool"]["infrarsi"]
    return parse_contract(data, source=path, root=root, prefix=prefix)


def contract_table(path: Path, prefix: str) -> dict[str, Any]:
    """The raw contract table (for hashing the contract by content, wherever it lives)."""
    data = _read_toml(path)
    return data["tool"]["infrarsi"] if prefix else data


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ContractError(str(path), "", f"not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ContractError(str(path), "", f"cannot be read: {e}") from None


def parse_contract(data: Any, *, source: Path, root: Path, prefix: str = "") -> Contract:
    """Validate a parsed TOML table into a :class:`Contract`."""
    file = str(source)
    top = Table(data, file=file, key=prefix)
    version = top.integer("version", CONTRACT_VERSION, minimum=1)
    if version != CONTRACT_VERSION:
        raise top.error("version", f"expected {CONTRACT_VERSION} (the only version this InfraRSI reads), got {version}")
    workload = _workload(top.table("workload", required=True), root)
    timing = _timing(top.table("timing"))
    loss = _loss(top.table("loss"))
    scope = _scope(top.table("scope"))
    knobs = _knobs(top.table("knobs"))
    constraints = _constraints(top, knobs)
    budget = _budget(top.table("budget"))
    verify = _verify(top.table("verify"))
    approvers = _approvers(top.table("approvers"))
    apply = _apply(top.table("apply"))
    launch_table = top.table("launch")
    slurm = _launch_slurm(launch_table.table("slurm"))
    launch = _launch(launch_table)
    launch = _with_slurm(launch_table, launch, slurm)
    data = _data(top.table("data"), root)
    precision = parse_precision(top.table("precision"))
    top.finish()

    _check_fixed_args(top, workload, knobs)
    defaults = {k.name: k.default for k in knobs}
    for i, c in enumerate(constraints):
        if not c.allows(defaults):
            raise top.error(f"constraints[{i}]", f"the knobs' defaults violate it ({c.describe()})")
    check_scope(scope, root=root, file=file, prefix=prefix)
    return Contract(version=version, source=source, root=root, workload=workload, timing=timing, loss=loss,
                    scope=scope, knobs=knobs, constraints=constraints, budget=budget, verify=verify,
                    approvers=approvers, apply=apply, launch=launch, data=data, precision=precision)


def _command(t: Table, key: str, *, required: bool) -> tuple[str, ...]:
    expected = "a string or an array of strings"
    value = t.raw(key, expected=expected) if required else t.raw(key, None)
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            parts = tuple(split_command(value))
        except ValueError as e:
            raise t.error(key, f"expected a shell-like command line, got {value!r} ({e})") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = tuple(value)
    else:
        raise t.error(key, f"expected {expected}, got {describe(value)}")
    if required and not parts:
        raise t.error(key, "expected a non-empty command")
    return parts


def _workload(t: Table, root: Path) -> Workload:
    command = _command(t, "command", required=True)
    args = _command(t, "args", required=False)
    tokens = t.integer("tokens_per_step", minimum=1)
    if t.has("cwd"):
        raise t.error("cwd", "renamed workload.workdir (the job's working directory, relative to the repo)")
    workdir = _workdir(t, root)
    env = _fixed_env(t)
    family = t.string("family", "dense", choices=("dense", "moe"))
    flops = t.number("model_flops_per_step", None)
    experts = t.integer("experts", None, minimum=1)
    top_k = t.integer("top_k", None, minimum=1)
    t.finish()
    if top_k is not None and experts is not None and top_k > experts:
        raise t.error("top_k", f"expected at most workload.experts = {experts}, got {top_k}")
    return Workload(command=command, args=args, tokens_per_step=tokens, workdir=workdir, env=env, family=family,
                    model_flops_per_step=flops, experts=experts, top_k=top_k)


def _workdir(t: Table, root: Path) -> str:
    """``workload.workdir``: a directory inside the repo, normalised (``./a/b/`` is ``a/b``)."""
    raw = t.string("workdir", ".")
    path = PurePosixPath(raw)
    if path.is_absolute() or ".." in path.parts:
        raise t.error("workdir", f"expected a directory inside the repo (relative to it), got {raw!r}")
    workdir = path.as_posix()
    if not (root / workdir).is_dir():
        raise t.error("workdir", f"expected a directory inside the repo, got {raw!r} (no such directory)")
    return workdir


def _fixed_env(t: Table) -> tuple[tuple[str, str], ...]:
    """``workload.env``: environment variables the job's command sets, each a string (``{OMP_NUM_THREADS = "1"}``)."""
    table = t.table("env")
    out = []
    for name in table.data:
        if not _ENV_NAME.match(name):
            raise table.error(name, "expected an environment variable name (letters, digits, _)")
        value = table.raw(name)
        if not isinstance(value, str):
            raise table.error(name, f"expected a string (environment values are text), got {describe(value)}")
        out.append((name, value))
    table.finish()
    return tuple(out)


def _timing(t: Table) -> Timing:
    source = t.string("source", "probe", choices=("probe", "stdout", "optimizer"))
    warmup = t.integer("warmup_steps", 2, minimum=1)
    measured = t.integer("measured_steps", 6, minimum=2)
    regex = t.string("stdout_regex", None)
    stream = t.string("stream", "stdout", choices=("stdout", "stderr"))
    steps_per_line = t.integer("steps_per_line", 1, minimum=1)
    floor = t.integer("min_measured_steps", None, minimum=3)
    t.finish()
    if floor is not None and floor > measured:
        raise t.error("min_measured_steps", f"expected at most measured_steps = {measured}, got {floor}")
    if regex is not None:
        try:
            compiled = re.compile(regex)
        except re.error as e:
            raise t.error("stdout_regex", f"expected a regular expression, got {regex!r} ({e})") from None
        if "loss" not in compiled.groupindex:
            raise t.error("stdout_regex", "expected a named group (?P<loss>...) in the regular expression")
    elif source == "stdout":
        raise t.error("stdout_regex", "missing; expected a regular expression with a (?P<loss>...) group "
                      "when timing.source = 'stdout'")
    if source == "optimizer" and steps_per_line != 1:
        raise t.error("steps_per_line", f"expected 1 with timing.source = 'optimizer' (one event per optimizer "
                      f"step), got {steps_per_line}")
    return Timing(source=source, warmup_steps=warmup, measured_steps=measured, stdout_regex=regex, stream=stream,
                  steps_per_line=steps_per_line, min_measured_steps=floor)


def _loss(t: Table) -> LossSpec:
    spec = LossSpec(rtol=t.number("rtol", 0.02), final_rtol=t.number("final_rtol", 0.01))
    t.finish()
    return spec


def _scope(t: Table) -> Scope:
    scope = Scope(editable=t.strings("editable", ()), locked=t.strings("locked", ()),
                  allow_imports=t.boolean("allow_imports", False))
    t.finish()
    return scope


def _knobs(t: Table) -> tuple[Knob, ...]:
    knobs = []
    for name in list(t.data):
        t.raw(name)
        if not _KNOB_NAME.match(name):
            raise t.error(name, "expected a knob name made of letters, digits and underscores")
        knobs.append(_knob(name, t.table(name)))
    t.finish()
    return tuple(knobs)


def _knob(name: str, t: Table) -> Knob:
    kind = t.string("kind", choices=("categorical", "int", "float", "bool"))
    values: tuple[KnobValue, ...] | None = None
    low = high = None
    if kind == "categorical":
        raw = t.raw("values", expected="a non-empty array of strings or numbers")
        if not isinstance(raw, list) or not raw or not all(isinstance(v, str | int | float) for v in raw):
            raise t.error("values", f"expected a non-empty array of strings or numbers, got {describe(raw)}")
        values = tuple(raw)
    elif kind in ("int", "float"):
        if t.has("values"):
            raw = t.raw("values")
            ok = isinstance(raw, list) and raw and all(
                not isinstance(v, bool) and isinstance(v, int if kind == "int" else int | float) for v in raw)
            if not ok:
                raise t.error("values", f"expected a non-empty array of {'integers' if kind == 'int' else 'numbers'}, "
                              f"got {describe(raw)}")
            values = tuple(raw)
        else:
            low = t.number("low", positive=False)
            high = t.number("high", positive=False)
            if kind == "int" and not (low.is_integer() and high.is_integer()):
                raise t.error("low", "expected integer bounds for an int knob")
            if not low < high:
                raise t.error("high", f"expected a bound above low = {low:g}, got {high:g}")
    log = t.boolean("log", False)
    passing = _read_passing(t)
    note = t.raw("note", "")
    if not isinstance(note, str):
        raise t.error("note", f"expected a string, got {describe(note)}")
    decides = tuple(t.strings("decides", []))  # infrarsi.decisions: what the knob chooses
    default = t.raw("default", expected="the value the baseline uses")
    t.finish()
    passing = _check_passing(t, kind, **passing)
    knob = Knob(name=name, kind=kind, default=default, values=values, low=low, high=high, log=log,
                note=note, decides=decides, **passing)
    if not knob.contains(default):
        raise t.error("default", f"expected {knob.domain_text()}, got {describe(default)}")
    if values is not None:
        texts = [knob.codec.to_cli(v) for v in values]
        twins = sorted({x for x in texts if texts.count(x) > 1})
        if twins:
            raise t.error("values", f"expected values the job can tell apart, got {twins[0]!r} twice "
                          "on its command line")
    return knob


def _read_passing(t: Table) -> dict[str, Any]:
    """The keys that say how the knob reaches the job (see :class:`Knob`), each of its TOML type."""
    return dict(flag=t.string("flag", None), env=t.string("env", None), override=t.string("override", None),
                form=t.string("form", "separate", choices=("separate", "equals")),
                switch=t.boolean("switch", False), off_flag=t.string("off_flag", None),
                bool_text=t.raw("bool_text", None))


def _check_passing(t: Table, kind: str, *, flag: str | None, env: str | None, override: str | None, form: str,
                   switch: bool, off_flag: str | None, bool_text: Any) -> dict[str, Any]:
    """The passing keys checked together; the keyword arguments of the knob's record."""
    if sum(x is not None for x in (flag, env, override)) != 1:
        raise t.error("flag", "expected exactly one of 'flag' (a command-line flag), 'override' (a Hydra "
                      "override key) or 'env' (an environment variable) to say how the knob reaches the job")
    if flag is not None and not flag.startswith("-"):
        raise t.error("flag", f"expected a command-line flag starting with '-', got {flag!r}")
    if env is not None and not _ENV_NAME.match(env):
        raise t.error("env", f"expected an environment variable name, got {env!r}")
    if override is not None and not _OVERRIDE_KEY.match(override):
        raise t.error("override", f"expected a Hydra override key such as 'trainer.precision' or "
                      f"'+model.compile', got {override!r}")
    if form != "separate" and flag is None:
        raise t.error("form", "expected only on a knob passed as a flag")
    if switch and (kind != "bool" or flag is None):
        raise t.error("switch", "expected only on a bool knob passed as a flag")
    if off_flag is not None and not (switch and off_flag.startswith("-") and off_flag != flag):
        raise t.error("off_flag", f"expected a flag starting with '-' other than {flag!r}, on a knob with "
                      "switch = true (the flag passed when the value is false)")
    spelled = ("true", "false") if override is not None else DEFAULT_BOOL_TEXT
    if bool_text is not None:
        if kind != "bool" or switch:
            raise t.error("bool_text", "expected only on a bool knob passed with a value (not a switch)")
        pair = isinstance(bool_text, list) and len(bool_text) == 2 and all(isinstance(b, str) and b for b in bool_text)
        if not pair or bool_text[0] == bool_text[1]:
            raise t.error("bool_text", f"expected two different strings [TRUE, FALSE] such as ['True', 'False'], "
                          f"got {describe(bool_text)}")
        spelled = (bool_text[0], bool_text[1])
    return dict(flag=flag, env=env, override=override, form=form, switch=switch, off_flag=off_flag,
                bool_text=spelled)


def _constraints(top: Table, knobs: tuple[Knob, ...]) -> tuple[Constraint, ...]:
    raw = top.raw("constraints", [], expected="an array of tables")
    if not isinstance(raw, list):
        raise top.error("constraints", f"expected an array of tables ([[constraints]]), got {describe(raw)}")
    names = {k.name: k for k in knobs}
    out = []
    for i, item in enumerate(raw):
        t = Table(item, file=top.file, key=top.path(f"constraints[{i}]"))
        kind = t.string("kind", choices=("divides", "forbid", "product"))
        reason = t.string("reason", "")
        if kind == "divides":
            knob = t.string("knob")
            value = t.integer("value", minimum=1)
            if knob not in names:
                raise t.error("knob", f"expected the name of a knob ({', '.join(names) or 'none defined'}), got {knob!r}")
            out.append(Constraint(kind="divides", knob=knob, value=value, reason=reason))
        elif kind == "product":
            coupled = t.strings("knobs", ())
            value = t.integer("value", minimum=1)
            unknown = [k for k in coupled if k not in names]
            if len(coupled) < 2 or unknown:
                raise t.error("knobs", f"expected the names of at least two knobs ({', '.join(names) or 'none defined'}),"
                              f" got {list(coupled)!r}")
            out.append(Constraint(kind="product", knobs=coupled, value=value, reason=reason))
        else:
            when = t.table("when", required=True)
            for key in when.data:
                when.raw(key)
                if key not in names:
                    raise when.error(key, f"expected the name of a knob ({', '.join(names)}), got {key!r}")
                if not names[key].contains(when.data[key]):
                    raise when.error(key, f"expected {names[key].domain_text()}, got {describe(when.data[key])}")
            out.append(Constraint(kind="forbid", when=tuple(sorted(when.data.items())), reason=reason))
        t.finish()
    return tuple(out)


def parse_memory(value: Any) -> int | None:
    """Bytes from an integer or a string like ``"6GiB"``; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
            return n if n > 0 else None
    return None


def memory_text(n: int) -> str:
    """Bytes in the largest binary unit that keeps the figure at least 1 (``9.35 MiB``, ``1000 B``): the
    inverse of :func:`parse_memory` for people."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def _budget(t: Table) -> Budget:
    trials = t.integer("trials", 30, minimum=1)
    seconds = t.number("seconds", None)
    timeout = t.number("trial_timeout_s", 600.0)
    raw = t.raw("memory_limit", None)
    limit = None
    if raw is not None:
        limit = parse_memory(raw)
        if limit is None:
            raise t.error("memory_limit", f"expected a positive number of bytes or a size like '6GiB', got {describe(raw)}")
    t.finish()
    return Budget(trials=trials, seconds=seconds, trial_timeout_s=timeout, memory_limit_bytes=limit)


def _verify(t: Table) -> VerifySpec:
    d = VerifySpec()
    spec = VerifySpec(min_effect=t.number("min_effect", d.min_effect, positive=False),
                      alpha=t.number("alpha", d.alpha), power=t.number("power", d.power),
                      target_effect=t.number("target_effect", d.target_effect),
                      max_pairs=t.integer("max_pairs", d.max_pairs, minimum=4),
                      max_speedup=t.number("max_speedup", d.max_speedup),
                      top_k=t.integer("top_k", d.top_k, minimum=1),
                      quiet_wait_s=t.number("quiet_wait_s", d.quiet_wait_s, positive=False),
                      waive=tuple(t.strings("waive", [])))
    unknown = [w for w in spec.waive if w not in WAIVABLE]
    if unknown:
        raise t.error("waive", f"{unknown[0]!r} is not a row a verdict can waive (one of: {', '.join(WAIVABLE)})")
    if spec.quiet_wait_s < 0:
        raise t.error("quiet_wait_s", f"expected a number of seconds >= 0, got {spec.quiet_wait_s:g}")
    if not 0 < spec.alpha < 0.5:
        raise t.error("alpha", f"expected a number in (0, 0.5), got {spec.alpha:g}")
    if not 0 < spec.power < 1:
        raise t.error("power", f"expected a number in (0, 1), got {spec.power:g}")
    if not 0 <= spec.min_effect < spec.target_effect:
        raise t.error("min_effect", f"expected a number in [0, target_effect = {spec.target_effect:g}), "
                      f"got {spec.min_effect:g}")
    t.finish()
    return spec


_ENDPOINT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


EXECUTORS = ("local", "torchrun", "actions", "slurm")  # bot/executors/registry.py has a factory for each
_ONE_PROCESS = {"local": "one process on this machine", "actions": "one process on each runner"}


def _launch(t: Table) -> Launch:
    executor = t.string("executor", "local", choices=EXECUTORS)
    nproc = t.integer("nproc_per_node", 1, minimum=1)
    nnodes = t.integer("nnodes", 1, minimum=1)
    node_rank = t.integer("node_rank", 0, minimum=0)
    endpoint = t.string("rdzv_endpoint", None)
    backend = t.string("rdzv_backend", "c10d", choices=("c10d", "static", "etcd", "etcd-v2"))
    rdzv_id = t.string("rdzv_id", None)
    actions = _actions(t.table("actions"))
    t.finish()
    if executor not in ("torchrun", "slurm"):  # a Slurm trial's ranks are checked by _with_slurm
        for key, value, default in (("nproc_per_node", nproc, 1), ("nnodes", nnodes, 1),
                                    ("node_rank", node_rank, 0)):
            if value != default:
                raise t.error(key, f"expected {default} with launch.executor = '{executor}' "
                              f"({_ONE_PROCESS[executor]}), got {value}; set executor = 'torchrun' for a "
                              "multi-process job")
        if endpoint is not None:
            raise t.error("rdzv_endpoint", "expected only with launch.executor = 'torchrun'")
    if node_rank >= nnodes:
        raise t.error("node_rank", f"expected an integer in [0, nnodes = {nnodes}), got {node_rank}")
    if endpoint is not None:
        m = _ENDPOINT.match(endpoint)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise t.error("rdzv_endpoint", f"expected HOST:PORT (the rendezvous every node joins), got {endpoint!r}")
    elif nnodes > 1:
        raise t.error("rdzv_endpoint", f"missing; expected HOST:PORT that all {nnodes} nodes can reach when "
                      "launch.nnodes > 1")
    return Launch(executor=executor, nproc_per_node=nproc, nnodes=nnodes, node_rank=node_rank,
                  rdzv_endpoint=endpoint, rdzv_backend=backend, rdzv_id=rdzv_id, actions=actions)


def _actions(t: Table) -> ActionsLaunch:
    """``[launch.actions]``: read whichever executor the contract names (``--executor actions`` may pick it)."""
    d = ActionsLaunch()
    workflow = t.string("workflow", d.workflow)
    if "/" in workflow or not workflow.endswith((".yml", ".yaml")):
        raise t.error("workflow", f"expected a workflow file name under .github/workflows/ (e.g. "
                      f"'{d.workflow}'), got {workflow!r}")
    actions = ActionsLaunch(workflow=workflow, runners=t.integer("runners", d.runners, minimum=1),
                            devices=t.integer("devices", d.devices, minimum=1),
                            poll_interval_s=t.number("poll_interval_s", d.poll_interval_s),
                            remote=t.string("remote", d.remote))
    t.finish()
    return actions


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def _slurm_minutes(t: Table, key: str) -> int | None:
    """Slurm's time formats (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]) as whole minutes, rounded up as Slurm does."""
    raw = t.raw(key, None)
    if raw is None:
        return None
    expected = "whole minutes (an integer >= 1) or a Slurm time like '1:30:00' or '2-00:00:00'"
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
        return raw
    m = _TIME.match(raw) if isinstance(raw, str) else None
    if not m:
        raise t.error(key, f"expected {expected}, got {describe(raw)}")
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = a * 3600 + (b or 0) * 60 + c
    elif b is not None:  # MM:SS
        seconds = a * 60 + b
    else:  # minutes
        seconds = a * 60
    if seconds <= 0:
        raise t.error(key, f"expected {expected}, got {describe(raw)}")
    return -(-seconds // 60)


def _launch_slurm(t: Table) -> SlurmLaunch:
    """``[launch.slurm]``: the batch job one trial asks for (docs/contract.md, "Slurm").

    Read whichever executor the contract names: ``--executor slurm`` on a verb may pick it.
    """
    d = SlurmLaunch()
    memory = t.raw("memory", None)
    memory_bytes = parse_memory(memory) if memory is not None else None
    if memory is not None and memory_bytes is None:
        raise t.error("memory", f"expected a size per node like '16GiB' (or bytes), got {describe(memory)}")
    args = t.strings("sbatch_args", ())
    for i, arg in enumerate(args):
        if arg.split("=", 1)[0] in ("--export", "--wrap", "-o", "--output", "-e", "--error", "--parsable"):
            raise t.error(f"sbatch_args[{i}]", f"{arg!r} is set by the Slurm executor itself; remove it")
    slurm = SlurmLaunch(
        partition=t.string("partition", None), account=t.string("account", None), qos=t.string("qos", None),
        nodes=t.integer("nodes", d.nodes, minimum=1), tasks_per_node=t.integer("tasks_per_node", d.tasks_per_node,
                                                                               minimum=1),
        gpus_per_node=t.integer("gpus_per_node", d.gpus_per_node, minimum=0), gres=t.string("gres", None),
        cpus_per_task=t.integer("cpus_per_task", None, minimum=1), time_limit_min=_slurm_minutes(t, "time_limit"),
        memory_bytes=memory_bytes, sbatch_args=args, workdir=t.string("workdir", None),
        requeue=t.boolean("requeue", d.requeue), retry_node_fail=t.boolean("retry_node_fail", d.retry_node_fail),
        poll_s=t.number("poll_s", d.poll_s))
    t.finish()
    return slurm


def _with_slurm(t: Table, launch: Launch, slurm: SlurmLaunch) -> Launch:
    """Attach ``[launch.slurm]`` to ``launch``; under executor = 'slurm' the ranks come from it alone."""
    if launch.executor == "slurm":
        for key, value, default in (("nproc_per_node", launch.nproc_per_node, 1), ("nnodes", launch.nnodes, 1)):
            if value != default:
                raise t.error(key, f"expected {default} with launch.executor = 'slurm', got {value}; the ranks of a "
                              "Slurm trial are launch.slurm.nodes x launch.slurm.tasks_per_node")
    return replace(launch, slurm=slurm)


def _data(t: Table, root: Path) -> DataSpec:
    paths = t.strings("paths", ())
    t.finish()
    for p in paths:
        parts = Path(p).parts
        # one level above the repo is allowed (`../data`, where pytorch/examples-style jobs keep datasets): a
        # trial worktree's parent is InfraRSI's worktrees directory, where the links land, shared by the trials
        inside = parts[1:] if parts[:1] == ("..",) and len(parts) > 1 else parts
        if not p or Path(p).is_absolute() or ".." in inside:
            raise t.error("paths", f"expected paths inside the repo or one level above it (../data), got {p!r}; "
                          "a job that reads data further away can take its absolute path")
        if parts and parts[0] in (".git", STATE_DIR):
            raise t.error("paths", f"expected a data path, got {p!r} (InfraRSI's or git's own directory)")
        if not (root / p).exists():
            raise t.error("paths", f"expected existing files or directories, got {p!r} (not found under {root}); "
                          "prepare the data first, or remove it from data.paths")
    return DataSpec(paths=paths)


def _approvers(t: Table) -> Approvers:
    approvers = Approvers(users=t.strings("users", ()), teams=t.strings("teams", ()))
    t.finish()
    return approvers


def _apply(t: Table) -> ApplySpec:
    spec = ApplySpec(merge_method=t.string("merge_method", "auto", choices=MERGE_SETTINGS))
    t.finish()
    return spec


def _check_fixed_args(top: Table, workload: Workload, knobs: tuple[Knob, ...]) -> None:
    """A knob's flag in the fixed arguments would let the baseline differ from its own defaults."""
    fixed = set(workload.command) | set(workload.args)
    fixed |= {a.split("=", 1)[0] for a in fixed if a.startswith("-")}
    keys = {a.split("=", 1)[0].lstrip("+~") for a in fixed if "=" in a and not a.startswith("-")}
    for k in knobs:
        for key, used in (("flag", k.flag), ("off_flag", k.off_flag)):
            if used is not None and used in fixed:
                raise ContractError(top.file, top.path(f"knobs.{k.name}.{key}"),
                                    f"expected a flag that workload.command and workload.args do not already set, "
                                    f"got {used!r}")
        if k.env is not None and k.env in dict(workload.env):
            raise ContractError(top.file, top.path(f"knobs.{k.name}.env"),
                                f"expected a variable that workload.env does not already set, got {k.env!r}")
        if k.override is not None and k.override.lstrip("+") in keys:
            raise ContractError(top.file, top.path(f"knobs.{k.name}.override"),
                                f"expected a key that workload.args does not already override, got {k.override!r}")
