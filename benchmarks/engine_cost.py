"""The engine's own cost per trial: refit every model over all recorded trials, then propose the next candidate.

    OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python -m benchmarks.engine_cost            # 20, 100, 1000 trials
    OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python -m benchmarks.engine_cost --profile 1000

What ``bot/stages/run/search.py`` does after every trial once the first batch is
done: ``engine.observe([record])`` (the time model, the Tobit memory model and
the feasibility model refitted over every record), ``engine.stop_advice(...)``
and ``engine.next_batch(q=1)``. Each is timed here on an engine that already
holds ``n - 1`` records, at ``n`` = 20, 100 and 1,000 (a long-lived experience
bank or a resumed long run makes the last one real), several repeats each.

The records are trials of a simulated job (``simlab.cluster``, the same space,
contract and priors as ``benchmarks/search.py``'s engine): the default, then
distinct random configurations the launcher accepts, run on the simulator, so
they carry its OOMs (censored peaks) and crashes. The figure is stated against
the median wall time of an ok trial of that job (13 steps on the cluster) and
of a tinygpt fixture trial (about 14 s, ``fixtures/tinygpt/README.md``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.doc_sections import write_section
from benchmarks.doc_sections import recorded_command
from benchmarks.search_tuners import Trial, engine_space, key, random_configs, to_record
from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.search.engine import SearchEngine
from simlab.cluster import SimulatedJob
from infrarsi.trial_record import TrialRecord

#: A default tinygpt trial, wall seconds including start-up (fixtures/tinygpt/README.md).
FIXTURE_TRIAL_S = 14.0
MIN_EFFECT = 0.01  # contract.verify.min_effect, as benchmarks/search.py


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """Seconds per step of one fit-and-propose at ``n`` records, over the repeats."""

    n: int
    fit_s: tuple[float, ...]
    stop_s: tuple[float, ...]
    propose_s: tuple[float, ...]
    outcomes: dict[str, int]

    @property
    def total_s(self) -> tuple[float, ...]:
        return tuple(a + b + c for a, b, c in zip(self.fit_s, self.stop_s, self.propose_s))


def trial_records(job: SimulatedJob, n: int, seed: int) -> tuple[list[TrialRecord], list[Trial]]:
    """``n`` trials of ``job``: its default, then distinct random launcher-valid configurations."""
    dims = job.space.dimensions
    trials: list[Trial] = []
    seen: set[tuple[object, ...]] = set()
    configs = random_configs(job, np.random.default_rng([seed, 17]))
    config = job.space.default()
    while len(trials) < n:
        if key(config) not in seen:
            seen.add(key(config))
            r = job.run(config)
            trials.append(Trial(config=dict(config), outcome=r.outcome, step_time_s=r.step_time_s,
                                peak_mem_bytes=r.peak_mem_bytes, cost_s=r.cost_s))
        config = next(configs)
    return [to_record(t, i + 1, dims) for i, t in enumerate(trials)], trials


def time_step(job: SimulatedJob, records: Sequence[TrialRecord], repeats: int, seed: int) -> Timing:
    """Observe the last record on an engine holding the others, then the stop advice and a proposal."""
    space = engine_space(job)
    engine = SearchEngine(space, builtin_priors(space, job.cluster.world_size), memory_limit=job.cluster.usable_hbm_bytes, seed=seed)
    *before, last = records
    engine.observe(before)
    fit, stop, propose = [], [], []
    for r in range(repeats):
        # the same trial with a different cost each repeat: the engine sees a changed record and refits
        record = last if r == 0 else _recosted(last, r)
        t0 = time.perf_counter()
        engine.observe([record])
        t1 = time.perf_counter()
        engine.stop_advice(min_effect=MIN_EFFECT)
        t2 = time.perf_counter()
        engine.next_batch(q=1)
        t3 = time.perf_counter()
        fit.append(t1 - t0)
        stop.append(t2 - t1)
        propose.append(t3 - t2)
    outcomes: dict[str, int] = {}
    for rec in records:
        outcomes[rec.outcome.value] = outcomes.get(rec.outcome.value, 0) + 1
    return Timing(n=len(records), fit_s=tuple(fit), stop_s=tuple(stop), propose_s=tuple(propose), outcomes=outcomes)


def _recosted(record: TrialRecord, r: int) -> TrialRecord:
    from dataclasses import replace
    return replace(record, cost_s=record.cost_s + r * 1e-3)


def profile(job: SimulatedJob, records: Sequence[TrialRecord], seed: int, top: int = 25) -> str:
    """cProfile of one fit-and-propose, by cumulative time."""
    space = engine_space(job)
    engine = SearchEngine(space, builtin_priors(space, job.cluster.world_size), memory_limit=job.cluster.usable_hbm_bytes, seed=seed)
    *before, last = records
    engine.observe(before)
    prof = cProfile.Profile()
    prof.enable()
    engine.observe([_recosted(last, 1)])
    engine.stop_advice(min_effect=MIN_EFFECT)
    engine.next_batch(q=1)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def render(job: SimulatedJob, timings: Sequence[Timing], trial_s: float, command: str, load: str) -> str:
    space = engine_space(job)
    columns = len(SearchEngine(space, builtin_priors(space)).features.names)
    lines = ["## The engine's own cost per trial", "",
             f"Generated by `{command}` ({load}). What `infrarsi run` does after each trial: refit the time, "
             "Tobit memory and feasibility models over every recorded trial (`observe`), the stop advice, "
             f"and the next proposal (`next_batch(q=1)`), on {job.workload.name} / {job.cluster.name} "
             f"({len(space.feature_names)} main features, {columns} design columns). The records are the "
             "default and random launcher-valid configurations run on the simulator, with its OOMs and "
             "crashes. Seconds of one CPU core (`OPENBLAS_NUM_THREADS=1`).", "",
             "| recorded trials | outcomes | refit: median / max | stop advice | proposal | "
             "total: median / max | vs a simulated ok trial | vs a tinygpt trial |",
             "|---|---|---|---|---|---|---|---|"]
    for t in timings:
        total = t.total_s
        outcomes = ", ".join(f"{v} {k}" for k, v in sorted(t.outcomes.items()))
        lines.append(f"| {t.n} | {outcomes} | {statistics.median(t.fit_s):.2f} / {max(t.fit_s):.2f} s | "
                     f"{statistics.median(t.stop_s):.2f} s | {statistics.median(t.propose_s):.2f} s | "
                     f"{statistics.median(total):.2f} / {max(total):.2f} s | "
                     f"{statistics.median(total) / trial_s:.2%} of {trial_s:.0f} s | "
                     f"{statistics.median(total) / FIXTURE_TRIAL_S:.1%} of {FIXTURE_TRIAL_S:.0f} s |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.engine_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="mixtral-8x7b:h100-2x8", help="workload:cluster of the simulated job")
    ap.add_argument("--trials", type=int, nargs="+", default=[20, 100, 1000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("docs/BENCHMARKS.md"),
                    help="the page whose section 'engine-cost' is replaced (default docs/BENCHMARKS.md)")
    ap.add_argument("--no-write", dest="out", action="store_const", const=None, help="only print the table")
    ap.add_argument("--profile", type=int, metavar="N", help="print a cProfile of one step at N records instead")
    args = ap.parse_args(argv)
    workload, cluster = args.pair.split(":", 1)
    job = SimulatedJob(workload, cluster, seed=args.seed)
    records, trials = trial_records(job, max(args.trials + ([args.profile] if args.profile else [])), args.seed)
    if args.profile:
        print(profile(job, records[:args.profile], args.seed))
        return 0
    ok_wall = [t.cost_s / job.cluster.world_size for t in trials if t.outcome == "ok"]
    trial_s = statistics.median(ok_wall)
    timings = []
    for n in args.trials:
        t = time_step(job, records[:n], args.repeats, args.seed)
        timings.append(t)
        print(f"{n:>5} trials: refit {statistics.median(t.fit_s):.3f} s, stop advice {statistics.median(t.stop_s):.3f}"
              f" s, proposal {statistics.median(t.propose_s):.3f} s; total median {statistics.median(t.total_s):.3f} s,"
              f" max {max(t.total_s):.3f} s ({args.repeats} repeats)", file=sys.stderr, flush=True)
    command = "OPENBLAS_NUM_THREADS=1 " + recorded_command("benchmarks.engine_cost", argv)
    load = (f"{len(timings[0].fit_s)} repeats; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
            "while it ran" if timings else "")
    text = render(job, timings, trial_s, command, load)
    print(text)
    if args.out is not None:
        write_section(args.out, "engine-cost", text)
        print(f"wrote the section to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
