"""Measure this device: peak matmul FLOP/s per dtype, and the hardware/software fingerprint.

Run as its own process (``python -m bot.stages.doctor.device_probe``) so that torch's thread
pools and allocator in the bot stay untouched; prints one JSON object.
The peak is the best of several large square matmuls per dtype — what MFU is
measured against, and the ceiling above which a result is implausible.
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


def matmul_peak(dtype_name: str, *, size: int, repeats: int, device: str) -> float:
    """Best FLOP/s of ``size``×``size`` matmuls in ``dtype_name`` on ``device``."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(2):
        a @ b
    sync()
    best = float("inf")
    inner = 4
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            a @ b
        sync()
        best = min(best, (time.perf_counter() - start) / inner)
    return 2.0 * size**3 / best


def probe(size: int | None = None, repeats: int = 5) -> dict[str, Any]:
    import psutil
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    n = size or (8192 if cuda else 1024)
    peaks = {d: matmul_peak(d, size=n, repeats=repeats, device=device) for d in DTYPES}
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {
        "peak_flops": peaks,
        "peak_flops_method": f"best of {repeats}x4 {n}x{n} matmuls per dtype on {device}",
        "fingerprint": {
            "device": device,
            "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total,
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


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else None
    print(json.dumps(probe(size)))
