"""The search at cluster scale: the InfraRSI engine and the tuners users would pick instead, on the simulator.

    nice -n 19 .venv/bin/python -m benchmarks.search            # every pair, 10 seeds, budgets 10/20/40
    nice -n 19 .venv/bin/python -m benchmarks.search --quick    # 4 pairs, 3 seeds (minutes)

Writes ``docs/BENCHMARKS.md`` (``--out``). For every catalogued (workload,
cluster) pair of :mod:`simlab.cluster` and every seed, each method of
:data:`benchmarks.search_tuners.METHODS` runs up to the largest budget on a
fresh ``SimulatedJob(workload, cluster, seed)`` (so trial ``i`` of every method
gets the same noise draw); the first ``B`` trials are its run at budget ``B``.
Then, per budget, the same verification for every method: its top 3 distinct
configurations by measured time are rerun interleaved with the default
(A B A B, pairs as the doctor sizes them) on a fresh job seeded
``VERIFY_SEED + seed`` and judged by :func:`infrarsi.stats.compare`; the one
promoted with the largest speedup is the method's result. A second phase
fills an experience bank (SQLite, as ``bot/stages/run/search.py``'s ``remember``) from the
engine's verified 20-trial run on another cluster and runs the engine seeded
from it (``bank_seeds``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.doc_sections import keep_marked, recorded_command
from benchmarks.search_tuners import (METHODS, TPE_VARIANTS, Bench, SimBench, Trial, key, play, run_engine,
                                      to_candidate)
from infrarsi.bank import Effect as BankEffect
from infrarsi.bank import Finding, FindingOutcome, SqliteBank, as_pairs, hardware_fingerprint, workload_fingerprint
from simlab.cluster import SimulatedJob, catalog
from simlab.cluster.hardware import Cluster
from simlab.cluster.knobs import Value
from simlab.cluster.workloads import Workload
from infrarsi.stats import compare
from infrarsi.stats.power import repeats_for_effect

VERIFY_SEED = 1_000_000
TOP_K = 3             # contract.verify.top_k
MIN_EFFECT = 0.01     # contract.verify.min_effect
ALPHA = 0.05
TARGET_EFFECT = 0.05  # contract.verify.target_effect: sizes the number of pairs
MAX_PAIRS = 12
MAX_SPEEDUP = 10.0
#: What ``--methods`` may name: the default methods and the other two ways of telling TPE an OOM.
ALL_METHODS = {**METHODS, **TPE_VARIANTS}
REACH = 0.95          # "reached": a trial ran ok at >= 95% of the optimum's MFU (noiseless)

QUICK_PAIRS = (("llama2-7b", "h100-1x8"), ("llama2-70b", "h100-4x8"), ("mixtral-8x7b", "h100-2x8"),
               ("deepseek-moe-16b", "a100-2x8"))


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One method on one (pair, seed) at one budget."""

    method: str
    workload: str
    cluster: str
    seed: int
    budget: int
    trials: int              # trials it ran (fewer than budget when it stopped itself)
    best_fraction: float     # optimum step time / true step time of its best-measured ok configuration
    reached_at: int | None   # first trial (1-based) that ran ok within REACH of the optimum
    oom_s: float
    crash_s: float
    total_s: float
    promoted_fraction: float  # optimum / true time of what verification promoted (the default if nothing)
    promoted: bool
    false_promotion: bool     # promoted, yet not truly faster than the default by MIN_EFFECT
    noise_pick: bool          # its best-measured configuration is truly > MIN_EFFECT slower than its truly best


@dataclass(frozen=True, kw_only=True, slots=True)
class Verified:
    config: Mapping[str, Value]
    promoted: bool
    speedup: float | None
    ci_low: float | None
    ci_high: float | None


# -- one (pair, seed) -------------------------------------------------------------------------------

def _true_time(truth: SimulatedJob, config: Mapping[str, Value]) -> float:
    r = truth.expected(config)
    return r.step_time_s if r.outcome == "ok" and r.step_time_s else math.inf


