"""A real Slurm cluster on loopback (scripts/slurm): its handle and why it cannot start here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.tinygpt import REPO

SLURM_SCRIPTS = REPO / "scripts" / "slurm"


class SlurmCluster:
    """A running local cluster: two nodes (n1, n2) on 127.0.0.1, its state directory and ``SLURM_CONF``."""

    def __init__(self, state: Path, conf: str, startup_s: float) -> None:
        self.state, self.conf, self.startup_s = state, conf, startup_s
        self.nodes = ("n1", "n2")

    def run(self, *argv: str) -> str:
        """A Slurm client (scontrol, squeue, scancel) against this cluster; its stdout."""
        env = {**os.environ, "SLURM_CONF": self.conf}
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=30, check=True).stdout


def slurm_missing() -> str | None:
    """Why the local cluster cannot start on this machine, or None."""
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (CI runs as root)"
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install --no-install-recommends slurm-wlm munge)"
    return None
