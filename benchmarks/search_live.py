"""Live confirmation of the table replay: every method run for real, once per seed, scored against the table.

    .venv/bin/python -m benchmarks.search_live benchmarks/data/tinygpt.json [--budget 20] [--seeds 0 1] [--jobs 2]

A measured table (``benchmarks/measure_space.py``) predicts how each tuner does on the fixture; this checks
the prediction. Each method of ``benchmarks/search_table.py`` drives a :class:`LiveBench`: the table's space
(its knobs, patches, constraints and default), but every trial is a real ``infrarsi trial`` of the
configuration on a fresh copy of the fixture, under the table's memory limit. The method's top candidates are
then verified live the way the replay verifies them (interleaved reruns against the default, pairs sized by
the table's noise). Its best found is scored with the table's truth (the optimum's mean step time over that
of the configuration it measured fastest) and set against the replay's p10–p90 for the same method and budget
(``benchmarks/results/search_table.json``, written by ``search_table``), and against the replay of the live run
itself: the method with the live run's seed, against ``--draws`` other draws of the table's noise
(:func:`seed_band`). The first band also holds the luck of the seed; the second is the table's prediction for
this one run.

Run it on the machine that measured the table, on the same day if possible (the machine's fingerprint must
match). Every finished trial is appended to ``--journal`` (JSON lines); a killed run resumes where it stopped
without repeating a trial, since each method is deterministic given its seed and the results it saw. Writes
the section "Live confirmation" of ``docs/BENCHMARKS.md`` and the rows to
``benchmarks/results/search_live.json``. About ``methods x (budget + verification reruns)`` trials: at 15 s
a trial, seven methods at budget 20 take two to three hours on two cores. Verification reruns are most of it
where the table is noisy (3 candidates x up to 12 pairs x 2 runs per method); ``--max-pairs 4`` caps them
(best found, the figure compared with the replay, does not depend on verification).

The section ends with how this machine's step times compare with the table's on the configurations both ran
(:func:`drift`): a machine that runs some settings faster than on the day the table was measured changes what
a method measures fastest, which no replay band allows for.
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
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.doc_sections import publish
from benchmarks.doc_sections import recorded_command
from benchmarks.measure_space import design_for, fixture_repo, machine_fingerprint, trial
from benchmarks.search import ALL_METHODS, ALPHA, MAX_PAIRS, Row, Truth, _q, score_trials, verify_on
from benchmarks.search_table import METHODS, cached_table, check_complete, replay
from benchmarks.search_tuners import key, play
from benchmarks.space_table import (Run, Table, TableError, TableSpace, compared_keys, config_candidate, load,
                                    machine_text, optimum, sigma_log, true_time)
from simlab.cluster.knobs import Value
from infrarsi.stats.power import min_repeats

SECTION = "live-confirmation"

Runner = Callable[[Mapping[str, Value]], Run]


@dataclass(kw_only=True)
class Journal:
    """Every live run so far, by stream (a method's search, or its verification) and call index."""

    path: Path
    done: dict[tuple[str, int], tuple[tuple[Any, ...], Run]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> Journal:
        journal = cls(path=path)
        if path.exists():
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    e = json.loads(line)
                    config = {k: v for k, v in e["config"].items()}
                    journal.done[(e["stream"], int(e["i"]))] = (key(config), Run(**e["run"]))
                except (ValueError, KeyError, TypeError) as exc:
                    raise TableError(f"{path}:{n}: not a journal line ({exc}); move the file away to start over")
        return journal

    def get(self, stream: str, i: int, config: Mapping[str, Value]) -> Run | None:
        hit = self.done.get((stream, i))
        if hit is None:
            return None
        if hit[0] != key(config):
            raise TableError(f"{self.path}: {stream} call {i} was {dict(hit[0])}, now {dict(config)}: the journal is "
                             "from another table, seed or code; move it away to start over")
        return hit[1]

    def add(self, stream: str, i: int, config: Mapping[str, Value], run: Run) -> None:
        self.done[(stream, i)] = (key(config), run)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"stream": stream, "i": i, "config": dict(config), "run": asdict(run)}) + "\n")


