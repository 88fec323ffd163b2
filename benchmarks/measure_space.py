"""Measure every configuration of a designed space of a fixture through ``infrarsi trial``: a table of real trials.

    .venv/bin/python -m benchmarks.measure_space tinygpt     # -> benchmarks/data/tinygpt.json
    .venv/bin/python -m benchmarks.measure_space tinymoe     # -> benchmarks/data/tinymoe.json
    .venv/bin/python -m benchmarks.measure_space tinygpt --smoke --out /tmp/tiny.json

Run it alone on the machine. If anything else must run beside it, give the measurement the CPU first:
``sysctl kernel.sched_autogroup_enabled=0`` and ``nice -n -10`` on the measurement (never ``nice -n 19``,
which hands every other process the trials' cores). The table records the niceness it ran at.

On a fresh copy of the fixture (``benchmarks/fixture_search.py``'s
``make_repo``: a git repository with its contract and lock), every
configuration of the design in :data:`DESIGNS` (the knobs that move time or
memory crossed with every valid set of the patches that matter: 160 per
fixture) runs ``--repeats`` times (3) as ``infrarsi trial --json`` with the
stated memory limit (an OOM is recorded as censored: the peak seen is a lower
bound). Rounds are interleaved: round ``r`` runs every configuration once, in
an order shuffled per round, so slow drift of the machine spreads evenly over
configurations. Each trial's result is written to the table as it finishes;
a restart skips what is done (same ``--out``). ``--smoke`` measures a 4-point
space once (to check the plumbing; never commit its output as a table).
``--steady-supplement`` gives a table measured before trials sampled steady
memory the default configuration's steady share of its peak (the memory
model's split; the replay applies it to the default's runs), measured on the
machine at hand (memory depends far less on the CPU than time does; the
supplement records its own fingerprint).
Reading a table: ``benchmarks/space_table.py``; replaying tuners on it:
``benchmarks/search_table.py``. Timing needs a quiet machine.

Table schema (JSON, ``version`` 1)::

    {
      "version": 1,
      "fixture": "tinygpt",
      "machine": {"cpu": "AMD EPYC ...", "flags": {"avx2": true, "avx512_bf16": true, "amx": false},
                  "cores": 2, "torch": "2.13.0+cpu", "python": "3.11.9", "platform": "Linux-..."},
      "memory_limit_bytes": 1181116006,          # every trial ran under this limit
      "repeats": 3,                               # runs wanted per configuration
      "knobs": [{"name": "dtype", "kind": "categorical", "values": ["fp32", "bf16"], "default": "fp32"},
                {"name": "grad_ckpt", "kind": "bool", "default": false}, ...],   # the measured domains
      "constraints": [{"kind": "divides", "knob": "micro_batch", "value": 16, "reason": "..."}],
      "patches": [<PatchSpec.to_dict()>, ...],   # ids, requires/conflicts/decides, prior effects
      "workload": "python train.py ...",          # the fixed job (the contract's command and args)
      "command": "python -m benchmarks.measure_space tinygpt",
      "wall_s": 7200.0,                           # wall time of every session of the measurement so far
      "started": "2026-12-04T05:00:00Z", "updated": "...",
      "configs": [
        {"knobs": {"dtype": "bf16", "grad_ckpt": false, "micro_batch": 4, ...},
         "patches": ["fused_gelu"],
         "runs": [{"round": 0, "outcome": "ok", "step_time_s": 0.71, "peak_mem_bytes": 678428672,
                   "censored": false, "cost_s": 14.2, "steady_mem_bytes": 512000000},
                  {"round": 1, "outcome": "oom", "step_time_s": null, "peak_mem_bytes": 1181116006,
                   "censored": true, "cost_s": 6.1}, ...]}
      ]
    }

The space is the contract's knobs restricted to ``knobs``' values with the
listed patches (``SearchSpace.from_contract``), and a complete table holds
every valid point of it. ``outcome`` is ``ok``, ``oom`` or ``crash`` (a
timeout or an invalid trial is read as crash); ``cost_s`` is the device-seconds
the bot charged; ``step_time_s`` is the bot's own median over the measured
steps; ``steady_mem_bytes`` (absent in tables measured before it existed) the
resident memory the job held across steps, which the memory model splits the
peak by.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.doc_sections import recorded_command
from benchmarks.fixture_search import REPO_ROOT, infrarsi, make_repo
from benchmarks.search_tuners import key
from benchmarks.space_table import SUPPLEMENT, Run, Table, compared_keys, config_candidate, load, save, to_json
from infrarsi.contract import load_contract
from infrarsi.contract.load import parse_memory
from simlab.cluster.knobs import Value

#: What is measured per fixture: knob values (the other knobs stay at their defaults), the patches whose
#: every valid subset is crossed with them, the workload and the memory limit. Chosen from each fixture's
#: README: the settings that moved step time or memory beyond noise (tinygpt: dtype, micro-batch,
#: checkpointing, the SDPA and GELU edits; tinymoe: the same knobs, the grouped-experts and fused
#: cross-entropy patches), plus the fused optimizer to reach 160 points. ``compile`` is left out: a cold
#: inductor cache makes its first trial 30 s slower, which a table of three repeats cannot separate from the
#: steady state. tinygpt runs at 64 x 16 tokens a step (tinymoe's contract already does) so that a trial
#: takes seconds; the memory limits put the largest micro-batches without checkpointing over the limit
#: (tinygpt at this size on the AMD EPYC: 447 MiB at micro-batch 1, 641 MiB at 16).
DESIGNS: dict[str, dict[str, Any]] = {
    "tinygpt": {"knobs": {"dtype": ("fp32", "bf16"), "micro_batch": (1, 2, 4, 8, 16), "grad_ckpt": (False, True),
                          "optimizer": ("adamw", "adamw_fused")},
                "patches": ("sdpa_causal_attention", "fused_gelu"), "memory_limit": "600MiB",
                "memory_limit_native_bf16": "620MiB", "command": "python train.py --seq-len 64 --global-batch 16"},
    "tinymoe": {"knobs": {"dtype": ("fp32", "bf16"), "micro_batch": (1, 2, 4, 8, 16), "grad_ckpt": (False, True),
                          "optimizer": ("adamw", "adamw_fused")},
                "patches": ("grouped_experts", "fused_cross_entropy"), "memory_limit": "700MiB"},
}
#: tinymoe's 700MiB censors nothing, on purpose: calibrated on the AMD EPYC (2 cores, AVX2) that measured its
#: table, its peaks at the contract's size were 434-481 MiB whatever the micro-batch (the runtime's ~430 MiB
#: dominates), and at --seq-len 128/256 they still did not rise with the micro-batch (seq 256: 518 MiB at 1,
#: 787 at 8, 721 at 16; checkpointing no lower), so any limit in that range would be drawn by allocator noise,
#: not by the configuration. Its table has no OOM boundary; tinygpt's has one (micro-batch 16 without
#: checkpointing at 600MiB). On another machine check with ``--smoke`` before a real run.
#: On a CPU without native bf16 (no avx512_bf16, no AMX; the smoke run's AMD EPYC: fp32 micro-batch 2 at
#: 1.2 s per step, bf16 at 51 s, bf16 micro-batch 4 killed by the 600 s trial timeout) a bf16 point costs
#: minutes, and ``run`` leaves bf16 out of the search there anyway (the doctor's device probe): the design
#: then measures the thread count (torch's default, or 1) in its place, still 160 points — the space the
#: engine really searches on that machine. :func:`design_for` makes the swap; the table's fingerprint says
#: which machine it was. Where bf16 is native the design measures dtype, and tinygpt's limit is 620MiB: on the
#: AMD EPYC with AVX-512 BF16, without checkpointing at micro-batch 16 fp32 peaked at 656 MiB and bf16 at 597
#: (micro-batch 8: 565 and 531), so 600MiB would have cut bf16's largest micro-batch by allocator noise.
WITHOUT_NATIVE_BF16 = {"drop": "dtype", "add": ("threads", (0, 1))}
#: ``--smoke``: four points, no patch.
SMOKE = {"knobs": {"micro_batch": (2, 4), "grad_ckpt": (False, True)}, "patches": ()}


def native_bf16(machine: Mapping[str, Any]) -> bool:
    """Whether the fingerprinted CPU computes bf16 natively (AVX-512 BF16 or AMX) rather than emulating it."""
    flags = machine.get("flags", {})
    return bool(flags.get("avx512_bf16") or flags.get("amx"))


def design_for(fixture: str, machine: Mapping[str, Any]) -> dict[str, Any]:
    """The fixture's design, with dtype swapped for the thread count where bf16 would be emulated (and the
    memory limit for where it is native, when the design names one)."""
    design = dict(DESIGNS[fixture])
    native_limit = design.pop("memory_limit_native_bf16", None)
    if native_bf16(machine):
        return {**design, "memory_limit": native_limit or design["memory_limit"]}
    knobs = {k: v for k, v in design["knobs"].items() if k != WITHOUT_NATIVE_BF16["drop"]}
    name, values = WITHOUT_NATIVE_BF16["add"]
    design["knobs"] = {**knobs, name: values}
    return design


def machine_fingerprint() -> dict[str, Any]:
    """CPU model, the flags that decide bf16 speed, cores, torch: what a table's figures depend on."""
    cpu, flags, generation = platform.processor() or "unknown", set(), None
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        if m := re.search(r"^model name\s*:\s*(.+)$", text, re.M):
            cpu = m.group(1).strip()
        # a virtual machine's model name can be just "AMD EPYC"; family and model tell the generation apart
        family, model = (re.search(rf"^{f}\s*:\s*(\d+)$", text, re.M) for f in ("cpu family", "model"))
        if family and model:
            generation = f"{family.group(1)}/{model.group(1)}"
        if m := re.search(r"^flags\s*:\s*(.+)$", text, re.M):
            flags = set(m.group(1).split())
    except OSError:
        pass
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "absent"
    return {"cpu": cpu, "cpu_family_model": generation, "flags": {"avx2": "avx2" in flags, "avx512_bf16": "avx512_bf16" in flags,
                                  "amx": bool({"amx_bf16", "amx_tile"} & flags)},
            "cores": os.cpu_count(), "torch": torch, "python": platform.python_version(),
            "platform": platform.platform()}


