"""Run a training script under torch.profiler and write its time per phase (the doctor's fallback).

``python -m bot.stages.doctor.profile_job OUT.json [--steps N] script.py [args…]``: for repos whose
harness emits no phase markers. Top-level operator events are classified by
name — optimizer steps (``Optimizer.step#…``, ``Optimizer.zero_grad#…``), the
autograd engine (``autograd::engine::evaluate_function: …``: backward),
collectives (``c10d``/``nccl``/``gloo``: communication), data-loader iteration
(``enumerate(DataLoader)…``: data) and everything else (forward). Only shares
are meaningful: the profiler slows the job down.

With ``--steps N`` the pass ends after the N-th optimizer step (a real job is
configured for days; the doctor needs the steps a trial measures, not the run):
the profile is written then and the process exits at once. A job that updates
its weights by hand (pytorch/examples' word_language_model: ``p.data.add_(p.grad,
alpha=-lr)``) builds no ``torch.optim`` optimizer; there the N-th backward pass
ends it instead.
"""

from __future__ import annotations

import json
import os
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
    out, rest = argv[0], argv[1:]
    steps = 0
    if rest[:1] == ["--steps"] and len(rest) >= 3:
        steps, rest = int(rest[1]), rest[2:]
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    sys.argv = rest
    code = 0
    prof = profile(activities=activities)
    done = {"steps": 0, "backwards": 0, "optimizers": 0}

    def stop_if(count: int) -> None:
        if steps and count >= steps:
            prof.stop()
            _write(out, prof, 0)
            os._exit(0)  # the job's own teardown (checkpoints, loggers) is not what the doctor measures

    def enough(opt, args, kwargs) -> None:  # noqa: ANN001
        done["steps"] += 1
        stop_if(done["steps"])

    backward = torch.autograd.backward

    def counted_backward(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        result = backward(*args, **kwargs)
        done["backwards"] += 1
        if not done["optimizers"]:
            stop_if(done["backwards"])
        return result

    optimizer_init = torch.optim.Optimizer.__init__

    def counted_init(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        done["optimizers"] += 1
        return optimizer_init(self, *args, **kwargs)

    register_optimizer_step_post_hook(enough)
    torch.autograd.backward = counted_backward  # Tensor.backward looks it up here at each call
    torch.optim.Optimizer.__init__ = counted_init
    prof.start()
    try:
        runpy.run_path(rest[0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    prof.stop()
    _write(out, prof, code)
    return code


def _write(out: str, prof, code: int) -> None:  # noqa: ANN001
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.cpu_parent is not None:
            continue
        phase = classify(event.name)
        totals[phase] = totals.get(phase, 0.0) + event.cpu_time_total / 1e6
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"phases_s": totals, "returncode": code}, f)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