def ranked_configs(trials: Sequence[Trial], exclude: Mapping[str, Value] | None = None) -> list[Mapping[str, Value]]:
    """Distinct configurations that ran ok, fastest first by the geometric mean of their measurements."""
    times: dict[tuple[Any, ...], tuple[Mapping[str, Value], list[float]]] = {}
    for t in trials:
        if t.outcome == "ok" and t.step_time_s and (exclude is None or key(t.config) != key(exclude)):
            times.setdefault(key(t.config), (t.config, []))[1].append(math.log(t.step_time_s))
    rows = sorted(((statistics.fmean(ts), k, c) for k, (c, ts) in times.items()), key=lambda r: (r[0], r[1]))
    return [c for _, _, c in rows]


def verify(trials: Sequence[Trial], w: Workload, c: Cluster, seed: int) -> list[Verified]:
    """The run stage's verification of the top candidates, against the default, on fresh noise."""
    vjob = SimulatedJob(w, c, seed=VERIFY_SEED + seed)
    return verify_on(trials, SimBench(vjob), vjob.sigma_log)


def verify_on(trials: Sequence[Trial], vjob: Bench, sigma_log: float, max_pairs: int | None = None) -> list[Verified]:
    """:func:`verify` on any job: ``vjob`` runs the reruns (fresh noise), ``sigma_log`` (the job's
    run-to-run sd of log step time) sizes the number of pairs as the doctor does, at most ``max_pairs``."""
    default = vjob.default()
    pairs = repeats_for_effect(sigma_log, TARGET_EFFECT, ALPHA, 0.8, min_effect=MIN_EFFECT,
                               n_max=min(MAX_PAIRS, max_pairs or MAX_PAIRS))
    out = []
    for config in ranked_configs(trials, exclude=default)[:TOP_K]:
        base, cand = [], []
        for _ in range(pairs):
            base.append(vjob.run(default))
            cand.append(vjob.run(config))
        if any(r.outcome != "ok" for r in cand):
            out.append(Verified(config=config, promoted=False, speedup=None, ci_low=None, ci_high=None))
            continue
        cand_t = [r.step_time_s or 0.0 for r in cand]
        base_t = [r.step_time_s or 0.0 for r in base if r.outcome == "ok"]
        if len(base_t) < 2:  # the default itself does not run: any configuration that runs is the way out
            out.append(Verified(config=config, promoted=True, speedup=None, ci_low=None, ci_high=None))
            continue
        cmp = compare(base_t, cand_t, min_effect=MIN_EFFECT, alpha=ALPHA, seed=0)
        out.append(Verified(config=config, promoted=cmp.significant and cmp.speedup <= MAX_SPEEDUP,
                            speedup=cmp.speedup, ci_low=cmp.ci_low, ci_high=cmp.ci_high))
    return out


def _promoted(verdicts: Sequence[Verified]) -> Mapping[str, Value] | None:
    good = [v for v in verdicts if v.promoted]
    if not good:
        return None
    if all(v.speedup is None for v in good):  # the default OOMs: take the first (fastest measured) promoted
        return good[0].config
    return max(good, key=lambda v: v.speedup or 0.0).config


@dataclass(frozen=True, kw_only=True, slots=True)
class Truth:
    """What scoring knows and no method sees: a configuration's noiseless step time (``inf`` when it
    does not run ok), the optimum's, and the default configuration."""

    time: Callable[[Mapping[str, Value]], float]
    optimum_s: float
    default: Mapping[str, Value]


def score(method: str, trials: Sequence[Trial], budget: int, w: Workload, c: Cluster, seed: int,
          truth: SimulatedJob) -> tuple[Row, list[Verified]]:
    gt = truth.ground_truth()
    known = Truth(time=lambda config: _true_time(truth, config), optimum_s=gt.step_time_s,
                  default=gt.default_config)
    return score_trials(method, trials, budget, workload=w.name, cluster=c.name, seed=seed, truth=known,
                        verify=lambda first: verify(first, w, c, seed))


