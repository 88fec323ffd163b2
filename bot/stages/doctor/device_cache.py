"""The device probe's figures, kept per machine for a few hours: peak FLOP/s belong to the device, not the run.

The probe (``bot/stages/doctor/device_probe.py``) grows square matmuls per dtype
until they saturate: about 10 s on a 2-core CPU (most of it in a dtype the CPU
only emulates), longer on a GPU. Every ``doctor`` used to pay it again, though
nothing it measures changes between two doctors on the same machine an hour
apart. So its JSON is kept under the user's cache directory, keyed by
everything that decides what it would measure — the machine (host name and
``/etc/machine-id``), the job's interpreter and its torch build (asked of that
interpreter: the bot imports no torch), the probe's own source, the thread
count and the thread and device variables of the job's environment — and
reused for :data:`TTL_S`. A probe that could not measure (no torch where the
job's interpreter runs) is never kept. ``peak_flops_method`` says when it
was measured and that it was reused; ``infrarsi doctor --remeasure-device``
(or ``INFRARSI_DEVICE_CACHE=off``) measures again.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import platformdirs

from bot.executors.job_python import ask, torch_version

#: How long a measurement is reused. Long enough for a working day of doctors, short enough that a
#: driver update or a changed power setting is picked up by the next day's first doctor.
TTL_S = 6 * 3600.0

#: Variables of the job's environment that change what the probe measures.
_ENV_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
             "NVIDIA_TF32_OVERRIDE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")

#: The probe, a standalone script run by path in the job's interpreter (it imports nothing of the bot).
PROBE_SCRIPT = Path(__file__).with_name("device_probe.py")


def run_probe(python: str, env: Mapping[str, str], *, threads: int | None = None,
              timeout_s: float = 300.0) -> dict[str, Any]:
    """The probe's figures from ``python`` (the job's interpreter) in ``env`` (the job's, scrubbed)."""
    answer, why = ask(python, PROBE_SCRIPT, ["--threads", str(threads)] if threads else [], env=env,
                      timeout_s=timeout_s)
    if not isinstance(answer, dict):
        raise RuntimeError(f"device probe failed: {why}")
    return answer


def cache_dir() -> Path:
    """The user's cache folder for this tool (``$XDG_CACHE_HOME/infrarsi`` on Linux, the platform's own elsewhere)."""
    return Path(platformdirs.user_cache_dir("infrarsi")) / "device"


def enabled() -> bool:
    return os.environ.get("INFRARSI_DEVICE_CACHE", "on").lower() not in ("off", "0", "no", "false")


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            return Path(path).read_text().strip()
        except OSError:
            continue
    return ""


def cache_key(env: Mapping[str, str], threads: int | None, python: str = sys.executable) -> str:
    """What decides the probe's figures, hashed."""
    parts = {
        "host": socket.gethostname(), "machine_id": _machine_id(), "python": python,
        "torch": torch_version(python, env) or "", "probe": hashlib.sha256(PROBE_SCRIPT.read_bytes()).hexdigest(),
        "threads": threads, "env": {k: env.get(k) for k in _ENV_KEYS},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def cached_probe(measure: Callable[[], dict[str, Any]], *, env: Mapping[str, str], threads: int | None,
                 remeasure: bool = False, now: Callable[[], float] = time.time,
                 python: str = sys.executable) -> dict[str, Any]:
    """``measure()``'s figures, reused from the cache when a measurement of the same key is under TTL_S old."""
    if not enabled():
        return measure()
    path = cache_dir() / f"{cache_key(env, threads, python)}.json"
    if not remeasure:
        try:
            kept = json.loads(path.read_text())
            age = now() - float(kept["measured_at"])
            if 0 <= age < TTL_S:
                figures = dict(kept["figures"])
                when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(kept["measured_at"])))
                figures["peak_flops_method"] = (f"{figures['peak_flops_method']}; measured {when} on this machine "
                                                "and reused (`infrarsi doctor --remeasure-device` measures again)")
                return figures
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no usable measurement: measure
    figures = measure()
    if not figures.get("peak_flops"):
        return figures  # nothing measured (no torch there): the next doctor asks again
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"measured_at": now(), "figures": figures}))
        tmp.replace(path)  # atomic: doctors running side by side never read half a file
    except OSError:
        pass  # a read-only home only costs the next doctor the probe
    return figures
