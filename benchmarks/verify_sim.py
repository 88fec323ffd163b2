"""The sequential verification simulated through the production ``verify_candidate``, at this machine's noise and
with bursts of outside load, before and after disturbed runs were re-run.

    python -m benchmarks.verify_sim [--sims 400] [--sigmas 0.10 0.25] [--seed 0] [--out docs/doctor.md]

Each simulated verification runs the real ``bot/stages/run/verify.py`` (the sequential plan, the interleaved
order, the disturbance check, the judge with every invariant row) against ``tests/support/simulated.py``'s
machine: a run's median step time is log-normal around its arm's true time (log-sd ``sigma``; this machine's
tables show 0.10-0.26), and a *burst* makes two consecutive runs of one arm (chosen at random, starting at a
random run of the first four) 3-5x slower. "before" is the bot before this change: the burst is not looked
for (counted) and futility is judged at the doctor's noise alone; "after": the host's CPU pressure marks the
burst's runs, which are run again, and futility uses the larger of the doctor's noise and the runs' own.

Printed, per sigma: A/A false promotions (must be <= alpha = 0.05), power at a true 1.3x, median pairs of an
A/A, and the share of verdicts a burst flips (the same seeds with and without the burst). The table goes to
the ``verify-sim`` section of docs/doctor.md with the command.

A second table, *sustained contention*: from a random run of the first pairs to the end, another process keeps
the CPUs busy; every run is 2-3x slower and the faster arm's 1.5x more so (its short steps lose more to each
preemption), which pulls a real speedup towards 1. "before": disturbed runs are counted once the re-runs are
spent (the bot before this change); "after": the bot waits for quiet (on the simulated clock) and ends
``inconclusive`` when it does not come. Printed: A/A false promotions (<= alpha) and, at a true 1.3x, the shares
of promoted, ``not_significant`` (a wrong answer: must be 0 after) and ``inconclusive`` verdicts. Written to the
``verify-sim-contention`` section.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def legacy_futility() -> Iterator[None]:
    """Futility judged at the doctor's noise alone, as before this change (infrarsi.stats.sequential._sigma)."""
    import infrarsi.stats.sequential as seq

    current = seq._sigma

    def doctors_only(plan, base, cand):  # noqa: ANN001, ANN202
        return np.full(base.shape[0], max(plan.sigma_log, 1e-6)) if plan.sigma_log is not None \
            else current(plan, base, cand)

    seq._sigma = doctors_only
    try:
        yield
    finally:
        seq._sigma = current


def _one(speedup: float, sigma: float, seed: int, burst: bool, after: bool) -> tuple[str, int, int]:
    from bot.stages.run.verify import verify_candidate
    from tests.support.simulated import CANDIDATE, Burst, SimulatedMachine

    rng = np.random.default_rng(10_000 + seed)
    b = Burst(arm="candidate" if rng.random() < 0.5 else "baseline", at=int(rng.integers(0, 3)),
              factor=float(rng.uniform(3.0, 5.0))) if burst else None
    machine = SimulatedMachine(speedup=speedup, sigma=sigma, seed=seed, burst=b, visible=after)
    verdict = verify_candidate(machine, run_id="sim", candidate=CANDIDATE, doctor=machine.doctor(),  # type: ignore[arg-type]
                               quiet=machine.quiet())
    return verdict.kind.value, verdict.pairs, len(verdict.reruns)


@contextmanager
def legacy_counting() -> Iterator[None]:
    """Disturbed runs counted once the re-runs are spent, as before this change (no waiting, no inconclusive)."""
    import bot.stages.run.verify as verify
    from infrarsi.quiet import DisturbanceGuard
    from infrarsi.disturbance import disturbance

    class Counting(DisturbanceGuard):
        def run(self, launch, reference, *, same_arm=lambda: True):  # noqa: ANN001, ANN202
            while True:
                record = launch()
                why = disturbance(record, reference(), same_arm=same_arm())
                if why is None or self.spent >= self.rerun_budget:
                    return record
                self.spent += 1
                self.reruns.append(record.trial_no)

    current = verify.DisturbanceGuard
    verify.DisturbanceGuard = Counting  # type: ignore[misc]
    try:
        yield
    finally:
        verify.DisturbanceGuard = current  # type: ignore[misc]


def _contended(speedup: float, sigma: float, seed: int, after: bool) -> str:
    from bot.stages.run.verify import verify_candidate
    from tests.support.simulated import CANDIDATE, Contention, SimulatedMachine

    rng = np.random.default_rng(20_000 + seed)
    machine = SimulatedMachine(speedup=speedup, sigma=sigma, seed=seed,
                               contention=Contention(at=int(rng.integers(2, 5)), factor=float(rng.uniform(2.0, 3.0))))
    if after:
        verdict = verify_candidate(machine, run_id="sim", candidate=CANDIDATE, doctor=machine.doctor(),  # type: ignore[arg-type]
                                   quiet=machine.quiet())
    else:
        with legacy_counting():
            verdict = verify_candidate(machine, run_id="sim", candidate=CANDIDATE, doctor=machine.doctor(),  # type: ignore[arg-type]
                                       quiet=machine.quiet())
    return verdict.kind.value


