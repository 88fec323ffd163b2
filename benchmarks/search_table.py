"""The tuners replayed against measured tables of real trials (HPOBench/YAHPO-style tabular benchmark).

    OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python -m benchmarks.search_table \\
        benchmarks/data/tinygpt.json benchmarks/data/tinymoe.json --jobs 2

Every method of the simulator benchmark (``benchmarks/search.py``: the engine
as ``infrarsi run`` drives it, random, greedy, Optuna TPE, the DeepSpeed-style
model-based tuner) plus TPE told an OOM the two other usual ways (a penalty
value, a failed trial) runs against each table (``benchmarks/measure_space.py``
writes them) through the same drivers (``benchmarks/search_tuners.py``), with
budgets 10/20/30 and 30 seeds. A trial of a configuration draws one of its
measured repeats at random (seeded: trial ``i`` of every method draws the same
repeat index), so the table's own run-to-run noise is what the methods see;
an OOM costs what the measured OOM cost. The truth is each configuration's
mean step time over its repeats (a configuration that failed in any repeat
has none) and the optimum is the fastest of those. Scoring and verification
are the simulator benchmark's (:func:`benchmarks.search.score_trials`,
:func:`benchmarks.search.verify_on`): the top 3 by measured time rerun
interleaved with the default on a fresh draw stream, pairs sized by the
table's pooled noise.

Writes the section "Measured on real trials" of ``docs/BENCHMARKS.md`` (the
rest of the page is left alone) and the raw rows to
``benchmarks/results/search_table.json``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from benchmarks.doc_sections import publish
from benchmarks.doc_sections import recorded_command
from benchmarks.search import (ALL_METHODS, MIN_EFFECT, REACH, TOP_K, VERIFY_SEED, Row, Truth, _median_reach, _q,
                               _reach_value, score_trials, summary_table, verify_on)
from benchmarks.search_tuners import play
from benchmarks.space_table import (SUPPLEMENT, Table, TableBench, TableError, config_candidate, coverage, load,
                                    machine_text, optimum, sigma_log, true_time)

#: The methods replayed, in the order of the tables.
METHODS = ("infrarsi", "random", "greedy", "optuna-tpe", "optuna-tpe-penalty", "optuna-tpe-fail", "ds-model")
TPE = ("optuna-tpe", "optuna-tpe-penalty", "optuna-tpe-fail")
SECTION = "measured-on-real-trials"


def replay(table: Table, method: str, seed: int, budgets: Sequence[int], noise: int | None = None) -> list[Row]:
    """``method`` on ``table`` for the largest budget, scored at every budget. The method's own randomness comes
    from ``seed``, the repeats it draws from ``noise`` (default: ``seed`` too; another value replays the same
    method run against another draw of the machine's noise)."""
    draw = seed if noise is None else noise
    trials = play(ALL_METHODS[method], TableBench(table, draw), max(budgets), seed)
    truth = Truth(time=lambda c: true_time(table, c), optimum_s=optimum(table)[1], default=table.default())
    sigma = sigma_log(table)
    rows = []
    for b in budgets:
        row, _ = score_trials(method, trials, b, workload=table.label, cluster="measured", seed=seed, truth=truth,
                              verify=lambda first: verify_on(first, TableBench(table, VERIFY_SEED + draw), sigma))
        rows.append(row)
    return rows


@functools.cache
def cached_table(path: str) -> Table:
    return load(Path(path))


def _task(args: tuple[str, str, int, tuple[int, ...]]) -> list[Row]:
    path, method, seed, budgets = args
    return replay(cached_table(path), method, seed, budgets)


def check_complete(table: Table, where: str) -> None:
    have, want = coverage(table)
    if have < want:
        raise TableError(f"{where}: {have} of the {want} configurations of its space are measured; "
                         "finish the measurement (benchmarks/measure_space.py resumes) before replaying it")


# -- the page ---------------------------------------------------------------------------------------

def _fmt_config(table: Table, config: dict) -> str:
    return config_candidate(config, table).describe()


def table_header(table: Table, path: str) -> str:
    cfg_opt, t_opt = optimum(table)
    t_def = true_time(table, table.default())
    runs = [r for rs in table.runs.values() for r in rs]
    meta = table.meta
    wall_s = float(meta.get("wall_s") or 0.0)
    wall = (f"{wall_s / 3600:.1f} h" if wall_s >= 3600 else f"{wall_s / 60:.0f} min") if wall_s else "unknown time"
    default = f"{t_def:.3f} s ({t_def / t_opt:.2f}x the optimum's)" if t_def != float("inf") else "does not run"
    failed = sum(1 for c in table.configs.values() if true_time(table, c) == float("inf"))
    return (f"Table `{path}`: {len(table.configs)} configurations x {table.repeats} repeats "
            f"({sum(r.outcome == 'oom' for r in runs)} OOM and {sum(r.outcome == 'crash' for r in runs)} failed runs; "
            f"{failed} configurations failed in some repeat), measured by `{meta.get('command', '?')}` in {wall}, "
            f"memory limit {table.memory_limit_bytes / 2**30:.2f} GiB. Machine: {machine_text(table.machine)}, "
            f"torch {table.machine.get('torch', '?')}. "
            f"Optimum: {_fmt_config(table, cfg_opt)} at {t_opt:.3f} s per step; the default {default}. "
            f"Noise: sd of log step time {sigma_log(table):.3f} within configurations.{_supplement_text(table)}")


def _supplement_text(table: Table) -> str:
    sup = table.meta.get(SUPPLEMENT)
    if not isinstance(sup, dict) or not sup.get("share"):
        return ""
    return (f" The default's steady share of its peak (what the engine's memory model splits by; the table's runs "
            f"predate that sample): {float(sup['share']):.3f}, the median of {len(sup.get('runs') or ())} runs by "
            f"`{sup.get('command', '?')}` on {sup.get('measured', '?')[:10]} ({machine_text(sup.get('machine') or {})}).")


def goal_lines(rows: Sequence[Row], budget: int, reach_budget: int) -> str:
    sel = lambda m, b: [r for r in rows if r.method == m and r.budget == b]  # noqa: E731
    eng, eng_r = sel("infrarsi", budget), sel("infrarsi", reach_budget)
    if not eng or not eng_r:
        return ""
    med = _q([r.best_fraction for r in eng], .5)
    e_reach = _reach_value([r.reached_at for r in eng_r], reach_budget)
    oom = sum(r.oom_s for r in eng) / (sum(r.total_s for r in eng) or 1.0)
    mark = lambda x: "yes" if x else "**no**"  # noqa: E731
    tpe = []
    half = True
    for m in TPE:
        tr = sel(m, reach_budget)
        if tr:
            t_reach = _reach_value([r.reached_at for r in tr], reach_budget)
            half &= e_reach <= t_reach / 2
            tpe.append(f"{m} {_median_reach([r.reached_at for r in tr], reach_budget)}")
    return (f"The goal at {budget} trials: engine median best found {med:.3f} (≥ 0.95: {mark(med >= 0.95)}); "
            f"median trials to 95% (runs of {reach_budget}) {_median_reach([r.reached_at for r in eng_r], reach_budget)}"
            f" against {', '.join(tpe) or 'no TPE run'} (at most half of every TPE variant's: {mark(half and bool(tpe))});"
            f" OOM share of the engine's device-seconds {oom:.1%} (< 10%: {mark(oom < 0.10)}).")


def render(tables: Sequence[tuple[str, Table]], rows: Sequence[Row], methods: Sequence[str], budgets: Sequence[int],
           seeds: int, elapsed: float, jobs: int, command: str) -> str:
    mid = 20 if 20 in budgets else budgets[len(budgets) // 2]
    parts = [f"""## Measured on real trials

Generated by `{command}` ({seeds} seeds, budgets {", ".join(map(str, budgets))}; {elapsed / 60:.0f} min with
{jobs} worker process(es)). Each method runs against a table of real trials (`benchmarks/measure_space.py`
measured every configuration of the space a few times through `infrarsi trial`); a trial draws one of the
configuration's measured repeats at random and costs what that run cost. Best found: the table mean step time
of the optimum over that of the configuration the method measured fastest (a configuration that failed in any
repeat counts as 0). Trials to 95%: the first trial of a configuration within 95% of the optimum. Verification
as on the simulator: top {TOP_K} by measured time rerun interleaved with the default on a fresh draw stream,
min effect {MIN_EFFECT:.0%}; a false promotion is one whose table mean is not {MIN_EFFECT:.0%} below the default's.
`optuna-tpe` tells an OOM with a constraint (`Trial.set_constraint`, Optuna 5's form of `constraints_func`),
`optuna-tpe-penalty` as a large value, `optuna-tpe-fail` as a failed trial (TPE's default). Reach: {REACH:.0%}."""]
    for path, table in tables:
        sel = [r for r in rows if r.workload == table.label]
        parts.append(f"### {table.label}\n\n{table_header(table, path)}\n\n"
                     f"{summary_table(sel, methods, budgets)}\n\n{goal_lines(sel, mid, max(budgets))}")
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.search_table", description=__doc__.split("\n")[0])
    ap.add_argument("tables", nargs="+", type=Path, help="table JSON files (benchmarks/measure_space.py)")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--budgets", type=int, nargs="+", default=[10, 20, 30])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(ALL_METHODS))
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--out", type=Path, default=Path("docs/BENCHMARKS.md"),
                    help="the page whose section is replaced (default docs/BENCHMARKS.md)")
    ap.add_argument("--no-write", dest="out", action="store_const", const=None, help="print the section only")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/search_table.json"), help="raw rows")
    args = ap.parse_args(argv)
    try:
        tables = [(str(p), load(p)) for p in args.tables]
        for path, table in tables:
            check_complete(table, path)
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    budgets = tuple(sorted(set(args.budgets)))
    methods = tuple(args.methods)
    started = time.time()
    tasks = [(path, m, s, budgets) for s in range(args.seeds) for path, _ in tables for m in methods]
    rows: list[Row] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for i, (task, rs) in enumerate(zip(tasks, pool.map(_task, tasks)), start=1):
            rows += rs
            print(f"[{time.time() - started:6.0f}s] {i}/{len(tasks)} {Path(task[0]).stem} {task[1]} seed {task[2]}: "
                  f"best at {budgets[-1]} {rs[-1].best_fraction:.3f}", file=sys.stderr, flush=True)
    elapsed = time.time() - started
    # as really run (a replay times nothing, so its niceness changes no figure; the line should still be true)
    command = "OPENBLAS_NUM_THREADS=1 " + recorded_command("benchmarks.search_table", argv)
    text = render(tables, rows, methods, budgets, args.seeds, elapsed, args.jobs, command.strip())
    publish(text, section=SECTION, page=args.out, raw=args.json,
            payload={"command": command, "elapsed_s": elapsed, "tables": [p for p, _ in tables],
                     "rows": [asdict(r) for r in rows]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
