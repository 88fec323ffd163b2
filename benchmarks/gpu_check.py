"""The GPU check (``benchmarks/gpu_check.sh``): the CUDA path of InfraRSI on one real GPU, end to end.

Steps, each printed with its time; the first failing check stops the script (exit 1):

CPU part (what CI runs with ``--cpu-only``: everything up to the first CUDA step)
  1. versions: python, torch, whether CUDA is visible;
  2. the tinygpt fixture copied into WORKDIR as a git repo, with a hook that caps CUDA memory when
     ``PYTORCH_GPU_CHECK_MEMORY_GIB`` is set (``PYTORCH_*`` reaches trials through the scrubbed
     environment), at a GPU-sized config; ``infrarsi init`` writes the contract, trimmed for a short run;
  3. ``infrarsi patches``: which CUDA codemods (``cuda_backend_flags``, ``dataloader_gpu_settings``) apply.
GPU part
  4. ``infrarsi doctor``: peak FLOP/s measured per dtype on the GPU, the datasheet peak of the detected
     model, MFU against both; the baseline trials must carry the GPU's peak, held memory and capacity (the
     device memory reporter, ``docs/trials.md``);
  5. a CUDA OOM provoked (``torch.cuda.set_per_process_memory_fraction``): recorded ``oom``, peak censored, a
     GPU out-of-memory censored at the capped capacity;
  6. each CUDA codemod that applies, as one trial: it must run ``ok``;
  7. a short ``infrarsi run`` and ``infrarsi report``: MFU before/after, each below 100%.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# GPU-sized: ~130 M parameters, 8,192 tokens per step (a few hundred ms per step in fp32 on an H100).
GPU_ARGS = ("--n-layer 8 --n-head 16 --d-model 1024 --vocab-size 32768 --seq-len 512 --global-batch 16 "
            "--micro-batch 4 --steps 8")
CUDA_CODEMODS = ("cuda_backend_flags", "dataloader_gpu_settings")
OOM_GIB = "1.0"  # the weights (~0.5 GiB in fp32) fit, gradients and Adam's state do not
HOOK = '''    args = parse_args(argv)
    if os.environ.get("PYTORCH_GPU_CHECK_MEMORY_GIB") and torch.cuda.is_available():  # gpu_check: provoke an OOM
        cap = float(os.environ["PYTORCH_GPU_CHECK_MEMORY_GIB"]) * 2**30
        torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
'''


class CheckFailed(Exception):
    pass


def say(msg: str) -> None:
    print(msg, flush=True)


def infrarsi(*argv: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    say("  $ infrarsi " + " ".join(argv))
    return subprocess.run([sys.executable, "-m", "bot", *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, **(env or {})})


def need(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)
    say(f"  ok: {what}")


def prepare(workdir: Path, job_args: str) -> Path:
    from bot.demo import edit_contract, prepare_repo
    from bot.workspace.commits import commit_all

    repo, _ = prepare_repo(workdir)
    train = repo / "train.py"
    text = train.read_text(encoding="utf-8")
    need("    args = parse_args(argv)\n" in text, "train.py has the main() this check hooks into")
    train.write_text(text.replace("    args = parse_args(argv)\n", HOOK, 1), encoding="utf-8")
    commit_all(repo, "gpu_check: a CUDA memory cap for the OOM check")
    r = infrarsi("init", str(repo), "--command", f"python train.py {job_args}", timeout=300)
    need(r.returncode == 0, f"infrarsi init wrote the contract ({r.stderr.strip()[-300:]})")
    contract = repo / "infrarsi.toml"
    contract.write_text(edit_contract(contract.read_text(encoding="utf-8"), top_k=1, max_pairs=4), encoding="utf-8")
    r = infrarsi("lock", str(repo), timeout=120)
    need(r.returncode == 0, f"infrarsi lock took the edited contract ({r.stderr.strip()[-300:]})")
    return repo


def cuda_patches(repo: Path) -> list[str]:
    r = infrarsi("patches", str(repo), "--json", timeout=300)
    need(r.returncode == 0, f"infrarsi patches listed the catalog ({r.stderr.strip()[-300:]})")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    found = {row.get("id"): row for row in rows}
    need(all(c in found for c in CUDA_CODEMODS), "the catalog has both CUDA codemods")
    applies = [c for c in CUDA_CODEMODS if found[c].get("applies")]
    for c in CUDA_CODEMODS:
        say(f"  {c}: " + ("applies" if c in applies else "does not apply: " + "; ".join(found[c].get("why_not") or [])))
    return applies


def trials_of(repo: Path, run_id: str) -> list:
    from infrarsi.journal import Journal
    from infrarsi.rundir import journal_path

    with Journal(journal_path(repo)) as journal:
        return journal.trials(run_id)


def doctor(repo: Path) -> dict:
    r = infrarsi("doctor", str(repo), "--repeats", "3", "--run-id", "gpu", timeout=600)
    need(r.returncode == 0, f"infrarsi doctor profiled the baseline ({r.stderr.strip()[-500:]})")
    report = json.loads((repo / ".infrarsi" / "runs" / "gpu" / "doctor.json").read_text())
    peaks = report["peak_flops"]
    say("  measured peak: " + ", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in peaks.items())
        + f" ({report['peak_flops_method']})")
    sheet = report.get("datasheet_peak_flops") or {}
    say(f"  datasheet peak ({report.get('datasheet_model') or 'unknown model'}): "
        + (", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in sheet.items()) or "none for this device"))
    say(f"  model FLOPs per step {report['model_flops_per_step']:.4g} ({report['model_flops_source'][:60]}…)")
    mfu, on_sheet = report.get("mfu"), report.get("mfu_datasheet")
    say(f"  MFU ({report['baseline_dtype']}): against the measured peak "
        + (f"{mfu:.1%}" if mfu is not None else f"none: {report.get('mfu_defect')}")
        + "; against the datasheet peak " + (f"{on_sheet:.1%}" if on_sheet is not None else "n/a"))
    need(mfu is not None and 0 < mfu < 1, "MFU against the measured peak is a figure below 100%")
    need(all(v < sheet.get(k, float("inf")) * 1.05 for k, v in peaks.items()),
         "no measured peak is above the datasheet's")
    ok = [t.metrics for t in trials_of(repo, "gpu") if t.outcome.value == "ok"]
    device_peaks = [m.device_peak_mem_bytes for m in ok]
    need(bool(device_peaks) and all(p and p > 0 for p in device_peaks),
         f"baseline trials carry the GPU's peak memory ({[p and p / 2**20 for p in device_peaks]} MiB)")
    need(all(m.device_capacity_bytes and m.device_steady_mem_bytes and
             m.device_steady_mem_bytes < (m.device_peak_mem_bytes or 0) < m.device_capacity_bytes for m in ok),
         "and what the allocator held across steps (below the peak) and could grow to (above it): "
         + ", ".join(f"{(m.device_steady_mem_bytes or 0) / 2**20:.0f} < {(m.device_peak_mem_bytes or 0) / 2**20:.0f}"
                     f" < {(m.device_capacity_bytes or 0) / 2**20:.0f} MiB" for m in ok))
    return report


def provoke_oom(repo: Path) -> None:
    r = infrarsi("trial", str(repo), "--run-id", "gpu-oom", "--json", timeout=300,
                 env={"PYTORCH_GPU_CHECK_MEMORY_GIB": OOM_GIB})
    records = trials_of(repo, "gpu-oom")
    need(bool(records), "the OOM trial is in the journal")
    rec = records[-1]
    say(f"  outcome {rec.outcome.value}: {rec.reason[:200]}")
    need(rec.outcome.value == "oom", f"a CUDA OOM under a {OOM_GIB} GiB cap is recorded oom (exit {r.returncode})")
    need(rec.metrics.peak_mem_censored, "its peak is censored (the real peak is at least what was seen)")
    cap = rec.metrics.device_capacity_bytes
    need(rec.metrics.device_peak_censored and cap is not None and cap <= float(OOM_GIB) * 2**30 * 1.01,
         f"a GPU out-of-memory, censored at the capped capacity ({cap and cap / 2**20} MiB, cap {OOM_GIB} GiB)")


def codemod_trials(repo: Path, applies: list[str]) -> None:
    for pid in applies:
        infrarsi("trial", str(repo), "--run-id", "gpu-patches", "--patch", pid, "--json", timeout=300)
        rec = trials_of(repo, "gpu-patches")[-1]
        say(f"  {pid}: {rec.outcome.value}" + (f", {rec.metrics.step_time_s * 1000:.1f} ms/step"
                                                 if rec.metrics.step_time_s else f" {rec.reason[:200]}"))
        need(rec.outcome.value == "ok", f"the {pid} codemod runs on the GPU")


def short_run(repo: Path) -> None:
    r = infrarsi("run", str(repo), "--run-id", "gpu", "--budget-trials", "4", timeout=600)
    need(r.returncode == 0, f"infrarsi run finished ({r.stderr.strip()[-300:]})")
    r = infrarsi("report", str(repo), "--run-id", "gpu", "--json", timeout=120)
    need(r.returncode == 0, "infrarsi report wrote report.json")
    report = json.loads(r.stdout)
    say(f"  promoted {report['promoted']}, speedup {report['speedup']}, MFU before {report['mfu_before']} "
        f"({report['mfu_before_dtype']}), after {report['mfu_after']} ({report['mfu_after_dtype']}); "
        f"defects {report['mfu_defects']}")
    need(all(v is None or 0 < v < 1 for v in (report["mfu_before"], report["mfu_after"])),
         "the report's MFU before and after are below 100%")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workdir", type=Path, help="an empty or new directory for the fixture copy")
    p.add_argument("--cpu-only", action="store_true", help="stop before the first CUDA step (what CI runs)")
    p.add_argument("--job-args", default=GPU_ARGS, help="tinygpt's workload flags (default: the GPU-sized config; "
                   "CI passes a tiny one, since init's dry run trains it once on the CPU)")
    args = p.parse_args(argv)
    started = time.monotonic()

    def step(n: int, title: str) -> None:
        say(f"\n[{n}/7] {title}  (t = {time.monotonic() - started:.0f} s)")

    try:
        import torch

        step(1, "versions")
        cuda = torch.cuda.is_available()
        say(f"  python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
            + (f"device {torch.cuda.get_device_name(0)}" if cuda else "no CUDA device visible"))
        if not args.cpu_only:
            need(cuda, "a CUDA device is visible (rerun with --cpu-only where there is none)")
        args.workdir.mkdir(parents=True, exist_ok=True)
        step(2, "the tinygpt fixture at a GPU-sized config, its contract")
        repo = prepare(args.workdir, args.job_args)
        step(3, "the CUDA codemods in the catalog")
        applies = cuda_patches(repo)
        if args.cpu_only:
            say(f"\nCPU part ok in {time.monotonic() - started:.0f} s (stopped before the first CUDA step)")
            return 0
        step(4, "doctor on the GPU: peaks, MFU against both, max_memory_allocated in the trials")
        doctor(repo)
        step(5, "a CUDA OOM, provoked")
        provoke_oom(repo)
        step(6, "the CUDA codemods, one trial each")
        codemod_trials(repo, applies)
        step(7, "a short run and its report")
        short_run(repo)
    except CheckFailed as failed:
        say(f"\nFAILED: {failed}  (t = {time.monotonic() - started:.0f} s)")
        return 1
    say(f"\nGPU check ok in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
