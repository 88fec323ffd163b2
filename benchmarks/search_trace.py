"""One method's run on one simulated pair, trial by trial, with the truth beside it.

    .venv/bin/python -m benchmarks.search_trace mixtral-8x7b h100-2x8 --seed 2 --budget 20

For each trial: its outcome, its noiseless fraction of the optimum, its cost,
what it changed from the default, and (for the engine) what the models
believed just before it ran: P(fit), P(runs), predicted and true peak. The
crash reason is the simulator's. At the end, the engine's predictions at the
optimum. This is how the shortfalls in ``docs/search.md`` ("Where the engine
stands") were diagnosed; it reads nothing the methods do not see.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from benchmarks.search_tuners import METHODS, play, to_candidate
from infrarsi.search.engine import SearchEngine
from simlab.cluster import SimulatedJob

GIB = 2.0 ** 30


class _Watch:
    """Wraps ``SearchEngine.observe`` to note the models' beliefs about each record before it is fitted."""

    def __init__(self) -> None:
        self.beliefs: list[dict[str, float]] = []
        self.engine: SearchEngine | None = None
        self._original = SearchEngine.observe

    def __enter__(self) -> _Watch:
        watch = self

        def observe(engine: SearchEngine, records: Sequence[Any]) -> None:
            watch.engine = engine
            for r in records:
                m = engine.models
                cand = engine.space.complete(r.candidate)
                x = m.design([cand])
                mu, _ = m.memory.predict(x)
                watch.beliefs.append({"prob_fits": float(m.memory.prob_fits(x, engine.models.memory_limit)[0]),
                                      "prob_ok": float(m.prob_ok([cand], x)[0]),
                                      "peak_gib": math.exp(float(mu[0])) / GIB})
            watch._original(engine, records)

        SearchEngine.observe = observe  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        SearchEngine.observe = self._original  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.search_trace", description=__doc__.split("\n")[0])
    ap.add_argument("workload")
    ap.add_argument("cluster")
    ap.add_argument("--method", default="infrarsi", choices=list(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=20)
    args = ap.parse_args(argv)
    truth = SimulatedJob(args.workload, args.cluster)
    gt = truth.ground_truth()
    default = truth.space.default()
    with _Watch() as watch:
        trials = play(METHODS[args.method], SimulatedJob(args.workload, args.cluster, seed=args.seed),
                      args.budget, args.seed)
    limit = truth.cluster.usable_hbm_bytes / GIB
    print(f"{args.method} on {args.workload} / {args.cluster}, seed {args.seed}: optimum MFU {gt.mfu:.3f}, "
          f"usable memory {limit:.1f} GiB")
    for i, t in enumerate(trials, 1):
        e = truth.expected(t.config)
        frac = gt.step_time_s / e.step_time_s if e.outcome == "ok" and e.step_time_s else 0.0
        changed = " ".join(f"{k}={v}" for k, v in t.config.items() if v != default[k]) or "(default)"
        belief = ""
        if args.method == "infrarsi" and i <= len(watch.beliefs):
            b = watch.beliefs[i - 1]
            belief = (f" | P(fit) {b['prob_fits']:.2f} P(runs) {b['prob_ok']:.2f} "
                      f"peak {b['peak_gib']:.0f} GiB (true {e.peak_mem_bytes / GIB:.0f})")
        reason = f" | {truth._noiseless(t.config).reason}" if t.outcome == "crash" else ""
        print(f"{i:3d} {t.outcome:5s} {frac:.3f} {t.cost_s:8.0f} dev-s  {changed}{belief}{reason}")
    print("optimum:", " ".join(f"{k}={v}" for k, v in gt.config.items() if v != default[k]))
    engine = watch.engine
    if args.method == "infrarsi" and engine is not None:
        x = engine.models.design([to_candidate(gt.config, truth.space.dimensions)])
        mu_t, var_t = engine.models.time.predict(x)
        mu_m, _ = engine.models.memory.predict(x)
        print(f"engine at the optimum: step {math.exp(float(mu_t[0])):.2f} s (sd of log {math.sqrt(var_t[0]):.2f}; "
              f"true {gt.step_time_s:.2f}), peak {math.exp(float(mu_m[0])) / GIB:.0f} GiB "
              f"(true {truth.expected(gt.config).peak_mem_bytes / GIB:.0f}), "
              f"P(fit) {engine.models.memory.prob_fits(x, engine.models.memory_limit)[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
