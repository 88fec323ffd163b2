"""The corpus benchmark: ``init`` → ``doctor`` → ``run`` on every fixture, no hand edits, into a data file.

    python benchmarks/corpus.py measure [--budget 8] [--only NAME ...] [--workdir DIR] [--jobs N]
                                        [--deadline-min M] [--note TEXT]     # -> benchmarks/data/corpus.json
    python benchmarks/corpus.py render                                       # data -> docs/CORPUS.md

Each fixture is copied into its own git repository and driven through the real
CLI exactly as a new user would: its README's preparation (data it downloads or
generates, left untracked or ignored), ``init --command "<its README command>"``
(a fixture that ships its own ``infrarsi.toml`` keeps it: that file is the repo's,
not an edit), ``patches`` (what the catalog finds and where), ``doctor``,
``run --budget-trials N --no-bank`` (built-in proposer, local executor). The data
says, per fixture: knobs drafted, patches applicable and reached, trials and
failed trials with their cost, the verified speedup with its interval (and the
level it was computed at), verification pairs spent and why each verification
stopped, and wall time; and, once, the machine: the CPU model, whether it has
AVX-512 bf16 and AMX, torch, and a note on what else ran beside it. ``measure``
writes the data and renders the doc; ``render`` renders it alone
(:mod:`benchmarks.corpus_doc`). With ``--only``, the other fixtures' rows are kept
when the data was measured on the same CPU, else dropped.

``tunedgpt`` is the control: the tinygpt job already written the tuned way, on
which nothing should be promoted. Figures depend on the CPU: bf16 autocast is
several times faster than fp32 where the CPU has AVX-512 bf16 or AMX, and
several times *slower* where it has only AVX2 (bf16 is then emulated).

Timing wants a quiet machine (OpenMP threads spin when they share cores); the
verification is interleaved, so a busy machine costs power, not validity.
``--jobs N`` drives N fixtures at once on a larger machine, each pinned to its
own equal share of the CPUs (its trials inherit the affinity, so OpenMP sizes
its pool to that share); the data then states the share. ``--deadline-min``
stops the fixtures still running at that point (their rows say so) and writes
the rest, so a time-limited machine still yields a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.corpus_doc import dump, load, render  # noqa: E402
from bot.workspace.commits import commit_all  # noqa: E402
from bot.workspace.refs import init_repository  # noqa: E402

FIXTURES = REPO_ROOT / "fixtures"
RUN_ID = "corpus"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fixture:
    name: str
    command: str  # what the user hands `init` (ignored when the fixture ships a contract)
    prepare: tuple[str, ...] = ()  # Python arguments run once before init, as its README says (data outside git)
    prepare_cwd: str = "."  # where, in the repo, the preparation runs
    note: str = ""


# Commands at a size where one trial takes seconds on two CPU cores. The real-repo fixtures are
# configured for 100,000 steps, as their users would run them: the bot stops each trial after the
# measured steps.
CORPUS: tuple[Fixture, ...] = (
    Fixture(name="tinygpt", command="python train.py --seq-len 128 --global-batch 8 --steps 6"),
    Fixture(name="tinymoe", command="python train.py", note="ships its contract"),
    Fixture(name="ddp", command="python train.py", note="ships its contract (torchrun, 2 processes)"),
    Fixture(name="globalsgpt", command="python train.py --max_iters=100000", prepare=("data/prepare.py",)),
    Fixture(name="hftrainer", command="python run_clm.py --output_dir out --max_steps 100000 "
            "--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --report_to none --save_strategy no"),
    Fixture(name="lightningjob", command="python train.py --max_steps 100000"),
    Fixture(name="hydrajob", command="python train.py trainer.max_steps=100000"),
    Fixture(name="tunedgpt", command="python train.py --seq-len 128 --global-batch 8 --micro-batch 8 --steps 6",
            note="the control: already tuned"),
    # laid out like minGPT, makemore and nanochat, each run as its README says (forever, from a subfolder, by a
    # bash script); their preparation leaves the data untracked
    Fixture(name="chargpt", command="cd projects/chargpt && python chargpt.py", prepare=("download.py",),
            prepare_cwd="projects/chargpt"),
    Fixture(name="makenames", command="python makemore.py -i names.txt -o names"),
    Fixture(name="pkgchat", command="bash runs/runcpu.sh", prepare=("-m", "tinychat.dataset", "-n", "4")),
    # a tutorial GPT that prints only at its evaluations, the word-language-model example's hand-written SGD, and a
    # lucidrains-style package whose __init__ imports every module
    Fixture(name="evalgpt", command="python gpt.py", prepare=("prepare.py",)),
    Fixture(name="wordlm", command="python main.py --epochs 6"),
    Fixture(name="widepkg", command="python train_enwik8.py", prepare=("data/prepare.py",)),
    # the levers real repos need (issue 48): dropout 0.2 and a printed last-micro-batch loss; an MoE with a capacity
    # factor, auxiliary losses in a global collector and a hand-written expert loop
    Fixture(name="dropgpt", command="python train.py --max-iters 100000"),
    Fixture(name="capmoe", command="python train.py --train-iters 100000"),
)
DATA = REPO_ROOT / "benchmarks" / "data" / "corpus.json"
DOC = REPO_ROOT / "docs" / "CORPUS.md"


@dataclass(kw_only=True, slots=True)
class Row:
    fixture: str
    contract: str = ""
    knobs: list[str] = field(default_factory=list)
    applicable: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what run said about this device (a dtype it only emulates)
    trials: int = 0
    failed: int = 0
    failed_cost_s: float = 0.0
    verdicts: list[dict] = field(default_factory=list)
    promoted: dict | None = None
    ci_level: float | None = None  # the contract's verification interval level, 1 - 2 verify.alpha
    wall_s: float = 0.0
    error: str = ""
    pending: str = ""  # the static columns only (init and patches): not measured yet, and why


def bot(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": path})


def prepare_repo(fixture: Fixture, workdir: Path) -> Path:
    repo = workdir / fixture.name
    shutil.copytree(FIXTURES / fixture.name, repo,
                    ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.lock", "out", "outputs",
                                                  "lightning_logs", "*.bin", "meta.json", "input.txt", "base_data",
                                                  "names", "checkpoints"))
    init_repository(repo, initial_head="main")
    commit_all(repo, f"{fixture.name} fixture")
    if fixture.prepare:
        subprocess.run([sys.executable, *fixture.prepare], cwd=repo / fixture.prepare_cwd, check=True,
                       capture_output=True)
    return repo


def _failed(step: str, result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (result.stderr or result.stdout).strip().splitlines() if line.strip()]
    return f"{step} exited {result.returncode}: {lines[-1] if lines else '(no output)'}"


def measure(fixture: Fixture, workdir: Path, budget: int, progress: Path | None = None) -> Row:
    row = Row(fixture=fixture.name)

    def reached(stage: str) -> None:  # what a deadline stop still shows of this fixture
        if progress is not None:
            progress.write_text(json.dumps({**dataclasses.asdict(row), "error": f"stopped during {stage}"}))

    t0 = time.perf_counter()
    try:
        repo = static_columns(fixture, workdir, row)
        if repo is None:
            return row
        reached("doctor")
        doctor = bot("doctor", str(repo), "--run-id", RUN_ID)
        if doctor.returncode != 0:
            row.error = _failed("doctor", doctor)
            return row
        reached("run")
        run = bot("run", str(repo), "--run-id", RUN_ID, "--budget-trials", str(budget), "--no-bank")
        row.notes = [line.strip() for line in (run.stdout + run.stderr).splitlines() if "device:" in line]
        summary = repo / ".infrarsi" / "runs" / RUN_ID / "run.json"
        if not summary.exists():
            row.error = _failed("run", run)
            return row
        data = json.loads(summary.read_text())
        trials = data.get("trials", [])
        row.trials = len(trials)
        bad = [t for t in trials if t.get("outcome") != "ok"]
        row.failed, row.failed_cost_s = len(bad), sum(float(t.get("cost_s") or 0.0) for t in bad)
        row.verdicts = list(data.get("verdicts", []))
        promoted = [v for v in row.verdicts if v.get("verdict") == "promoted"]
        row.promoted = max(promoted, key=lambda v: v.get("speedup") or 0.0) if promoted else None
        return row
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, ValueError) as exc:
        row.error = f"{type(exc).__name__}: {exc}"
        return row
    finally:
        row.wall_s = time.perf_counter() - t0


def static_columns(fixture: Fixture, workdir: Path, row: Row) -> Path | None:
    """What needs no trial: the repo prepared, its contract (drafted by init or shipped), its knobs and the
    patches that apply; the repo, or None when init (or lock) failed (``row.error`` says why)."""
    repo = prepare_repo(fixture, workdir)
    shipped = (repo / "infrarsi.toml").exists()
    row.contract = "shipped" if shipped else "drafted by init"
    step = bot("lock", str(repo)) if shipped else bot("init", str(repo), "--command", fixture.command)
    if step.returncode != 0:
        row.error = _failed("lock" if shipped else "init", step)
        return None
    from infrarsi.contract.load import load_contract
    contract = load_contract(repo)
    row.knobs = [knob.name for knob in contract.knobs]
    row.ci_level = 1.0 - 2.0 * contract.verify.alpha
    patches = bot("patches", str(repo), "--json")
    for line in patches.stdout.splitlines():
        entry = json.loads(line)
        name = entry.get("id") or entry.get("codemod") or ""
        if entry.get("applies"):
            row.applicable.append(name)
        elif "not reached" in str(entry.get("why_not", "")):
            row.unreached.append(name)
    return repo


def machine(cores_each: int | None, note: str) -> dict[str, Any]:
    """The machine the figures were measured on, as the doc states it."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    share = f" ({cores_each} per fixture, fixtures run side by side)" if cores_each else ""
    hidden = " (GPUs hidden: CUDA_VISIBLE_DEVICES empty)" if os.environ.get("CUDA_VISIBLE_DEVICES") == "" else ""
    return {"cpu": model, "cores": f"{os.cpu_count()}{share}", "avx2": "avx2" in flags,
            "avx512_bf16": "yes" if "avx512_bf16" in flags else "no", "amx": "yes" if "amx_bf16" in flags else "no",
            "torch": _torch_version() + hidden, "note": note}