def score_trials(method: str, trials: Sequence[Trial], budget: int, *, workload: str, cluster: str, seed: int,
                 truth: Truth, verify: Callable[[Sequence[Trial]], list[Verified]]) -> tuple[Row, list[Verified]]:
    """One method's run at ``budget``: best found, trials to 95%, failure cost, and what the same
    verification promotes (``verify`` reruns the top candidates)."""
    t_opt = truth.optimum_s
    first = list(trials[:budget])
    reached = next((i + 1 for i, t in enumerate(first)
                    if t.outcome == "ok" and truth.time(t.config) <= t_opt / REACH), None)
    ranked = ranked_configs(first)
    best_t = truth.time(ranked[0]) if ranked else math.inf
    truly_best = min((truth.time(cfg) for cfg in ranked), default=math.inf)
    verdicts = verify(first)
    promoted = _promoted(verdicts)
    default_t = truth.time(truth.default)
    promoted_t = truth.time(promoted) if promoted is not None else default_t
    false = promoted is not None and not (promoted_t * (1 + MIN_EFFECT) <= default_t)
    row = Row(method=method, workload=workload, cluster=cluster, seed=seed, budget=budget, trials=len(first),
              best_fraction=t_opt / best_t, reached_at=reached,
              oom_s=sum(t.cost_s for t in first if t.outcome == "oom"),
              crash_s=sum(t.cost_s for t in first if t.outcome == "crash"),
              total_s=sum(t.cost_s for t in first), promoted_fraction=t_opt / promoted_t,
              promoted=promoted is not None, false_promotion=false,
              noise_pick=bool(ranked) and best_t > truly_best * (1 + MIN_EFFECT))
    return row, verdicts


def run_pair_seed(w: Workload, c: Cluster, seed: int, budgets: Sequence[int],
                  methods: Sequence[str]) -> tuple[list[Row], dict[str, Any]]:
    """Every method on one (pair, seed); also what the engine's bank needs (trials and verdicts at 20)."""
    truth = SimulatedJob(w, c)
    rows: list[Row] = []
    engine: dict[str, Any] = {}
    for name in methods:
        trials = play(ALL_METHODS[name], SimulatedJob(w, c, seed=seed), max(budgets), seed)
        for b in budgets:
            row, verdicts = score(name, trials, b, w, c, seed, truth)
            rows.append(row)
            if name == "infrarsi" and b == BANK_BUDGET:
                engine = {"trials": trials[:b], "verdicts": verdicts}
    return rows, engine


# -- the experience bank --------------------------------------------------------------------------

BANK_BUDGET = 20


def fingerprints(w: Workload, c: Cluster) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    hardware = hardware_fingerprint({"device": "cuda", "gpu_model": c.gpu, "gpu_count": c.gpus_per_node,
                                     "gpu_memory_bytes": int(c.hbm_bytes)}, world_size=c.world_size)
    workload = workload_fingerprint(family=w.name, parameters=w.total_params, sequence_length=w.seq_len,
                                    global_batch=w.global_batch * w.seq_len, world_size=c.world_size,
                                    experts=w.experts or None, top_k=w.top_k or None)
    return hardware, workload


def findings(w: Workload, c: Cluster, seed: int, trials: Sequence[Trial],
             verdicts: Sequence[Verified]) -> list[Finding]:
    """What ``bot/stages/run/search.py``'s ``remember`` stores: every verdict, every failed trial."""
    hardware, workload = fingerprints(w, c)
    dims = SimulatedJob(w, c).space.dimensions
    run_id = f"{c.name}-{seed}"
    out = [Finding(hardware=hardware, workload=workload, candidate=to_candidate(v.config, dims),
                   effect=BankEffect.from_speedup(v.speedup, v.ci_low, v.ci_high),
                   outcome=FindingOutcome.PROMOTED if v.promoted else FindingOutcome.NOT_SIGNIFICANT,
                   run_id=run_id, repo="sim") for v in verdicts if v.speedup is not None or v.promoted]
    out += [Finding(hardware=hardware, workload=workload, candidate=to_candidate(t.config, dims),
                    outcome=FindingOutcome(t.outcome), run_id=run_id, repo="sim")
            for t in trials if t.outcome in ("oom", "crash")]
    return out


def source_cluster(w: Workload, c: Cluster, pairs: Sequence[tuple[Workload, Cluster]]) -> Cluster | None:
    """The bank's source for (w, c): the next cluster of the same workload in catalog order (cyclic)."""
    clusters = [pc for pw, pc in pairs if pw.name == w.name]
    if len(clusters) < 2:
        return None
    return clusters[(clusters.index(c) + 1) % len(clusters)]