def _contract_text(fixture: str, memory_limit: str) -> str | None:
    """The fixture's committed contract with the memory limit set, or None to let ``infrarsi init`` write it."""
    path = REPO_ROOT / "fixtures" / fixture / "infrarsi.toml"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    text = re.sub(r'(?m)^memory_limit\s*=.*\n', "", text)
    return text.replace("[budget]\n", f'[budget]\nmemory_limit = "{memory_limit}"\n', 1)


def fixture_repo(fixture: str, design: Mapping[str, Any], memory_limit: str, work: Path) -> Path:
    """A fresh git copy of the fixture with the contract its design measures (limit set, locked)."""
    return make_repo(work / fixture, memory_limit, _contract_text(fixture, memory_limit),
                     source=REPO_ROOT / "fixtures" / fixture, command=design.get("command", "python train.py"))


def new_table(repo: Path, fixture: str, design: Mapping[str, Any], memory_limit: float, repeats: int,
              command: str) -> Table:
    """The table's space from the fixture's contract: its knobs restricted to the design, the design's patches."""
    from bot.patching.catalog import applicable_patches

    contract = load_contract(repo)
    knobs = {k.name: k for k in contract.knobs}
    chosen = []
    for name, values in design["knobs"].items():
        if name not in knobs:
            raise SystemExit(f"{fixture}: the contract has no knob {name!r} (knobs: {', '.join(knobs)})")
        k = knobs[name]
        chosen.append(k if k.kind == "bool" else replace(k, values=tuple(values)))
    names = {k.name for k in chosen}
    patches = applicable_patches(contract)
    missing = [p for p in design["patches"] if p not in patches]
    if missing:
        raise SystemExit(f"{fixture}: patch {missing[0]} does not apply (applicable: {', '.join(sorted(patches))})")
    constraints = tuple(c for c in contract.constraints
                        if {c.knob, *c.knobs, *(k for k, _ in c.when)} - {None} <= names)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Table(fixture=fixture, machine=machine_fingerprint(), memory_limit_bytes=memory_limit,
                 knobs=tuple(chosen), constraints=constraints,
                 patches=tuple(patches[p] for p in design["patches"]), repeats=repeats,
                 meta={"workload": " ".join(contract.workload.command), "command": command, "wall_s": 0.0,
                       "started": now, "updated": now})


