"""Shared test fixtures: copies of the tinygpt training repo with a contract for its tiny config."""

from __future__ import annotations

import os

# Small matrix products in the engine's models crawl when multi-threaded OpenBLAS
# competes with trials for two cores; set before numpy is imported anywhere.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The doctor's device probe is cached for hours under XDG_CACHE_HOME: a figure measured by an earlier session
# on a busier machine would stand in for this one's (the peak-FLOP/s check of test_doctor_verify failed on it).
# One fresh cache per test session, shared by its tests, as on a clean CI machine.
os.environ["XDG_CACHE_HOME"] = __import__("tempfile").mkdtemp(prefix="infrarsi-test-cache-")
# Runs started by tests write their findings here, never to the user's own bank.
os.environ.setdefault("INFRARSI_BANK", os.path.join(__import__("tempfile").mkdtemp(prefix="infrarsi-test-bank-"),
                                                    "bank.sqlite"))

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINYGPT = REPO / "fixtures" / "tinygpt"
# A config of the fixture that trains for real in milliseconds per step.
TINY_ARGS = "--n-layer 1 --n-head 2 --d-model 64 --vocab-size 256 --seq-len 32 --global-batch 4 --steps 8"
TINY_TOKENS = 4 * 32
# For the tests of a whole run (resume, parallel trials, the executors' runs): a torch.compile trial costs 3-5x an
# eager one on a CPU, and those tests are about the loop, not the search's choices.
NO_COMPILE = """
[[constraints]]
kind = "forbid"
when = { compile = true }
reason = "keeps the test short"
"""


def copy_fixture(dest: Path) -> Path:
    shutil.copytree(TINYGPT, dest, ignore=shutil.ignore_patterns("__pycache__", ".infrarsi", "infrarsi.*"))
    return dest


def infrarsi(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


@pytest.fixture(scope="session")
def tiny_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinygpt with the contract (tiny config) and lock that `infrarsi init` writes: once a session (it takes
    seconds, and some forty tests start from it); each test gets its own copy (:func:`tiny_repo`)."""
    repo = copy_fixture(tmp_path_factory.mktemp("tiny-template") / "tinygpt")
    result = infrarsi("init", str(repo), "--command", f"python train.py {TINY_ARGS}")
    assert result.returncode == 0, result.stderr
    return repo


@pytest.fixture
def tiny_repo(tmp_path: Path, tiny_template: Path) -> Path:
    """A copy of tinygpt with a contract (tiny config) and its lock, written by `infrarsi init`."""
    repo = tmp_path / "tinygpt"
    shutil.copytree(tiny_template, repo)
    return repo


# -- a real Slurm cluster on loopback (scripts/slurm), shared by every Slurm test of the session ------------
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


def _slurm_missing() -> str | None:
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (CI runs as root)"
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install --no-install-recommends slurm-wlm munge)"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    """Start munge + slurmctld + two slurmd for the session; skip, saying why, where Slurm is not installed."""
    import tempfile
    import time

    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    why = _slurm_missing()
    if why:
        if reporter is not None:
            reporter.write_line(f"\nSKIPPING the Slurm tests: {why}", yellow=True)
        pytest.skip(f"Slurm tests: {why}")
    state = Path(tempfile.mkdtemp(prefix="islurm-", dir="/tmp"))
    start = time.monotonic()
    done = subprocess.run([str(SLURM_SCRIPTS / "start-cluster.sh"), str(state)], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        subprocess.run([str(SLURM_SCRIPTS / "stop-cluster.sh"), str(state)], timeout=120)
        pytest.fail(f"the local Slurm cluster did not start: {done.stderr[-2000:]}")
    conf = done.stdout.strip().splitlines()[-1].split("=", 1)[1]
    cluster = SlurmCluster(state, conf, time.monotonic() - start)
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf  # the bot's own clients (and `infrarsi` subprocesses) find the cluster
    if reporter is not None:
        reporter.write_line(f"\nlocal Slurm cluster up in {cluster.startup_s:.1f} s ({state})")
    yield cluster
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous
    subprocess.run([str(SLURM_SCRIPTS / "stop-cluster.sh"), str(state), "--purge"], timeout=120)
