"""The executor registry: ``[launch] executor`` and ``--executor`` choose, in one place, for every verb."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

from bot.cli.main import build_parser
from bot.executors.actions import ActionsExecutor
from bot.executors.local import LocalExecutor
from bot.executors.registry import (
    EXECUTORS,
    ExecutorOptions,
    ExecutorSetupError,
    UnknownExecutorError,
    add_executor_argument,
    build_executor,
    select_executor,
)
from bot.executors.torchrun import TorchrunExecutor
from tests.support.repos import init_repo
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import EXECUTORS as CONTRACT_EXECUTORS
from infrarsi.contract.load import parse_contract
from infrarsi.contract.model import ActionsLaunch
from tests.support.fake_github import TOKEN

BASE = {"workload": {"command": "python train.py", "tokens_per_step": 64}}


def _contract(tmp_path: Path, **launch: object):
    (tmp_path / "train.py").write_text("")
    return parse_contract({**BASE, "launch": launch}, source=tmp_path / "infrarsi.toml", root=tmp_path)


def test_every_name_the_contract_accepts_has_a_factory() -> None:
    assert set(CONTRACT_EXECUTORS) == set(EXECUTORS) == {"local", "torchrun", "actions", "slurm"}


@pytest.mark.parametrize(("launch", "kind"), [({}, LocalExecutor), ({"executor": "local"}, LocalExecutor),
                                              ({"executor": "torchrun", "nproc_per_node": 2}, TorchrunExecutor)])
def test_the_contract_chooses(tmp_path: Path, launch: dict, kind: type) -> None:
    executor = build_executor(_contract(tmp_path, **launch), options=ExecutorOptions(on_step=print))
    assert isinstance(executor, kind) and executor.on_step is print


def test_a_name_overrides_the_contract_and_the_stages_see_it(tmp_path: Path) -> None:
    contract = _contract(tmp_path)
    assert isinstance(build_executor(contract, name="torchrun"), TorchrunExecutor)
    chosen = select_executor(contract, "torchrun")
    assert chosen.launch.executor == "torchrun" and contract.launch.executor == "local"
    assert select_executor(contract, None) is contract
    with pytest.raises(UnknownExecutorError, match="expected one of local, torchrun, actions, slurm"):
        build_executor(contract, name="kubernetes")


def _github_repo(tmp_path: Path, url: str) -> Path:
    repo = tmp_path / "repo"
    init_repo(repo, {"train.py": ""})
    pygit2.Repository(str(repo)).remotes.create("origin", url)
    return repo


def test_actions_reads_launch_actions_and_the_token(tmp_path: Path) -> None:
    repo = _github_repo(tmp_path, "https://github.example.com/acme/trainer.git")
    contract = parse_contract({**BASE, "launch": {"executor": "actions", "actions": {
        "runners": 3, "devices": 8, "workflow": "gpu-trial.yml", "poll_interval_s": 2}}},
        source=repo / "infrarsi.toml", root=repo)
    assert contract.launch.actions == ActionsLaunch(runners=3, devices=8, workflow="gpu-trial.yml",
                                                    poll_interval_s=2.0)
    executor = build_executor(contract, options=ExecutorOptions(environ={"GH_TOKEN": TOKEN}))
    assert isinstance(executor, ActionsExecutor)
    s = executor.settings
    assert (s.max_runners, s.devices, s.workflow, s.poll_interval_s) == (3, 8, "gpu-trial.yml", 2.0)
    assert executor.client.repo_url == "https://github.example.com/api/v3/repos/acme/trainer"


def test_actions_without_a_token_or_a_repository_says_what_to_set(tmp_path: Path) -> None:
    repo = _github_repo(tmp_path, "https://github.com/acme/trainer.git")
    contract = parse_contract({**BASE, "launch": {"executor": "actions"}}, source=repo / "infrarsi.toml", root=repo)
    with pytest.raises(ExecutorSetupError) as err:
        build_executor(contract, options=ExecutorOptions(environ={}))
    assert str(err.value).startswith("launch.executor = 'actions': the GitHub forge needs a token in one of "
                                     "INFRARSI_GITHUB_TOKEN")
    (tmp_path / "plain").mkdir()
    plain = _contract(tmp_path / "plain")
    with pytest.raises(ExecutorSetupError, match="is not a git repository"):
        build_executor(plain, name="actions", options=ExecutorOptions(environ={"GH_TOKEN": TOKEN}))


@pytest.mark.parametrize(("launch", "key", "words"), [
    ({"executor": "actions", "nproc_per_node": 2}, "launch.nproc_per_node",
     "expected 1 with launch.executor = 'actions' (one process on each runner)"),
    ({"executor": "actions", "rdzv_endpoint": "h:1"}, "launch.rdzv_endpoint", "only with launch.executor = 'torchrun'"),
    ({"executor": "kubernetes"}, "launch.executor", "one of 'local', 'torchrun', 'actions', 'slurm'"),
    ({"actions": {"runners": 0}}, "launch.actions.runners", "expected an integer >= 1, got integer 0"),
    ({"actions": {"workflow": ".github/workflows/t.yml"}}, "launch.actions.workflow", "a workflow file name"),
    ({"actions": {"poll_interval_s": 0}}, "launch.actions.poll_interval_s", "a positive number"),
    ({"actions": {"runner": 2}}, "launch.actions.runner", "did you mean 'runners'"),
    ({"actions": "gpu"}, "launch.actions", "expected a table"),
])
def test_launch_errors_name_the_key(tmp_path: Path, launch: dict, key: str, words: str) -> None:
    with pytest.raises(ContractError) as err:
        _contract(tmp_path, **launch)
    assert err.value.key == key and words in err.value.message, err.value.message


def test_the_verbs_that_run_trials_take_executor_and_others_do_not() -> None:
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for verb in ("run", "trial", "verify", "doctor"):
        flag = next(a for a in verbs[verb]._actions if "--executor" in a.option_strings)
        assert tuple(flag.choices) == ("local", "torchrun", "actions", "slurm") and flag.default is None
        assert "[launch] executor" in flag.help
    for verb in ("init", "check", "report", "apply", "patches"):
        assert not any("--executor" in a.option_strings for a in verbs[verb]._actions), verb
    p = argparse.ArgumentParser()
    add_executor_argument(p)
    assert p.parse_args(["--executor", "actions"]).executor == "actions"


def test_the_cli_says_in_one_line_when_actions_cannot_be_set_up(tiny_repo: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("INFRARSI_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")}
    result = subprocess.run([sys.executable, "-m", "bot", "trial", str(tiny_repo), "--executor", "actions"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: launch.executor = 'actions': the GitHub forge needs a token in one of INFRARSI_GITHUB_TOKEN, "
        "GITHUB_TOKEN, GH_TOKEN (see docs/github.md)"]
