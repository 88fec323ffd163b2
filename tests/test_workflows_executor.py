"""The workflow templates choose the executor the way the code reads it, and the simulated runner of
tests/support/fake_github.py runs exactly the trial workflow's step."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from bot.cli.main import build_parser
from tests.support.fake_github import TRIAL_STEP
from tests.support.workflows import load

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"


def _steps(name: str) -> list[dict]:
    workflow = load(WORKFLOWS / name)
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def _infrarsi_lines(name: str) -> list[list[str]]:
    """Every ``infrarsi ...`` command of a template, split as the shell would (each "$VARIABLE" set to 1)."""
    lines = []
    for step in _steps(name):
        for line in str(step.get("run", "")).splitlines():
            if line.strip().startswith("infrarsi "):  # the command itself, not what the shell does after it (||)
                lines.append(shlex.split(re.sub(r'"\$\{?\w+\}?"', "1", re.split(r"\s(?:\|\||&&)\s", line)[0])))
    return lines


def test_the_bot_and_the_promotion_send_trials_to_the_runners_through_the_flag() -> None:
    parser = build_parser()
    verbs = {}
    for name in ("infrarsi-bot.yml", "infrarsi-promote.yml"):
        for argv in _infrarsi_lines(name):
            args = parser.parse_args(argv[1:])  # the flags exist: argparse would exit on an unknown one
            verbs[argv[1]] = getattr(args, "executor", "n/a")
    assert verbs["run"] == "actions" and verbs["promote"] == "actions"
    for template in WORKFLOWS.glob("*.yml"):  # the variable nothing read is gone
        assert "INFRARSI_EXECUTOR" not in template.read_text(), template.name


def test_jobs_that_dispatch_trials_may_use_actions() -> None:
    for name in ("infrarsi-bot.yml", "infrarsi-promote.yml"):
        (job,) = [job for job in load(WORKFLOWS / name)["jobs"].values()
                  if any("infrarsi " in str(step.get("run", "")) for step in job["steps"])]
        assert job["permissions"].get("actions") == "write", name


def test_the_simulated_runner_runs_the_trial_workflows_own_step() -> None:
    runs = [str(step["run"]).strip() for step in _steps("infrarsi-trial.yml") if "bot.executors.actions"
            in str(step.get("run", ""))]
    assert runs == [TRIAL_STEP]