@dataclass(kw_only=True)
class LiveBench(TableSpace):
    """The table's space as a :class:`benchmarks.search_tuners.Bench` whose runs are real trials.

    ``runner`` runs one configuration (``infrarsi trial`` on the fixture copy); the journal answers the
    calls an earlier, killed session already made."""

    table: Table
    runner: Runner
    journal: Journal
    stream: str
    calls: int = 0
    log: Callable[[str], None] = lambda _line: None

    def valid(self, config: Mapping[str, Value]) -> bool:
        return key(config) in self.table.configs

    def run(self, config: Mapping[str, Value]) -> Run:
        i, self.calls = self.calls, self.calls + 1
        run = self.journal.get(self.stream, i, config)
        if run is None:
            run = self.runner(config)
            self.journal.add(self.stream, i, config, run)
            step = f"{run.step_time_s * 1000:.0f} ms" if run.step_time_s else "-"
            self.log(f"{self.stream} #{i + 1}: {run.outcome} {step} {config_candidate(config, self.table).describe()}")
        return run


@dataclass(frozen=True, kw_only=True, slots=True)
class Live:
    """One method's live run, scored by the table, beside its replay."""

    row: Row
    band: tuple[float, float] | None  # the replay's p10-p90 of best found, same method and budget
    wall_s: float
    replay_median: float | None = None  # the replay's median best found, same method and budget
    # The replay of this very run: the method with the live run's seed against other draws of the table's noise.
    seed_band: tuple[float, float] | None = None

    @property
    def inside(self) -> bool | None:
        return _within(self.row.best_fraction, self.band)

    @property
    def inside_seed(self) -> bool | None:
        return _within(self.row.best_fraction, self.seed_band)


def _within(value: float, band: tuple[float, float] | None) -> bool | None:
    return None if band is None else band[0] - 1e-9 <= value <= band[1] + 1e-9


def _replay_best(rows: Sequence[Mapping[str, Any]], table: str, method: str, budget: int) -> list[float]:
    return [float(r["best_fraction"]) for r in rows
            if r["workload"] == table and r["method"] == method and int(r["budget"]) == budget]


def replay_band(rows: Sequence[Mapping[str, Any]], table: str, method: str, budget: int) -> tuple[float, float] | None:
    """p10 and p90 of the replay's best found for ``method`` at ``budget`` on the table named ``table``."""
    best = _replay_best(rows, table, method, budget)
    return (_q(best, 0.1), _q(best, 0.9)) if best else None


def replay_median(rows: Sequence[Mapping[str, Any]], table: str, method: str, budget: int) -> float | None:
    best = _replay_best(rows, table, method, budget)
    return _q(best, 0.5) if best else None


def stream(method: str, seed: int, kind: str) -> str:
    """A journal stream's name: ``random/search`` for seed 0 (as journals written before ``--seeds`` name it),
    ``random@1/search`` for seed 1."""
    return f"{method}/{kind}" if seed == 0 else f"{method}@{seed}/{kind}"


def live_method(table: Table, method: str, budget: int, seed: int, runner: Runner, journal: Journal,
                log: Callable[[str], None], max_pairs: int | None = None) -> tuple[Row, float]:
    """``method`` at ``budget`` on live trials, its top candidates verified live (at most ``max_pairs`` pairs
    each); (row, seconds of live trials, the journal's own: a resumed run still states what it cost)."""
    streams = (stream(method, seed, "search"), stream(method, seed, "verify"))
    search = LiveBench(table=table, runner=runner, journal=journal, stream=streams[0], log=log)
    trials = play(ALL_METHODS[method], search, budget, seed)
    verify = LiveBench(table=table, runner=runner, journal=journal, stream=streams[1], log=log)
    truth = Truth(time=lambda c: true_time(table, c), optimum_s=optimum(table)[1], default=table.default())
    row, _ = score_trials(method, trials, budget, workload=table.label, cluster="live", seed=seed, truth=truth,
                          verify=lambda first: verify_on(first, verify, sigma_log(table), max_pairs))
    return row, sum(run.cost_s for (name, _), (_, run) in journal.done.items() if name in streams)


def _noise_draw(task: tuple[str, str, int, int, int]) -> float:
    path, method, seed, budget, noise = task
    return replay(cached_table(path), method, seed, (budget,), noise=noise)[0].best_fraction


def seed_band(path: Path, method: str, seed: int, budget: int, draws: int,
              pool: Executor) -> tuple[float, float]:
    """p10 and p90 of ``method``'s best found with the live run's own ``seed``, replayed against ``draws`` draws
    of the table's noise: what the table predicts for this run. The band over seeds also counts the luck of the
    seed; random's choices do not depend on what it measures, so the table knows its seed's 20 configurations
    and, of them, which is the best a noise pick can cost (seen: random's seed 0 tries nothing above 0.76 of
    the optimum, below its p10 over seeds)."""
    best = list(pool.map(_noise_draw, [(str(path), method, seed, budget, n) for n in range(draws)]))
    return _q(best, 0.1), _q(best, 0.9)


