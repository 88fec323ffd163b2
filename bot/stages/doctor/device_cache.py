"""The device probe's figures, kept per machine for a few hours: peak FLOP/s belong to the device, not the run.

The probe (``bot/stages/doctor/device_probe.py``) grows square matmuls per dtype
until they saturate: about 10 s on a 2-core CPU (most of it in a dtype the CPU
only emulates), longer on a GPU. Every ``doctor`` used to pay it again, though
nothing it measures changes between two doctors on the same machine an hour
apart. So its JSON is kept under the user's cache directory, keyed by
everything that decides what it would measure — the machine (host name and
``/etc/machine-id``), the interpreter and the torch build, the probe's own
source, the thread count and the thread and device variables of the job's
environment — and reused for :data:`TTL_S`. ``peak_flops_method`` says when it
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
from importlib import metadata
from pathlib import Path
from typing import Any

import platformdirs

#: How long a measurement is reused. Long enough for a working day of doctors, short enough that a
#: driver update or a changed power setting is picked up by the next day's first doctor.
TTL_S = 6 * 3600.0

#: Variables of the job's environment that change what the probe measures.
_ENV_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
             "NVIDIA_TF32_OVERRIDE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")

_PROBE_SOURCE = Path(__file__).with_name("device_probe.py")


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


def _torch_build() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def cache_key(env: Mapping[str, str], threads: int | None) -> str:
    """What decides the probe's figures, hashed."""
    parts = {
        "host": socket.gethostname(), "machine_id": _machine_id(), "python": sys.executable,
        "torch": _torch_build(), "probe": hashlib.sha256(_PROBE_SOURCE.read_bytes()).hexdigest(),
        "threads": threads, "env": {k: env.get(k) for k in _ENV_KEYS},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def cached_probe(measure: Callable[[], dict[str, Any]], *, env: Mapping[str, str], threads: int | None,
                 remeasure: bool = False, now: Callable[[], float] = time.time) -> dict[str, Any]:
    """``measure()``'s figures, reused from the cache when a measurement of the same key is under TTL_S old."""
    if not enabled():
        return measure()
    path = cache_dir() / f"{cache_key(env, threads)}.json"
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"measured_at": now(), "figures": figures}))
        tmp.replace(path)  # atomic: doctors running side by side never read half a file
    except OSError:
        pass  # a read-only home only costs the next doctor the probe
    return figures