def contention(sigmas: list[float], sims: int, seed: int, progress) -> list[dict]:  # noqa: ANN001
    rows = []
    for sigma in sigmas:
        for after in (False, True):
            aa = [_contended(1.0, sigma, seed + i, after) for i in range(sims)]
            win = [_contended(1.3, sigma, seed + i, after) for i in range(sims)]
            progress(f"contention, sigma {sigma}, {'after' if after else 'before'}: done")
            rows.append({"sigma": sigma, "design": "after" if after else "before",
                         "aa_false": aa.count("promoted") / sims,
                         "aa_inconclusive": aa.count("inconclusive") / sims,
                         "promoted": win.count("promoted") / sims,
                         "not_significant": win.count("not_significant") / sims,
                         "inconclusive": win.count("inconclusive") / sims})
    return rows


def render_contention(rows: list[dict], command: str, sims: int, when: str) -> str:
    out = [f"Simulated {when} with `{command}` ({sims} verifications a cell, sustained contention from a random run "
           "of the first pairs to the end, 2-3x slower, the faster arm 1.5x more; through the production "
           "`verify_candidate`):", "",
           "| log-sd | design | A/A promoted | A/A inconclusive | 1.3x promoted | 1.3x not_significant (wrong) "
           "| 1.3x inconclusive |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['sigma']:.2f} | {r['design']} | {r['aa_false']:.3f} | {r['aa_inconclusive']:.2f} | "
                   f"{r['promoted']:.2f} | {r['not_significant']:.2f} | {r['inconclusive']:.2f} |")
    return "\n".join(out)


def cell(speedup: float, sigma: float, sims: int, seed: int, *, burst: bool, after: bool) -> list[tuple[str, int, int]]:
    if after:
        return [_one(speedup, sigma, seed + i, burst, after) for i in range(sims)]
    with legacy_futility():
        return [_one(speedup, sigma, seed + i, burst, after) for i in range(sims)]


def measure(sigmas: list[float], sims: int, seed: int, progress) -> list[dict]:  # noqa: ANN001
    rows = []
    for sigma in sigmas:
        for after in (False, True):
            got = {}
            for speedup in (1.0, 1.3):
                for burst in (False, True):
                    got[(speedup, burst)] = cell(speedup, sigma, sims, seed, burst=burst, after=after)
                    progress(f"sigma {sigma}, {'after' if after else 'before'}, {speedup}x, "
                             f"{'burst' if burst else 'quiet'}: done")

            def share(speedup: float, burst: bool) -> float:
                return sum(v == "promoted" for v, _, _ in got[(speedup, burst)]) / sims

            def flips(speedup: float) -> float:
                quiet, loud = got[(speedup, False)], got[(speedup, True)]
                return sum(a[0] != b[0] for a, b in zip(quiet, loud)) / sims
            rows.append({"sigma": sigma, "design": "after" if after else "before",
                         "aa_false": share(1.0, False), "aa_false_burst": share(1.0, True),
                         "power": share(1.3, False), "power_burst": share(1.3, True),
                         "aa_pairs": statistics.median(p for _, p, _ in got[(1.0, False)]),
                         "flip_win": flips(1.3), "flip_aa": flips(1.0),
                         "reruns": statistics.fmean(r for _, _, r in got[(1.3, True)])})
    return rows


def render(rows: list[dict], command: str, sims: int, when: str) -> str:
    out = [f"Simulated {when} with `{command}` ({sims} verifications a cell, through the production "
           "`verify_candidate`; α = 0.05, `verify.max_pairs` = 12, min effect 1%):", "",
           "| log-sd | design | A/A promoted | A/A promoted, burst | power at 1.3x | power, burst | median pairs (A/A) "
           "| verdicts a burst flips (1.3x / A/A) | runs re-run per burst |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['sigma']:.2f} | {r['design']} | {r['aa_false']:.3f} | {r['aa_false_burst']:.3f} | "
                   f"{r['power']:.2f} | {r['power_burst']:.2f} | {r['aa_pairs']:g} | "
                   f"{r['flip_win']:.2f} / {r['flip_aa']:.2f} | {r['reruns']:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verify_sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=400)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.10, 0.25])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "doctor.md")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = measure(args.sigmas, args.sims, args.seed, lambda m: print(f"verify_sim: {m}", file=sys.stderr, flush=True))
    command = "python -m benchmarks.verify_sim " + " ".join(argv if argv is not None else sys.argv[1:])
    when = time.strftime("%Y-%m-%d", time.gmtime())
    text = render(rows, command.strip(), args.sims, when)
    print(text)
    contended = render_contention(contention(args.sigmas, args.sims, args.seed,
                                             lambda m: print(f"verify_sim: {m}", file=sys.stderr, flush=True)),
                                  command.strip(), args.sims, when)
    print()
    print(contended)
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if not args.no_write:
        from benchmarks.doc_sections import write_section

        write_section(args.out, "verify-sim", text)
        write_section(args.out, "verify-sim-contention", contended)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