def drift(table: Table, journal: Journal, *, shown: int = 3, least: int = 5) -> str:
    """How this machine's live step times compare with the table's, on the configurations both ran ok: the median
    ratio, its spread against the table's own noise, and the settings whose ratio strays furthest from it.

    The table is the truth the live runs are scored by; a machine that runs some settings faster today than the
    day the table was measured (a neighbour's memory traffic, another host of the same CPU family) moves the
    ranking, and with it what a method measures fastest."""
    logs: dict[str, list[float]] = {}
    every: list[float] = []
    for config_key, run in journal.done.values():
        runs = [r.step_time_s for r in table.runs.get(config_key, []) if r.outcome == "ok" and r.step_time_s]
        if run.outcome != "ok" or not run.step_time_s or not runs:
            continue
        ratio = math.log(run.step_time_s / statistics.median(runs))
        every.append(ratio)
        for name, value in config_key:
            if value is not False:
                logs.setdefault(f"{name}={value}" if value is not True else f"+{name}", []).append(ratio)
    if len(every) < 2:
        return ""
    centre = statistics.median(every)
    strays = sorted(((statistics.median(v), k, len(v)) for k, v in logs.items() if len(v) >= least),
                    key=lambda t: -abs(t[0] - centre))[:shown]
    return (f"Live against the table, over the {len(every)} live trials of configurations the table ran ok: step time "
            f"{math.exp(centre):.2f}x the table's median (sd of the log ratio {statistics.pstdev(every):.3f}; the "
            f"table's own noise {sigma_log(table):.3f}); furthest from that: "
            + ", ".join(f"`{k}` {math.exp(m):.2f}x ({n} trials)" for m, k, n in strays) + ".")


def _band_text(band: tuple[float, float] | None) -> str:
    return f"{band[0]:.3f}–{band[1]:.3f}" if band else "no replay"


_YES_NO = {True: "yes", False: "**no**", None: "–"}
_COLUMNS = ("method", "seed", "live best found", "replay p10–p90, over seeds", "inside", "this seed", "inside",
            "trials (OOM, failed)", "promoted", "live trials")