def _knob_text(value: Value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def trial(repo: Path, table: Table, config: Mapping[str, Value], memory_limit: str, round_: int) -> Run:
    """One ``infrarsi trial --json`` of ``config``."""
    args = []
    for k in table.knobs:
        args += ["--knob", f"{k.name}={_knob_text(config[k.name])}"]
    for p in table.patches:
        if config[p.id]:
            args += ["--patch", p.id]
    out = infrarsi("trial", str(repo), *args, "--memory-limit", memory_limit, "--run-id", "measure", "--json")
    record = json.loads(out.stdout)
    outcome = record["outcome"] if record["outcome"] in ("ok", "oom") else "crash"
    return Run(outcome=outcome, step_time_s=record.get("step_time_s") if outcome == "ok" else None,
               peak_mem_bytes=float(record.get("peak_mem_bytes") or 0.0), cost_s=float(record["cost_s"]),
               censored=bool(record.get("peak_mem_censored")) or outcome == "oom", round=round_,
               steady_mem_bytes=float(record["steady_mem_bytes"]) if record.get("steady_mem_bytes") else None)


def schedule(configs: Sequence[Mapping[str, Value]], repeats: int, seed: int) -> list[tuple[int, Mapping[str, Value]]]:
    """Rounds of every configuration once, each in its own shuffled order."""
    out = []
    for r in range(repeats):
        order = list(configs)
        random.Random(seed * 1000 + r).shuffle(order)
        out += [(r, c) for c in order]
    return out


def steady_supplement(fixture: str, out: Path, repeats: int, workdir: Path | None, command: str) -> int:
    """``--steady-supplement``: the default configuration's steady share of its peak, into ``out``'s supplement."""
    if not out.exists():
        raise SystemExit(f"{out}: no such table; measure it first")
    table = load(out)
    design = design_for(fixture, table.machine)  # the table's own space, whatever this machine would measure
    limit_text = design["memory_limit"]
    work = workdir or Path(tempfile.mkdtemp(prefix=f"infrarsi-steady-{fixture}-"))
    repo = fixture_repo(fixture, design, limit_text, work)
    runs = []
    for r in range(repeats):
        run = trial(repo, table, table.default(), limit_text, r)
        if run.outcome != "ok" or not run.steady_mem_bytes:
            raise SystemExit(f"{fixture}: the default configuration ran {run.outcome} without a steady sample; "
                             "nothing recorded")
        runs.append({"peak_mem_bytes": run.peak_mem_bytes, "steady_mem_bytes": run.steady_mem_bytes})
        print(f"{fixture} default {r + 1}/{repeats}: peak {run.peak_mem_bytes / 2**20:.0f} MiB, steady "
              f"{run.steady_mem_bytes / 2**20:.0f} MiB", file=sys.stderr, flush=True)
    share = statistics.median(x["steady_mem_bytes"] / x["peak_mem_bytes"] for x in runs)
    table.meta[SUPPLEMENT] = {"share": share, "runs": runs, "machine": machine_fingerprint(), "command": command,
                              "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    save(table, out)
    print(f"{out}: steady share of the default's peak {share:.3f} (median of {repeats})", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.measure_space", description=__doc__.split("\n")[0])
    ap.add_argument("fixture", choices=sorted(DESIGNS))
    ap.add_argument("--out", type=Path, help="the table (default benchmarks/data/<fixture>.json); resumed if it exists")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-limit", help="the limit every trial runs under (default: the design's)")
    ap.add_argument("--workdir", type=Path, help="where the fixture copy goes (default: a new temp dir)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the order of each round")
    ap.add_argument("--smoke", action="store_true", help="4 configurations x 1 repeat (a plumbing check)")
    ap.add_argument("--steady-supplement", action="store_true",
                    help="for a table measured before trials sampled steady memory: run its default configuration "
                         "--repeats times here and record the share of the peak it held across steps (memory only; "
                         "the supplement records this machine's fingerprint)")
    args = ap.parse_args(argv)
    if args.steady_supplement:
        return steady_supplement(args.fixture, args.out or (REPO_ROOT / "benchmarks" / "data" / f"{args.fixture}.json"),
                                 args.repeats, args.workdir, recorded_command("benchmarks.measure_space", argv))
    design = {**design_for(args.fixture, machine_fingerprint()), **(SMOKE if args.smoke else {})}
    repeats = 1 if args.smoke else args.repeats
    limit_text = args.memory_limit or design["memory_limit"]
    limit = parse_memory(limit_text)
    if limit is None:
        raise SystemExit(f"--memory-limit: expected bytes or a size like 1.1GiB, got {limit_text!r}")
    out = args.out or (REPO_ROOT / "benchmarks" / "data" / f"{args.fixture}.json")
    if args.smoke and args.out is None:
        raise SystemExit("--smoke needs --out (a smoke table is not a measurement to keep)")
    work = args.workdir or Path(tempfile.mkdtemp(prefix=f"infrarsi-measure-{args.fixture}-"))
    repo = fixture_repo(args.fixture, design, limit_text, work)
    command = recorded_command("benchmarks.measure_space", argv)
    fresh = new_table(repo, args.fixture, design, float(limit), repeats, command.strip())
    if out.exists():
        table = load(out)
        same = [(to_json(t)["knobs"], [p.id for p in t.patches], t.memory_limit_bytes) for t in (table, fresh)]
        if same[0] != same[1]:
            raise SystemExit(f"{out}: measured a different space or memory limit; use another --out")
        keys = compared_keys(table.machine, ("cpu", "flags", "cores", "torch"))
        was, now = ({k: m.get(k) for k in keys} for m in (table.machine, fresh.machine))
        if was != now:  # one table, one machine: its repeats are that machine's noise, its optimum that machine's
            raise SystemExit(f"{out}: measured on {was}, this machine is {now}; resume it there, or use another "
                             "--out")
        table.repeats = max(table.repeats, repeats)
    else:
        table = fresh
    out.parent.mkdir(parents=True, exist_ok=True)
    configs = table.design()
    done = {(k_, r.round) for k_, rs in table.runs.items() for r in rs}
    todo = [(r, c) for r, c in schedule(configs, repeats, args.seed) if (key(c), r) not in done]
    print(f"{args.fixture}: {len(configs)} configurations x {repeats} repeats under {limit_text}; "
          f"{len(todo)} trials to run ({len(done)} done) -> {out}", file=sys.stderr, flush=True)
    started = time.time()
    base_wall = float(table.meta.get("wall_s", 0.0))
    for i, (r, config) in enumerate(todo, start=1):
        run = trial(repo, table, config, limit_text, r)
        table.add(config, run)
        now = time.time()
        table.meta["wall_s"] = base_wall + now - started
        table.meta["updated"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        save(table, out)
        eta = (now - started) / i * (len(todo) - i)
        step = f"{run.step_time_s * 1000:.0f} ms" if run.step_time_s else "-"
        print(f"[{now - started:6.0f}s] round {r + 1}/{repeats} {i}/{len(todo)} {run.outcome:<5} {step:>8} "
              f"{config_candidate(config, table).describe()} (eta {eta / 60:.0f} min)", file=sys.stderr, flush=True)
    print(f"done: {out} ({table.meta['wall_s'] / 60:.0f} min of measurement in all)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
