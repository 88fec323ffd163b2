"""What a trial's scrubbed environment keeps: the machine's set-up, never a secret."""

from __future__ import annotations

from bot.executors.environment import scrubbed_environment


def test_the_machines_mpi_and_fabric_settings_reach_the_job() -> None:
    # Seen on a lent H200 machine: Lightning's cluster probe imports mpi4py, whose Open MPI aborted
    # ("Local abort before MPI_INIT") in every trial until these reached it.
    base = {"OMPI_MCA_plm": "isolated", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
            "PMIX_MCA_gds": "hash", "UCX_TLS": "rc,sm", "FI_PROVIDER": "efa", "I_MPI_FABRICS": "shm",
            "PATH": "/usr/bin"}
    assert scrubbed_environment(base=base).items() >= base.items()


def test_secrets_stay_out_whatever_their_prefix() -> None:
    base = {"OMPI_MCA_secret_token": "x", "UCX_PASSWORD": "y", "GITHUB_TOKEN": "z", "ANTHROPIC_API_KEY": "k",
            "AWS_SECRET_ACCESS_KEY": "s", "PATH": "/usr/bin"}
    env = scrubbed_environment(base=base)
    assert set(env) == {"PATH", "PYTHONUNBUFFERED"}
