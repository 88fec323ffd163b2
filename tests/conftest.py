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
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.support.slurm import SLURM_SCRIPTS, SlurmCluster, slurm_missing  # noqa: E402
from tests.support.tinygpt import TINY_ARGS, copy_fixture, infrarsi  # noqa: E402


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
@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    """Start munge + slurmctld + two slurmd for the session; skip, saying why, where Slurm is not installed."""
    import tempfile
    import time

    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    why = slurm_missing()
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
