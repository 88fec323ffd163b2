"""The four ways a trial reaches its hardware, as the red team drives them: the same bench on each.

- ``local``: a child process of the bot (:class:`LocalExecutor`);
- ``torchrun``: two ranks under torchrun (the DDP fixture: every rank witnessed);
- ``actions``: pushed to the project's GitHub stand-in and run by its self-hosted runner stand-in (a clone of
  the pushed trial branch and the workflow's real step, ``python -m bot.executors.actions``);
- ``slurm``: a batch job on the session's local Slurm cluster (``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2

from bot.executors.local import LocalExecutor
from bot.executors.torchrun import TorchrunExecutor
from infrarsi.contract.model import Launch, SlurmLaunch
from infrarsi.seams.executor import Executor

EXECUTORS = ("local", "torchrun", "actions", "slurm")


@contextmanager
def executor_for(name: str, repo: Path, work: Path, *, need: Callable[[str], object] = lambda _: None
                 ) -> Iterator[Executor]:
    """The executor ``name`` for trials of ``repo`` (a committed git repository); ``work`` holds what it needs
    on the side; ``need(fixture_name)`` asks pytest for a fixture (the Slurm cluster)."""
    if name == "local":
        yield LocalExecutor()
    elif name == "torchrun":
        yield TorchrunExecutor(Launch(executor="torchrun", nproc_per_node=2))
    elif name == "slurm":
        from bot.executors.slurm import SlurmExecutor

        need("slurm_cluster")
        yield SlurmExecutor(SlurmLaunch(), workdir=work / "slurm-jobs", poll_s=0.2)
    elif name == "actions":
        from bot.executors.actions import ActionsExecutor, ActionsSettings
        from bot.forges.github import GitHubForge
        from bot.forges.github_api import GitHubTarget
        from tests.support.fake_github import TOKEN, FakeGitHub, TrialWorkflowRunner

        fake = FakeGitHub(work / "github").start()
        try:
            git = pygit2.Repository(str(repo))
            if "origin" not in git.remotes.names():
                git.remotes.create("origin", fake.clone_url)
            fake.plan_for = TrialWorkflowRunner(fake)
            forge = GitHubForge(GitHubTarget(owner=fake.owner, repo=fake.name, base_url=fake.url), TOKEN)
            yield ActionsExecutor(forge.client, push=lambda root, branch: forge.push(root, branch, force=True),
                                  settings=ActionsSettings(poll_interval_s=0.05))
        finally:
            fake.stop()
    else:
        raise ValueError(f"unknown executor {name!r} (one of {', '.join(EXECUTORS)})")
