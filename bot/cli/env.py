"""``infrarsi env [REPO]``: what a bug report needs, as ``accelerate env`` prints it.

Versions (InfraRSI, Python, torch and the libraries it drives), the torch build
(CUDA, cuDNN, the CPU instruction set it dispatches to) and the GPUs it sees, as
the interpreter trials run with reports them (asked in a subprocess: the bot's
own process imports no torch), the CPU, the executor settings of REPO's contract (or the default when it
has none), the experience bank, and which of the environment variables that
change a run are set. A token is named, never printed. Nothing here starts a
trial or touches the repository.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from bot.cli.common import add_repo_argument, infrarsi_version, repo_dir, resolve_repo

__all__ = ["environment_lines", "register"]

PACKAGES = ("numpy", "scipy", "pygit2", "libcst", "psutil", "anthropic", "github3.py", "tomlkit", "platformdirs")
#: Variables that change how a run behaves; their values are shown.
SHOWN = ("INFRARSI_BANK", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")
#: Secrets: only whether they are set.
SECRETS = ("ANTHROPIC_API_KEY", "GITHUB_TOKEN", "GH_TOKEN")


def _installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


#: Run in the interpreter trials run with (the bot's own process imports no torch): its torch build and GPUs.
_TORCH_REPORT = """
import json
try:
    import torch
except ImportError as e:
    print(json.dumps({"error": str(e)}))
    raise SystemExit(0)
cpu = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "unknown"
cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
gpus = [(p.name, p.major, p.minor, p.total_memory) for p in
        (torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count()))] \
    if torch.cuda.is_available() else []
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn, "cpu": cpu,
                  "threads": torch.get_num_threads(), "gpus": gpus}))
"""


def _torch_lines() -> list[str]:
    """The torch build of the interpreter trials run with, asked of it (:mod:`bot.executors.job_python`)."""
    from bot.executors.job_python import ask

    found, why = ask(sys.executable, _TORCH_REPORT, timeout_s=120.0)
    if not isinstance(found, dict) or "error" in found:  # an environment without torch can still file a report
        return [f"- torch: cannot import ({found.get('error') if isinstance(found, dict) else why})"]
    lines = [f"- torch: {found['version']} (CUDA {found['cuda'] or 'none'}, cuDNN {found['cudnn'] or 'none'}, "
             f"CPU capability {found['cpu']}, {found['threads']} threads)"]
    for i, (name, major, minor, memory) in enumerate(found["gpus"]):
        lines.append(f"- GPU {i}: {name} (sm_{major}{minor}, {memory / 2**30:.1f} GiB)")
    return lines if found["gpus"] else [*lines, "- GPUs: none visible to torch"]


def _cpu_line() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import psutil

        memory = f", {psutil.virtual_memory().total / 2**30:.1f} GiB memory"
    except ImportError:
        memory = ""
    return f"- CPU: {model}, {usable} of {os.cpu_count()} cores usable{memory}"


def _executor_line(root: Path) -> str:
    from infrarsi.contract import load_contract
    from infrarsi.errors import InfraRSIError

    try:
        launch = load_contract(root).launch
    except InfraRSIError as e:
        return f"- executor: local, the default (no readable contract in {root}: {str(e)[:160]})"
    settings: dict[str, Any] = {"world_size": launch.world_size, "ranks_per_node": launch.ranks_per_node}
    if launch.executor == "torchrun":
        settings.update(nnodes=launch.nnodes, nproc_per_node=launch.nproc_per_node,
                        rdzv_endpoint=launch.rdzv_endpoint, rdzv_backend=launch.rdzv_backend)
    elif launch.executor in ("slurm", "actions"):
        settings.update({k: v for k, v in asdict(getattr(launch, launch.executor)).items() if v not in (None, ())})
    shown = ", ".join(f"{k} {v}" for k, v in settings.items())
    return f"- executor: {launch.executor} (the contract's [launch]; {shown})"


def environment_lines(root: Path) -> list[str]:
    """The report's lines, each ``- name: value``."""
    from infrarsi.bank import default_bank_path

    lines = [f"- infrarsi: {infrarsi_version()}",
             f"- Python: {platform.python_version()} ({platform.python_implementation()}) at {sys.executable}",
             f"- platform: {platform.platform()}",
             *_torch_lines(),
             _cpu_line(),
             "- packages: " + ", ".join(f"{name} {_installed(name)}" for name in PACKAGES),
             _executor_line(root),
             f"- bank: {os.environ.get('INFRARSI_BANK') or default_bank_path()}"]
    shown = [f"{k}={os.environ[k]}" for k in SHOWN if k in os.environ]
    secrets = [f"{k} {'set' if os.environ.get(k) else 'not set'}" for k in SECRETS]
    lines.append("- environment: " + ", ".join([*shown, *secrets]))
    return lines


def cmd_env(args: argparse.Namespace) -> int:
    root = repo_dir(resolve_repo(args))
    print("Copy-and-paste the text below in your bug report.\n")
    for line in environment_lines(root):
        print(line)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("env", help="print what a bug report needs: versions, CPU/GPU, torch build, executor settings")
    add_repo_argument(p, optional=True, help="the training repo whose contract names the executor")
    p.set_defaults(func=cmd_env)