def run_transfer(w: Workload, c: Cluster, src: Cluster, seed: int, source_findings: list[Finding],
                 budget: int) -> dict[str, Any]:
    truth = SimulatedJob(w, c)
    with tempfile.TemporaryDirectory() as tmp:
        bank = SqliteBank(Path(tmp) / "bank.sqlite")
        try:
            bank.add_many(source_findings)
            hardware, workload = fingerprints(w, c)
            seeds = as_pairs(bank.similar(hardware, workload, top=4))
        finally:
            bank.close()
    trials = play(run_engine, SimulatedJob(w, c, seed=seed), budget, seed, bank=seeds)
    row, _ = score("infrarsi+bank", trials, budget, w, c, seed, truth)
    row20, _ = score("infrarsi+bank", trials, BANK_BUDGET, w, c, seed, truth)
    return {"workload": w.name, "cluster": c.name, "source": src.name, "seed": seed, "n_seeds": len(seeds),
            "reached_at": row.reached_at, "best_fraction_20": row20.best_fraction,
            "best_fraction": row.best_fraction}


# -- aggregation ----------------------------------------------------------------------------------

def _q(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=float), q))


def _median_reach(values: Sequence[int | None], budget: int) -> str:
    """Median of first-reach trial numbers, a run that never reached counting as budget + 1."""
    m = _q([v if v is not None else budget + 1 for v in values], 0.5)
    return f">{budget}" if m > budget else f"{m:g}"


def _reach_value(values: Sequence[int | None], budget: int) -> float:
    return _q([v if v is not None else budget + 1 for v in values], 0.5)