def render(table: Table, lives: Sequence[Live], budget: int, command: str, replay_source: str,
           max_pairs: int | None = None, drift_line: str = "", draws: int = 0) -> str:
    how = (f"with at most {max_pairs} interleaved pairs each (the replay sizes them by the table's noise, up to "
           f"{MAX_PAIRS}; the figures compared below do not depend on it)" if max_pairs else "as the replay verifies them")
    seeds = sorted({lv.row.seed for lv in lives})
    runs = "once" if len(seeds) == 1 else f"once per seed ({', '.join(map(str, seeds))})"
    lines = [f"""## Live confirmation

Generated by `{command}`. Each method ran {runs} at budget {budget} on real trials of `{table.fixture}` (table
`{table.label}`: its space and memory limit, a fresh copy of the fixture), and its top candidates were verified live
{how}. *Live best found* is scored with the table's truth. *Replay p10–p90, over seeds* is the same method
at the same budget over the replay's seeds (`{replay_source}`); *this seed* replays the live run itself: the method
with the live run's seed against {draws} draws of the table's noise. Inside the band: the table predicted what the
method did live. The second is the prediction for one run: the first also counts the luck of the seed (random's
choices do not depend on what it measures, so its seed alone fixes the configurations it tries).
""", "| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for live in lives:
        r = live.row
        promoted = f"{r.promoted_fraction:.3f} of the optimum" if r.promoted else "nothing"
        lines.append(f"| {r.method} | {r.seed} | {r.best_fraction:.3f} | {_band_text(live.band)} | "
                     f"{_YES_NO[live.inside]} | {_band_text(live.seed_band)} | {_YES_NO[live.inside_seed]} | "
                     f"{r.trials} ({r.oom_s:.0f} s, {r.crash_s:.0f} s) | {promoted} | {live.wall_s / 60:.0f} min |")
    scored = [lv for lv in lives if lv.inside is not None]
    if scored:
        gaps = [abs(lv.row.best_fraction - lv.replay_median) for lv in scored if lv.replay_median is not None]
        own = [lv for lv in lives if lv.inside_seed is not None]
        lines.append(f"\n{sum(bool(lv.inside) for lv in scored)} of {len(scored)} live runs landed inside the "
                     "replay's p10–p90 over seeds" + (f"; mean |live − replay median| {statistics.fmean(gaps):.3f}"
                                                      if gaps else "")
                     + (f"; {sum(bool(lv.inside_seed) for lv in own)} of {len(own)} inside the replay of their own "
                        "seed" if own else "") + ".")
    if drift_line:
        lines.append("\n" + drift_line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.search_live", description=__doc__.split("\n")[0])
    ap.add_argument("table", type=Path, help="the table JSON (benchmarks/measure_space.py)")
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--seeds", "--seed", dest="seeds", type=int, nargs="+", default=[0],
                    help="one live run of every method per seed (journal streams: random/search for seed 0, "
                         "random@1/search for seed 1)")
    ap.add_argument("--draws", type=int, default=30,
                    help="draws of the table's noise the live run's own seed is replayed against (its band)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes for those replays (they run after the last live trial)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(ALL_METHODS))
    ap.add_argument("--max-pairs", type=int, help="verify each top candidate with at most this many interleaved "
                    "pairs (default: as the replay, sized by the table's noise; best found does not depend on it)")
    ap.add_argument("--replay", type=Path, default=Path("benchmarks/results/search_table.json"),
                    help="the replay's rows (benchmarks/search_table.py --json)")
    ap.add_argument("--journal", type=Path, help="finished live trials, resumed (default /tmp/search_live-<table>.jsonl)")
    ap.add_argument("--workdir", type=Path, help="where the fixture copy goes (default: a new temp dir)")
    ap.add_argument("--out", type=Path, default=Path("docs/BENCHMARKS.md"))
    ap.add_argument("--no-write", dest="out", action="store_const", const=None, help="print the section only")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/search_live.json"))
    args = ap.parse_args(argv)
    if args.max_pairs is not None and not min_repeats(ALPHA) <= args.max_pairs <= MAX_PAIRS:
        ap.error(f"--max-pairs: between {min_repeats(ALPHA)} (the rank test's least at alpha {ALPHA}) and {MAX_PAIRS}, "
                 f"got {args.max_pairs}")
    try:
        table = load(args.table)
        check_complete(table, str(args.table))
        here = machine_fingerprint()
        compared = compared_keys(table.machine)
        if {k: table.machine.get(k) for k in compared} != {k: here.get(k) for k in compared}:
            raise TableError(f"{args.table}: measured on {machine_text(table.machine)}, this is "
                             f"{machine_text(here)}; a live check belongs on the table's machine")
        replay_rows = json.loads(args.replay.read_text(encoding="utf-8"))["rows"] if args.replay.exists() else []
        journal = Journal.open(args.journal or Path(tempfile.gettempdir()) / f"search_live-{table.label}.jsonl")
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    limit = str(int(table.memory_limit_bytes))
    work = args.workdir or Path(tempfile.mkdtemp(prefix=f"infrarsi-live-{table.fixture}-"))
    if (work / table.fixture).exists():
        print(f"error: --workdir {work} already holds {table.fixture}/: name a directory without it (every live "
              "run starts from a fresh copy of the fixture; the journal, not the copy, is what resumes)", file=sys.stderr)
        return 2
    repo = fixture_repo(table.fixture, design_for(table.fixture, table.machine), limit, work)
    started = time.time()
    say = lambda line: print(f"[{time.time() - started:6.0f}s] {line}", file=sys.stderr, flush=True)  # noqa: E731
    runner: Runner = lambda config: trial(repo, table, config, limit, -1)  # noqa: E731
    ran = []
    for seed in args.seeds:
        for method in args.methods:
            row, wall = live_method(table, method, args.budget, seed, runner, journal, say, args.max_pairs)
            ran.append((row, wall))
            say(f"{method} seed {seed}: best found {row.best_fraction:.3f}")
    lives = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:  # the live trials are done: the CPUs are free
        for row, wall in ran:
            lives.append(Live(row=row, band=replay_band(replay_rows, table.label, row.method, args.budget),
                              wall_s=wall, replay_median=replay_median(replay_rows, table.label, row.method, args.budget),
                              seed_band=seed_band(args.table, row.method, row.seed, args.budget, args.draws, pool)))
            say(f"{row.method} seed {row.seed}: replay of this seed {lives[-1].seed_band}")
    command = recorded_command("benchmarks.search_live", argv)
    text = render(table, lives, args.budget, command.strip(), str(args.replay), args.max_pairs,
                  drift_line=drift(table, journal), draws=args.draws)
    publish(text, section=SECTION, page=args.out, raw=args.json,
            payload={"command": command, "table": str(args.table),
                     "rows": [{**asdict(lv.row), "band": lv.band, "replay_median": lv.replay_median,
                               "seed_band": lv.seed_band, "wall_s": lv.wall_s} for lv in lives]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
