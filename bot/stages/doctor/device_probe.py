"""Measure this device: peak matmul FLOP/s per dtype, and the hardware/software fingerprint.

A standalone script, run by path in the job's own interpreter
(``python …/device_probe.py [--threads N]``, :mod:`bot.executors.job_python`): it needs
torch and the standard library, never the bot, whose process imports no torch;
prints one JSON object. Where that interpreter has no torch (the bot's own job
on a hosted runner, whose trials run elsewhere) it says so instead of measuring:
no peak, so no MFU, and a fingerprint without a device.
The peak is the best repeat of square matmuls per dtype, at sizes grown until
FLOP/s stop rising, with the torch thread count the job runs with — what MFU is
measured against, and the ceiling above which a result is implausible. The
doctor runs it in the trial's own environment, so ``OMP_NUM_THREADS`` and the
like are the job's.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import Any

DTYPES = ("fp32", "bf16")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: Square sizes tried per device, smallest first: the peak is taken at the size that saturates.
SIZES = {"cpu": (512, 1024, 2048), "cuda": (4096, 8192, 16384)}
#: Each (dtype, size) is timed for at least this many repeats and this long, and the best repeat counts.
MIN_REPEATS = 3
MIN_SECONDS = {"cpu": 0.5, "cuda": 0.5}
#: ... and at most this long per size; sizes stop growing once one matmul takes longer than GROW_LIMIT_S.
MAX_SECONDS = 2.0
GROW_LIMIT_S = 0.25


def matmul_peak(dtype_name: str, *, size: int, repeats: int, device: str, min_seconds: float = 0.0,
                max_seconds: float = MAX_SECONDS) -> float:
    """Best FLOP/s of ``size``×``size`` matmuls in ``dtype_name`` on ``device`` over at least ``repeats``
    repeats and ``min_seconds``, at most ``max_seconds`` (a shared machine has quiet moments; the best repeat
    is the device's; a dtype the device only emulates must not hold the doctor for minutes)."""
    import torch

    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    if device == "cuda":  # fp32 strictly (torch's default), tf32: fp32 tensors on tensor cores, as a job may allow
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.mm(a, b, out=out)  # warm-up, and the first (pessimistic) sample
    sync()
    best = time.perf_counter() - t0
    inner = max(1, min(4, int(0.05 / max(best, 1e-9))))
    started = time.perf_counter()
    n = 0
    while (n < repeats or time.perf_counter() - started < min_seconds) and time.perf_counter() - started < max_seconds:
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b, out=out)
        sync()
        best = min(best, (time.perf_counter() - t0) / inner)
        n += 1
    return 2.0 * size**3 / best


def saturated_peak(dtype_name: str, *, device: str, sizes: tuple[int, ...], repeats: int,
                   min_seconds: float) -> tuple[float, int]:
    """(best FLOP/s, the size it came at): sizes grow (past the first) until FLOP/s stop rising by 5% (saturated),
    or until one matmul takes longer than GROW_LIMIT_S (the next size costs 8 times as much)."""
    best, at = 0.0, sizes[0]
    for size in sizes:
        flops = matmul_peak(dtype_name, size=size, repeats=repeats, device=device, min_seconds=min_seconds)
        rising = flops > best * 1.05
        if flops > best:
            best, at = flops, size
        if (not rising and size != sizes[0]) or 2.0 * size**3 / flops > GROW_LIMIT_S:
            break  # the smallest size never decides alone: on a busy machine it may just have been unlucky
    return best, at


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that says
        return None


def unmeasured(why: str) -> dict[str, Any]:
    """What the probe says where it cannot measure: no peak (so no MFU), the machine without a device."""
    return {
        "peak_flops": {},
        "peak_flops_method": f"not measured: {why}",
        "fingerprint": {
            "device": None, "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(), "memory_bytes": _memory_bytes(),
            "gpu_model": None, "gpu_count": 0, "gpu_memory_bytes": None, "torch": None, "cuda": None,
            "python": platform.python_version(), "platform": platform.platform(), "torch_threads": None,
        },
    }


def probe(size: int | None = None, repeats: int = MIN_REPEATS, threads: int | None = None) -> dict[str, Any]:
    """Peaks per dtype (with ``threads`` torch threads, as the job sets them; None: torch's default) and the
    fingerprint. ``size`` pins one matmul size instead of growing to saturation (tests)."""
    try:
        import torch
    except ImportError as e:
        return unmeasured(f"torch cannot be imported by {sys.executable} ({e}), so peak FLOP/s and MFU are not "
                          "measured here; the trials' environment has torch (pip install 'infrarsi[trial]')")

    if threads:
        torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    sizes = (size,) if size else SIZES[device]
    dtypes = DTYPES + (("fp16", "tf32") if cuda else ())
    found = {d: saturated_peak(d, device=device, sizes=sizes, repeats=repeats,
                               min_seconds=0.0 if size else MIN_SECONDS[device]) for d in dtypes}
    peaks = {d: f for d, (f, _) in found.items()}
    method = (f"best repeat (at least {repeats} repeats and {0.0 if size else MIN_SECONDS[device]:g} s, at most "
              f"{MAX_SECONDS:g} s per size) of "
              "square matmuls per dtype on " + device + " with " + str(torch.get_num_threads()) + " threads, "
              "sizes grown until FLOP/s stopped rising (" + ", ".join(f"{d} at {n}" for d, (_, n) in found.items())
              + ")")
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {
        "peak_flops": peaks,
        "peak_flops_method": method,
        "fingerprint": {
            "device": device,
            "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "memory_bytes": _memory_bytes(),
            "gpu_model": gpus[0] if gpus else None,
            "gpu_count": len(gpus),
            "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory if cuda else None,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch_threads": torch.get_num_threads(),
        },
    }


def main(argv: list[str]) -> int:
    """``python device_probe.py [SIZE] [--threads N]``: one JSON object on stdout."""
    threads = None
    if "--threads" in argv:
        i = argv.index("--threads")
        threads = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    size = int(argv[0]) if argv else None
    print(json.dumps(probe(size, threads=threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