def summary_table(rows: Sequence[Row], methods: Sequence[str], budgets: Sequence[int]) -> str:
    out = ["| method | budget | best found / optimum: median | p10–p90 | min | reached 95% | trials to 95%: median "
           "| OOM share of device-s | crash share | promoted | false promotions | best-measured not truly best |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b in budgets:
        for m in methods:
            rs = [r for r in rows if r.method == m and r.budget == b]
            if not rs:
                continue
            fr = [r.best_fraction for r in rs]
            total = sum(r.total_s for r in rs)
            out.append(
                f"| {m} | {b} | {_q(fr, .5):.3f} | {_q(fr, .1):.3f}–{_q(fr, .9):.3f} | {min(fr):.3f} | "
                f"{sum(r.reached_at is not None for r in rs)}/{len(rs)} | "
                f"{_median_reach([r.reached_at for r in rs], b)} | {sum(r.oom_s for r in rs) / total:.1%} | "
                f"{sum(r.crash_s for r in rs) / total:.1%} | {sum(r.promoted for r in rs)}/{len(rs)} | "
                f"{sum(r.false_promotion for r in rs)}/{len(rs)} | {sum(r.noise_pick for r in rs)}/{len(rs)} |")
    return "\n".join(out)


def pair_table(rows: Sequence[Row], methods: Sequence[str], budget: int, reach_budget: int) -> str:
    head = "| workload | cluster | " + " | ".join(methods) + " |"
    out = [head, "|---|---|" + "---|" * len(methods)]
    pairs = list(dict.fromkeys((r.workload, r.cluster) for r in rows))
    for w, c in pairs:
        cells = []
        for m in methods:
            at = [r.best_fraction for r in rows if (r.workload, r.cluster, r.method, r.budget) == (w, c, m, budget)]
            reach = [r.reached_at for r in rows
                     if (r.workload, r.cluster, r.method, r.budget) == (w, c, m, reach_budget)]
            cells.append(f"{_q(at, .5):.3f} / {_median_reach(reach, reach_budget)}" if at else "—")
        out.append(f"| {w} | {c} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def goal_table(rows: Sequence[Row], budget: int, reach_budget: int) -> tuple[str, dict[str, bool]]:
    out = ["| workload | cluster | engine median at 20 | ≥ 0.95 | engine trials to 95% | TPE trials to 95% | "
           "≤ half of TPE | engine OOM share | < 10% |", "|---|---|---|---|---|---|---|---|---|"]
    ok = {"median": True, "half": True, "oom": True}
    pairs = list(dict.fromkeys((r.workload, r.cluster) for r in rows))
    for w, c in pairs:
        sel = lambda m, b: [r for r in rows  # noqa: E731
                            if (r.workload, r.cluster, r.method, r.budget) == (w, c, m, b)]
        eng, eng_r, tpe_r = sel("infrarsi", budget), sel("infrarsi", reach_budget), sel("optuna-tpe", reach_budget)
        if not eng or not eng_r or not tpe_r:
            continue
        med = _q([r.best_fraction for r in eng], .5)
        e_reach = _reach_value([r.reached_at for r in eng_r], reach_budget)
        t_reach = _reach_value([r.reached_at for r in tpe_r], reach_budget)
        oom = sum(r.oom_s for r in eng) / sum(r.total_s for r in eng)
        a, b_, c_ = med >= 0.95, e_reach <= t_reach / 2, oom < 0.10
        ok["median"] &= a
        ok["half"] &= b_
        ok["oom"] &= c_
        mark = lambda x: "yes" if x else "**no**"  # noqa: E731
        out.append(f"| {w} | {c} | {med:.3f} | {mark(a)} | {_median_reach([r.reached_at for r in eng_r], reach_budget)}"
                   f" | {_median_reach([r.reached_at for r in tpe_r], reach_budget)} | {mark(b_)} | {oom:.1%} | "
                   f"{mark(c_)} |")
    return "\n".join(out), ok


def transfer_table(transfers: Sequence[dict[str, Any]], rows: Sequence[Row], budget: int) -> tuple[str, bool]:
    out = ["| workload | target cluster | bank from | transfers offered (median) | trials to 95%: without bank | "
           "with bank | seeds faster / slower with bank | best at 20 without / with |",
           "|---|---|---|---|---|---|---|---|"]
    all_with, all_without = [], []
    for w, c in dict.fromkeys((t["workload"], t["cluster"]) for t in transfers):
        ts = [t for t in transfers if (t["workload"], t["cluster"]) == (w, c)]
        base = {r.seed: r for r in rows if (r.workload, r.cluster, r.method, r.budget) == (w, c, "infrarsi", budget)}
        base20 = {r.seed: r for r in rows
                  if (r.workload, r.cluster, r.method, r.budget) == (w, c, "infrarsi", BANK_BUDGET)}
        ts = [t for t in ts if t["seed"] in base]
        if not ts:
            continue
        big = budget + 1
        with_ = [t["reached_at"] or big for t in ts]
        without = [base[t["seed"]].reached_at or big for t in ts]
        all_with += with_
        all_without += without
        faster = sum(a < b for a, b in zip(with_, without))
        slower = sum(a > b for a, b in zip(with_, without))
        out.append(f"| {w} | {c} | {ts[0]['source']} | {statistics.median(t['n_seeds'] for t in ts):g} | "
                   f"{_median_reach([base[t['seed']].reached_at for t in ts], budget)} | "
                   f"{_median_reach([t['reached_at'] for t in ts], budget)} | {faster} / {slower} | "
                   f"{_q([base20[t['seed']].best_fraction for t in ts], .5):.3f} / "
                   f"{_q([t['best_fraction_20'] for t in ts], .5):.3f} |")
    if all_with:
        out.append(f"| **all** | | | | mean {statistics.fmean(all_without):.1f} | "
                   f"mean {statistics.fmean(all_with):.1f} "
                   f"| {sum(a < b for a, b in zip(all_with, all_without))} / "
                   f"{sum(a > b for a, b in zip(all_with, all_without))} | |")
    better = bool(all_with) and statistics.fmean(all_with) < statistics.fmean(all_without)
    return "\n".join(out), better


# -- the command ------------------------------------------------------------------------------------

def _task(args: tuple[str, str, int, tuple[int, ...], tuple[str, ...]]
          ) -> tuple[list[Row], dict[str, Any], str, str, int]:
    wn, cn, seed, budgets, methods = args
    pairs = {(w.name, c.name): (w, c) for w, c in catalog()}
    w, c = pairs[(wn, cn)]
    rows, engine = run_pair_seed(w, c, seed, budgets, methods)
    return rows, engine, wn, cn, seed


def _transfer_task(args: tuple[str, str, str, int, list[Finding], int]) -> dict[str, Any]:
    wn, cn, sn, seed, fs, budget = args
    pairs = {(w.name, c.name): (w, c) for w, c in catalog()}
    w, c = pairs[(wn, cn)]
    return run_transfer(w, c, pairs[(wn, sn)][1], seed, fs, budget)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 pairs, 3 seeds (a smoke run; not the published table)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per pair (default 10, quick 3)")
    ap.add_argument("--budgets", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(ALL_METHODS))
    ap.add_argument("--pairs", nargs="+", default=None, help="workload:cluster pairs (default: the whole catalog)")
    ap.add_argument("--no-transfer", action="store_true", help="skip the bank-transfer table")
    ap.add_argument("--transfer-budget", type=int, default=None,
                    help="trials of the bank-seeded runs (default: the largest budget)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--out", type=Path, default=Path("docs/BENCHMARKS.md"))
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/search.json"),
                    help="raw rows, for --render-from")
    ap.add_argument("--render-from", type=Path, default=None,
                    help="only re-render --out from an earlier --json (no trials are run)")
    args = ap.parse_args(argv)
    if args.render_from is not None:
        data = json.loads(args.render_from.read_text(encoding="utf-8"))
        rows = [Row(**r) for r in data["rows"]]
        _write_page(args.out, render(rows, data["transfers"], data["methods"], data["budgets"], data["seeds"],
                                     [tuple(p) for p in data["pairs"]], data["elapsed_s"], data["jobs"],
                                     data["command"], data["transfer_budget"]))
        return 0
    seeds = args.seeds if args.seeds is not None else (3 if args.quick else 10)
    budgets = tuple(sorted(set(args.budgets)))
    methods = tuple(args.methods)
    every = [(w.name, c.name) for w, c in catalog()]
    if args.pairs:
        chosen = [tuple(p.split(":", 1)) for p in args.pairs]
    elif args.quick:
        chosen = list(QUICK_PAIRS)
    else:
        chosen = every
    started = time.time()
    command = recorded_command("benchmarks.search", argv)
    transfers: list[dict[str, Any]] = []

    def dump(partial: bool) -> None:
        """The raw rows so far (after every task: an interrupted run can still be rendered)."""
        if args.json is None:
            return
        done = list(dict.fromkeys((r.workload, r.cluster) for r in rows))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": command.strip() + (" (interrupted: partial results)" if partial else ""),
            "elapsed_s": time.time() - started, "jobs": args.jobs, "seeds": seeds, "budgets": list(budgets),
            "methods": list(methods), "pairs": [list(p) for p in (done if partial else chosen)],
            "transfer_budget": args.transfer_budget or max(budgets), "rows": [asdict(r) for r in rows],
            "transfers": transfers}) + "\n", encoding="utf-8")

    # seed-major, so that an interrupted run has every pair at its first seeds
    tasks = [(w, c, s, budgets, methods) for s in range(seeds) for w, c in chosen]
    rows: list[Row] = []
    engine_runs: dict[tuple[str, str, int], dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for i, (rs, engine, wn, cn, seed) in enumerate(pool.map(_task, tasks), start=1):
            rows += rs
            engine_runs[(wn, cn, seed)] = engine
            dump(partial=True)
            print(f"[{time.time() - started:6.0f}s] {i}/{len(tasks)} {wn} {cn} seed {seed}", file=sys.stderr,
                  flush=True)
        reach_budget = args.transfer_budget or max(budgets)
        if not args.no_transfer and "infrarsi" in methods and BANK_BUDGET in budgets:
            pairs = {(w.name, c.name): (w, c) for w, c in catalog()}
            chosen_pairs = [pairs[p] for p in chosen]
            ttasks = []
            for w, c in chosen_pairs:
                src = source_cluster(w, c, catalog())
                for s in range(seeds):
                    source = engine_runs.get((w.name, src.name, s)) if src is not None else None
                    if source is None and src is not None:  # the source pair was not benchmarked: run it
                        trials = play(run_engine, SimulatedJob(w, src, seed=s), BANK_BUDGET, s)
                        source = {"trials": trials, "verdicts": verify(trials, w, src, s)}
                        engine_runs[(w.name, src.name, s)] = source
                    if source is not None and src is not None:
                        fs = findings(w, src, s, source["trials"], source["verdicts"])
                        ttasks.append((w.name, c.name, src.name, s, fs, reach_budget))
            for i, t in enumerate(pool.map(_transfer_task, ttasks), start=1):
                transfers.append(t)
                dump(partial=True)
                print(f"[{time.time() - started:6.0f}s] transfer {i}/{len(ttasks)} {t['workload']} {t['cluster']}",
                      file=sys.stderr, flush=True)
    elapsed = time.time() - started
    _write_page(args.out, render(rows, transfers, methods, budgets, seeds, chosen, elapsed, args.jobs,
                                 command.strip(), args.transfer_budget or max(budgets)))
    dump(partial=False)
    print(f"wrote {args.out} in {elapsed:.0f} s", file=sys.stderr)
    return 0


def _write_page(path: Path, text: str) -> None:
    """The page, keeping the sections other scripts generate in it (``benchmarks/doc_sections.py``)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(keep_marked(old, text), encoding="utf-8")


def render(rows: Sequence[Row], transfers: Sequence[dict[str, Any]], methods: Sequence[str], budgets: Sequence[int],
           seeds: int, pairs: Sequence[tuple[str, str]], elapsed: float, jobs: int, command: str,
           transfer_budget: int) -> str:
    mid = 20 if 20 in budgets else budgets[len(budgets) // 2]
    top = max(budgets)
    goal, ok = goal_table(rows, mid, top) if "infrarsi" in methods and "optuna-tpe" in methods else ("", {})
    transfer, better = transfer_table(transfers, rows, transfer_budget) if transfers else ("(not run)", False)
    headline = summary_table([r for r in rows if r.budget == mid], methods, [mid])
    return f"""# Benchmarks

Generated by `{command}` — do not edit by hand ({len(pairs)} (workload, cluster) pairs × {seeds} seeds,
budgets {", ".join(map(str, budgets))}; {elapsed / 60:.0f} min with {jobs} worker process(es) on the machine
that wrote it). What each column means and how the methods are set up: `docs/search.md` ("Benchmark at
cluster scale"); the simulator: `docs/simulator.md`.

## Search at cluster scale: headline ({mid} trials)

{headline}

## Every budget

Best found: the noiseless MFU of the configuration the method measured fastest, over the optimum's.
Trials to 95%: the first trial that ran a configuration within 95% of the optimum (a run that never did
counts as budget + 1; `>B` when the median did not). OOM/crash share: device-seconds of OOM/crashed trials
over all device-seconds of the search. Promoted / false promotions: after the same verification for every
method (top {TOP_K} by measured time, interleaved A/B against the default, rank test and bootstrap CI with
min effect {MIN_EFFECT:.0%}); false = promoted but not truly {MIN_EFFECT:.0%} faster than the default.
Last column: the method's fastest-measured configuration is truly more than {MIN_EFFECT:.0%} slower than
the truly fastest configuration it ran (noise picked it).

{summary_table(rows, methods, budgets)}

## Per pair: median best found at {mid} trials / median trials to 95% (runs of {top})

{pair_table(rows, methods, mid, top)}

## The goal: at {mid} trials ≥ 95% of the optimum, in half of TPE's trials, under 10% OOM device-seconds

{goal}

Met on every pair: median ≥ 0.95: **{"yes" if ok.get("median") else "no"}**; at most half TPE's trials:
**{"yes" if ok.get("half") else "no"}**; OOM share under 10%: **{"yes" if ok.get("oom") else "no"}**.

## Transfer: the engine seeded from a bank filled on another cluster

The bank holds what `remember` stores after the engine's verified {BANK_BUDGET}-trial run on the source
cluster (same seed): every verdict and every failed trial. `bank.similar(..., top=4)` offers up to 4
transfers (`bank_seeds`); the target run's first batch takes up to {max(1, 8 // 4)} of them that are valid
on the target. Trials to 95% over runs of {transfer_budget}; same noise stream
with and without the bank.

{transfer}

Fewer trials to 95% with the bank (mean over every seed): **{"yes" if better else "no"}**.
"""


if __name__ == "__main__":
    raise SystemExit(main())
