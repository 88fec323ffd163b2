"""The red-team table of docs/trials.md: every cheat on every executor, alone and combined with a re-split.

    python -m benchmarks.redteam_table [--executors local torchrun actions slurm] [--resplit-on local ...]
                                       [--data benchmarks/data/redteam.json] [--doc docs/trials.md] [--render-only]
                                       [--update] [--only NAME ...]

Each cell is one real, witnessed trial of the candidate, judged as verification judges it (the benches of
``tests/redteam``): tinygpt with dropout on the local executor, a self-hosted runner (the project's GitHub
stand-in) and Slurm (a local cluster started for the run, like the tests'); the same model data-parallel on two
ranks under torchrun; tinymoe on the local executor for the MoE cheats. "+ re-split" combines the cheat with
another split of the global batch (``RESPLIT`` in tests/support/redteam/bench.py: tinygpt micro-batch 2 -> 1, tinymoe
4 -> 2, the DDP fixture 2 -> 1 of its four rows a rank), judged against the baseline run at that split. Honest
catalog patches and knobs, and the baseline against itself, are rows too: they must read ``ok``. The results
go to the data file; the table is rendered from it into the doc's ``redteam`` section (``--render-only``
re-renders without a trial; ``--update`` re-measures the named columns only, e.g. ``--executors torchrun
--resplit-on --update``, and ``--only`` the named rows only, adding rows the data file lacks). Run it alone: about
40 min on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.doc_sections import write_section

ROOT = Path(__file__).resolve().parent.parent
SLURM_SCRIPTS = ROOT / "scripts" / "slurm"
EXECUTORS = ("local", "torchrun", "actions", "slurm")


@contextlib.contextmanager
def slurm_cluster() -> Iterator[None]:
    """A local two-node cluster for the run (scripts/slurm), as the test session starts one."""
    state = Path(tempfile.mkdtemp(prefix="islurm-", dir="/tmp"))
    done = subprocess.run([str(SLURM_SCRIPTS / "start-cluster.sh"), str(state)], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"redteam_table: the local Slurm cluster did not start: {done.stderr[-500:]}")
    os.environ["SLURM_CONF"] = done.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        yield
    finally:
        subprocess.run([str(SLURM_SCRIPTS / "stop-cluster.sh"), str(state), "--purge"], timeout=120)


#: The slips that lower float32 math: a different task only where the contract's precision is float32 alone.
FP32_SLIPS = ("fp32_matmul_medium", "onednn_fp32_bf16", "precision_around_products")


def _rows() -> list[dict[str, Any]]:
    """Every row: (name, what, which benches it runs on, the candidate's knobs and patches, honest or not)."""
    from tests.support.redteam.cheats import GPT, MOE, SHARED, SLIPS
    from tests.support.redteam.quarantine_cheats import QUARANTINED, UNSEEN

    # Lowering float32 math is the same task where the contract allows bf16, as tinygpt's does: those slips are
    # judged on the same fixture with bf16 taken out of its dtype knob (model "fp32"), as in tests/redteam.
    rows: list[dict[str, Any]] = []
    for c in (*SHARED, *SLIPS, *QUARANTINED, *UNSEEN):
        model = "fp32" if c.name in FP32_SLIPS else "gpt"
        rows.append({"name": c.name, "what": c.what + (" (float32-only contract)" if model == "fp32" else ""),
                     "kind": "cheat", "model": model, "cheat": c})
    for c in GPT:
        rows.append({"name": c.name, "what": c.what, "kind": "cheat", "model": "gpt", "cheat": c})
    for c in MOE:
        rows.append({"name": c.name, "what": c.what, "kind": "cheat", "model": "moe", "cheat": c})
    for knobs in ({"dtype": "bf16"}, {"grad_ckpt": True}, {"optimizer": "adamw_fused"}):
        name = ",".join(f"{k}={v}" for k, v in knobs.items())
        rows.append({"name": name, "what": "honest knob", "kind": "honest", "model": "gpt", "knobs": knobs})
    rows.append({"name": "catalog", "what": "every applicable catalog patch, one at a time", "kind": "honest",
                 "model": "gpt", "catalog": True})
    rows.append({"name": "baseline", "what": "the baseline against itself (A/A, witness on)", "kind": "honest",
                 "model": "gpt"})
    return rows


def _judge(bench: Any, row: dict[str, Any], resplit: dict[str, Any] | None) -> dict[str, Any]:
    """One cell: the verdict and the check that caught it first (for ``catalog``: every patch's verdict)."""
    started = time.monotonic()
    lock = (bench.repo / "infrarsi.lock").read_bytes()
    try:
        if row.get("catalog"):
            verdicts = {}
            for pid, spec in sorted(bench.ctx.patches.items()):
                judged = bench.judge(knobs=resplit or {}, patches=(spec,))
                verdicts[pid] = judged.verdict if judged.verdict == "ok" else f"{judged.verdict}: {judged.reason()[:120]}"
            bad = {k: v for k, v in verdicts.items() if v != "ok"}
            return {"verdict": "ok" if not bad else "invalid", "first": f"{len(verdicts)} patches",
                    "reason": "; ".join(f"{k}: {v}" for k, v in bad.items()), "patches": sorted(verdicts),
                    "s": round(time.monotonic() - started, 1)}
        cheat = row.get("cheat")
        knobs = {**dict(cheat.knobs if cheat else row.get("knobs") or {}), **(resplit or {})}
        judged = bench.judge(knobs=knobs, patches=cheat.specs() if cheat else ())
        return {"verdict": judged.verdict, "first": judged.first, "reason": judged.reason()[:300],
                "s": round(time.monotonic() - started, 1)}
    finally:
        (bench.repo / "infrarsi.lock").write_bytes(lock)


def measure(executors: list[str], resplit_on: list[str], work: Path, progress: Any,
            only: list[str] | None = None) -> dict[str, Any]:
    from tests.support.redteam.bench import RESPLIT, Bench, ddp_repo, fp32_only, gpt_repo, moe_repo
    from tests.support.redteam.paths import executor_for

    rows = [r for r in _rows() if not only or r["name"] in only]
    cells: dict[str, dict[str, Any]] = {r["name"]: {} for r in rows}
    with contextlib.ExitStack() as stack:
        if "slurm" in executors:
            stack.enter_context(slurm_cluster())
        benches: dict[tuple[str, str], Any] = {}

        def bench(model: str, executor: str) -> Any:
            key = (model, executor)
            if key not in benches:
                where = work / f"{model}-{executor}"
                where.mkdir(parents=True)
                repo = moe_repo(where) if model == "moe" else ddp_repo(where) if executor == "torchrun" else \
                    gpt_repo(where)
                if model == "fp32":
                    repo = fp32_only(repo)
                ex = stack.enter_context(executor_for(executor, repo, where))
                progress(f"{model} on {executor}: the witnessed baseline")
                benches[key] = Bench.open(repo, executor=ex)
            return benches[key]

        columns = [(e, False) for e in executors] + [(e, True) for e in resplit_on]
        for executor, split in columns:
            column = executor + (" + re-split" if split else "")
            for row in rows:
                if row["model"] == "moe" and executor != "local":
                    continue  # the MoE fixture runs as one process
                fixture = "tinymoe" if row["model"] == "moe" else "ddp" if executor == "torchrun" else "tinygpt"
                # (an "fp32" row runs on the same fixture, its contract float32 only)
                b = bench(row["model"], executor)
                cell = _judge(b, row, RESPLIT[fixture] if split else None)
                cells[row["name"]][column] = cell
                progress(f"{column} | {row['name']} | {cell['verdict']} | {cell['first']} ({cell['s']} s)")
    return {"version": 1, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": {"cpu": _cpu(), "python": platform.python_version()},
            "command": "python -m benchmarks.redteam_table " + " ".join(sys.argv[1:]),
            "columns": [e + (" + re-split" if s else "") for e, s in columns],
            "rows": [{"name": r["name"], "what": r["what"], "kind": r["kind"], "cells": cells[r["name"]]}
                     for r in rows], **({"only": list(only)} if only else {})}


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the columns ``new`` measured replaced by ``new``'s, in ``old``'s column order, each replaced
    column recorded under ``updated`` with its time and command; a row ``old`` lacks is added in the order of
    :func:`_rows`."""
    fresh = set(new["columns"])
    columns = old["columns"] + [c for c in new["columns"] if c not in old["columns"]]
    by_name = {r["name"]: r for r in new["rows"]}
    rows = [{**r, "cells": {**{c: v for c, v in r["cells"].items() if c not in fresh},
                            **by_name[r["name"]]["cells"]}} if r["name"] in by_name else r for r in old["rows"]]
    order = [r["name"] for r in _rows()]
    for row in new["rows"]:
        if row["name"] not in {r["name"] for r in rows}:
            after = [i for i, r in enumerate(rows) if r["name"] in order[:order.index(row["name"])]]
            rows.insert(max(after) + 1 if after else len(rows), row)
    names = new.get("only") or ()
    rows_measured = ", ".join(names) if len(names) <= 3 else f"{names[0]} … {names[-1]} ({len(names)} rows)"
    measured = [f"rows {rows_measured}"] if names else fresh
    updated = {**(old.get("updated") or {}), **{c: (new["measured_at"], new["command"]) for c in measured}}
    return {**old, "columns": columns, "rows": rows, "updated": updated}


def _cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    isa = "AMX" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else "AVX2" if "avx2" in flags \
        else "?"
    return f"{model} ({os.cpu_count()} cores, {isa})"


def render(data: dict[str, Any]) -> str:
    """The section: one row per candidate, one column per executor (and re-split); a cell is the verdict and the
    check that caught the candidate first. Every cheat must read invalid, rejected or quarantined, every honest row
    ok."""
    cols = data["columns"]
    updated = "".join(f"; the {col if col.startswith('rows ') else col + ' column'} "
                      f"{'measured' if col.startswith('rows ') else 're-measured'} {when} with `{cmd.strip()}`"
                      for col, (when, cmd) in sorted((data.get("updated") or {}).items()))
    out = [f"Measured {data['measured_at']} on {data['machine']['cpu']} with `{data['command'].strip()}`{updated}; "
           "each cell one real witnessed trial (a quarantined cell: none, the patch never ran; a re-split column: "
           "tinygpt's micro-batch 2 -> 1, tinymoe's 4 -> 2, "
           "against the baseline run at that split). tinygpt with dropout 0.1 on local, Actions and Slurm; the same "
           "model data-parallel on two ranks (the DDP fixture, four rows a rank, two micro-batches) under torchrun; "
           "tinymoe for its own rows; the float32-lowering slips on the same fixtures with bf16 taken out of the "
           "contract's dtype knob.",
           "", "| candidate | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    missed = []
    for row in data["rows"]:
        cells = []
        for col in cols:
            cell = row["cells"].get(col)
            if cell is None:
                cells.append("–")
                continue
            good = cell["verdict"] in (("invalid", "rejected", "quarantined") if row["kind"] == "cheat" else ("ok",))
            if not good:
                missed.append(f"{row['name']} on {col}: {cell['verdict']} ({cell['reason'][:120]})")
            text = cell["verdict"] if row["kind"] == "honest" else f"**{cell['first']}**"
            cells.append(text + ("" if good else " ⚠️"))
        out.append(f"| {row['name']}: {row['what']} | " + " | ".join(cells) + " |")
    total = sum(len(r["cells"]) for r in data["rows"])
    out += ["", f"{total - len(missed)} of {total} cells as they must be (every cheat invalid, rejected or "
            "quarantined, every honest candidate ok)" + ("." if not missed else ": not " + "; ".join(missed))]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redteam_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", nargs="+", default=list(EXECUTORS), choices=EXECUTORS)
    parser.add_argument("--resplit-on", nargs="*", default=["local"], choices=EXECUTORS,
                        help="executors that also run every candidate combined with a re-split (default: local)")
    parser.add_argument("--data", type=Path, default=ROOT / "benchmarks" / "data" / "redteam.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "trials.md")
    parser.add_argument("--render-only", action="store_true", help="render the doc from the data file")
    parser.add_argument("--update", action="store_true",
                        help="re-measure only the columns named by --executors/--resplit-on and keep the data file's "
                             "other columns (each re-measured column says when)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="measure only these rows (with --update: the data file's other rows are kept)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.render_only:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        work = args.workdir or Path(tempfile.mkdtemp(prefix="redteam-table-"))
        data = measure(args.executors, args.resplit_on, work,
                       lambda m: print(f"redteam_table: {m}", file=sys.stderr, flush=True), only=args.only)
        if args.update and args.data.is_file():
            data = merged(json.loads(args.data.read_text(encoding="utf-8")), data)
        args.data.parent.mkdir(parents=True, exist_ok=True)
        args.data.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    elif not args.data.is_file():
        print(f"redteam_table: {args.data}: no data file; run without --render-only first", file=sys.stderr)
        return 2
    data = json.loads(args.data.read_text(encoding="utf-8"))
    write_section(args.doc, "redteam", render(data))
    print(f"wrote {args.doc} (section redteam) from {args.data}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