def _torch_version() -> str:
    try:
        import torch
        return torch.__version__
    except ImportError:
        return "not installed"


def _command(args: argparse.Namespace) -> str:
    return "python benchmarks/corpus.py measure" + (f" --budget {args.budget}" if args.budget != 8 else "") + \
        (f" --jobs {args.jobs}" if args.jobs > 1 else "") + \
        (f" --deadline-min {args.deadline_min:g}" if args.deadline_min else "") + \
        (f" --only {' '.join(args.only)}" if args.only else "") + \
        (f" --note {shlex.quote(args.note)}" if args.note else "")


def _outcome(row: Row) -> str:
    if row.error:
        return f"error: {row.error}"
    return "nothing promoted" if row.promoted is None else f"{row.promoted['speedup']:.2f}x"


def _run_one(fixture: Fixture, workdir: Path, budget: int, progress: Path | None = None) -> Row:
    print(f"[corpus] {fixture.name}: init, doctor, run --budget-trials {budget} ...", flush=True)
    row = measure(fixture, workdir, budget, progress)
    print(f"[corpus] {fixture.name}: {_outcome(row)}; {row.trials} trials, {row.failed} failed; "
          f"{row.wall_s / 60:.1f} min", flush=True)
    return row


def _cpu_shares(jobs: int) -> list[set[int]]:
    cpus = sorted(os.sched_getaffinity(0))
    each = max(1, len(cpus) // jobs)
    return [set(cpus[i * each:(i + 1) * each]) or {cpus[-1]} for i in range(jobs)]


def _side_by_side(chosen: Sequence[Fixture], args: argparse.Namespace, workdir: Path) -> tuple[list[Row], int]:
    """Each fixture in its own child process on its own CPUs; ``--jobs`` of them at a time."""
    shares = _cpu_shares(args.jobs)
    free, running, rows = list(range(args.jobs)), {}, {}
    queue, deadline = list(chosen), time.monotonic() + args.deadline_min * 60 if args.deadline_min else None
    while queue or running:
        while queue and free:
            fixture, slot = queue.pop(0), free.pop(0)
            out = workdir / f"{fixture.name}.row.json"
            cmd = [sys.executable, __file__, "measure", "--only", fixture.name, "--budget", str(args.budget),
                   "--workdir", str(workdir), "--row-json", str(out)]
            share = shares[slot]
            proc = subprocess.Popen(cmd, start_new_session=True,
                                    preexec_fn=lambda share=share: os.sched_setaffinity(0, share))
            running[fixture.name] = (proc, slot, out, time.monotonic())
        time.sleep(2)
        for name, (proc, slot, out, started) in list(running.items()):
            late = deadline is not None and time.monotonic() > deadline
            if proc.poll() is None and not late:
                continue
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                partial = json.loads(out.read_text()) if out.exists() else {"fixture": name}
                stage = partial.pop("error", "").removeprefix("stopped during ") or "init"
                rows[name] = Row(**{**partial, "wall_s": time.monotonic() - started,
                                    "error": f"stopped during {stage} at the {args.deadline_min:g}-min deadline"})
            elif out.exists():
                rows[name] = Row(**json.loads(out.read_text()))
            else:
                rows[name] = Row(fixture=name, wall_s=time.monotonic() - started,
                                 error=f"its corpus process exited {proc.returncode}")
            del running[name]
            free.append(slot)
    return [rows[f.name] for f in chosen], len(shares[0])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    m = sub.add_parser("measure", help="drive every fixture through the CLI -> the data file (and the doc)")
    m.add_argument("--budget", type=int, default=8, help="search trials per fixture (default 8)")
    m.add_argument("--only", nargs="*", default=None, help="fixture names (default: all)")
    m.add_argument("--workdir", type=Path, default=None, help="keep the fixture repos here")
    m.add_argument("--jobs", type=int, default=1,
                   help="fixtures driven at once, each on its own equal share of the CPUs (default 1)")
    m.add_argument("--deadline-min", type=float, default=0.0,
                   help="with --jobs: stop fixtures still running after this many minutes (default: none)")
    m.add_argument("--note", default="", help="what else ran on the machine meanwhile (stated with the figures)")
    m.add_argument("--data", type=Path, default=DATA)
    m.add_argument("--out", type=Path, default=DOC)
    m.add_argument("--row-json", type=Path, default=None, help=argparse.SUPPRESS)  # one child of --jobs
    r = sub.add_parser("render", help="the data file -> docs/CORPUS.md")
    r.add_argument("--data", type=Path, default=DATA)
    r.add_argument("--out", type=Path, default=DOC)
    args = parser.parse_args(argv)
    if args.verb == "render":
        args.out.write_text(render(load(args.data), data_path=_shown(args.data)))
        print(f"[corpus] wrote {args.out} from {args.data}")
        return 0
    chosen = [f for f in CORPUS if args.only is None or f.name in args.only]
    unknown = set(args.only or ()) - {f.name for f in CORPUS}
    if unknown:
        parser.error(f"unknown fixture(s) {', '.join(sorted(unknown))}; known: {', '.join(f.name for f in CORPUS)}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="infrarsi-corpus-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.row_json is not None:
        (row,) = [_run_one(fixture, workdir, args.budget, args.row_json) for fixture in chosen]
        args.row_json.write_text(json.dumps(dataclasses.asdict(row)))
        return 0
    cores_each = None
    if args.jobs > 1:
        rows, cores_each = _side_by_side(chosen, args, workdir)
    else:
        rows = [_run_one(fixture, workdir, args.budget) for fixture in chosen]
    here = machine(cores_each, args.note)
    kept = _kept_rows(args.data, here, {r.fixture for r in rows}) if args.only else []
    order = [f.name for f in CORPUS]
    data = {"command": _command(args), "machine": here, "budget": args.budget,
            "total_s": time.perf_counter() - t0 + sum(r.get("wall_s", 0.0) for r in kept),
            "rows": sorted([*kept, *map(dataclasses.asdict, rows)], key=lambda r: order.index(r["fixture"]))}
    dump(args.data, data)
    args.out.write_text(render(load(args.data), data_path=_shown(args.data)))
    print(f"[corpus] wrote {args.data} and {args.out} (fixture repos in {workdir})")
    return 0


def _kept_rows(path: Path, here: dict[str, Any], measured: set[str]) -> list[dict[str, Any]]:
    """The rows of fixtures not measured now, from data taken on the same CPU (else none)."""
    if not path.exists():
        return []
    old = load(path)
    if old["machine"].get("cpu") != here["cpu"]:
        print(f"[corpus] {path} was measured on {old['machine'].get('cpu')}; its other rows are dropped")
        return []
    return [row for row in old["rows"] if row["fixture"] not in measured]


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
