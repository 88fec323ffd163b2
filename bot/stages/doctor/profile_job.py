"""Run a training script under torch.profiler and write its time per phase (the doctor's fallback).

``python -m bot.stages.doctor.profile_job OUT.json script.py [args…]``: for repos whose
harness emits no phase markers. Top-level operator events are classified by
name — optimizer steps (``Optimizer.step#…``, ``Optimizer.zero_grad#…``), the
autograd engine (``autograd::engine::evaluate_function: …``: backward),
collectives (``c10d``/``nccl``/``gloo``: communication), data-loader iteration
(``enumerate(DataLoader)…``: data) and everything else (forward). Only shares
are meaningful: the profiler slows the job down.
"""

from __future__ import annotations

import json
import runpy
import sys


def classify(name: str) -> str:
    lowered = name.lower()
    if name.startswith("Optimizer.") or "optimizer" in lowered and "#" in name:
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function") or "backward" in lowered:
        return "backward"
    if any(k in lowered for k in ("c10d", "nccl", "gloo", "allreduce", "all_reduce", "broadcast", "all_gather")):
        return "communication"
    if "dataloader" in lowered:
        return "data"
    return "forward"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, script = argv[0], argv[1]
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    sys.argv = argv[1:]
    code = 0
    with profile(activities=activities) as prof:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.cpu_parent is not None:
            continue
        phase = classify(event.name)
        totals[phase] = totals.get(phase, 0.0) + event.cpu_time_total / 1e6
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"phases_s": totals, "returncode": code}, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
