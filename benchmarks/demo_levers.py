"""The levers of the demo's configuration, on this CPU as it is and held to AVX2: is there a win to find?

``./dev demo`` must show the loop on any host a new user has. This prints, for the demo's "small" tinygpt
configuration (``bot/demo.py``), the median step time of its default and of the levers the demo's contract
opens (fewer, larger micro-batches; bf16 autocast), each as a ratio against the default measured in the same
interleaved rounds; once on the native instruction set and once with ATen and oneDNN held to AVX2
(``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``: how an AVX2-only host, which emulates bf16, runs).

    .venv/bin/python -m benchmarks.demo_levers [--rounds 3]

Measure alone (other jobs' load moves every figure); the CPU it ran on is printed first.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

from benchmarks.measure_space import machine_fingerprint
from bot.demo import CONFIGS, FIXTURE

LEVERS = (("default (micro-batch 1)", ""), ("micro-batch 4", "--micro-batch 4"),
          ("micro-batch 16", "--micro-batch 16"), ("bf16", "--dtype bf16"))
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
_STEP = re.compile(r"dt ([\d.]+)ms")


def cpu_name() -> str:
    m = machine_fingerprint()
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in m["flags"].items())
    return f"{m['cpu']}, {m['cores']} cores ({flags}), torch {m['torch']}"


def step_ms(extra: str, env: dict[str, str]) -> float:
    """The median step time of one run of the fixture, its first two steps (warm-up) left out."""
    argv = [sys.executable, "train.py", *CONFIGS["small"].split(), *extra.split()]
    out = subprocess.run(argv, cwd=FIXTURE, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"demo_levers: {' '.join(argv[1:])} failed: {out.stderr.strip()[-300:]}")
    times = [float(x) for x in _STEP.findall(out.stdout)][2:]
    return statistics.median(times) if times else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over every lever (default 3)")
    args = parser.parse_args(argv)
    print(f"CPU: {cpu_name()}; demo config: {CONFIGS['small']}")
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for isa, extra_env in (("native", {}), ("avx2", AVX2)):
            for name, extra in LEVERS:
                times.setdefault((isa, name), []).append(step_ms(extra, {**os.environ, **extra_env}))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    for isa in ("native", "avx2"):
        base = statistics.median(times[(isa, LEVERS[0][0])])
        for name, _ in LEVERS:
            m = statistics.median(times[(isa, name)])
            print(f"{isa:6}  {name:24} {m:8.1f} ms/step  x{base / m:.2f} against the default")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
