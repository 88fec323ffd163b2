"""``infrarsi apply``: one promotion branch with one commit, exactly one pull request, idempotent reruns."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest

from bot.forges.local import LocalForge
from tests.support.tinygpt import infrarsi
from tests.support.promotion import RUN_ID, clone_template, promoted_template, pull_records, write_run_json  # noqa: F401

pytestmark = pytest.mark.slow
BRANCH = f"infrarsi/promote/{RUN_ID}"


@pytest.fixture
def promoted(promoted_template: Path, tmp_path: Path) -> Path:
    return clone_template(promoted_template, tmp_path / "copy")


def _apply(repo: Path, *extra: str):  # noqa: ANN202
    result = infrarsi("apply", str(repo), *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_apply_twice_keeps_one_pull_request_and_updates_it(promoted: Path) -> None:
    remote = promoted.parent / "remote.git"
    first = _apply(promoted)
    assert "pull request #1 created" in first.stdout
    record_path = remote / "infrarsi-forge" / "pulls" / "1.json"
    assert f"pull-request record: {record_path}" in first.stdout
    record = json.loads(record_path.read_text())
    assert record["head"] == BRANCH and record["base"] == "main" and record["state"] == "open"
    assert record["labels"] == ["infrarsi", "performance"]
    assert record["requested_reviewers"] == ["acme/perf", "alice"]
    for section in ("Summary", "Changes", "Verification", "Failed trials", "Model calibration", "Reproduce"):
        assert f"## {section}\n" in record["body"]
    git = pygit2.Repository(str(promoted))
    head = git.revparse_single(BRANCH)
    assert [str(p) for p in head.parent_ids] == [str(git.revparse_single("main").id)]  # one commit on the base
    tree = head.tree
    assert b"default=\"bf16\"" in tree["train.py"].data and b'default = "bf16"' in tree["infrarsi.toml"].data
    assert tree["model.py"].data != git.revparse_single("main").tree["model.py"].data  # the patch's tree diff
    assert str(pygit2.Repository(str(remote)).revparse_single(BRANCH).id) == str(head.id)

    second = _apply(promoted)
    assert "pull request #1 unchanged" in second.stdout
    assert str(pygit2.Repository(str(promoted)).revparse_single(BRANCH).id) == str(head.id)

    run_json = promoted / ".infrarsi" / "runs" / RUN_ID / "run.json"
    data = json.loads(run_json.read_text())
    data["posterior"]["time_effects"][0]["post_mean"] = -0.30
    run_json.write_text(json.dumps(data))
    third = _apply(promoted)
    assert "pull request #1 updated" in third.stdout
    assert [p.name for p in pull_records(remote)] == ["1.json"]
    assert "0.741" in json.loads(record_path.read_text())["body"]  # exp(-0.30), the new posterior


def test_dry_run_changes_nothing(promoted: Path) -> None:
    before = sorted(pygit2.Repository(str(promoted)).references)
    result = _apply(promoted, "--dry-run")
    assert "dry run: nothing is changed" in result.stdout and f"would branch {BRANCH} from main" in result.stdout
    assert "knob dtype: fp32 -> bf16" in result.stdout and "patch fused_gelu: model.py::gelu_tanh" in result.stdout
    assert sorted(pygit2.Repository(str(promoted)).references) == before
    assert pull_records(promoted.parent / "remote.git") == []
    assert not (promoted / ".infrarsi" / "runs" / RUN_ID / "report.md").exists()


def test_a_closed_pull_request_is_not_reopened_unless_asked(promoted: Path) -> None:
    _apply(promoted)
    LocalForge(promoted.parent / "remote.git").close(1)
    again = _apply(promoted)
    assert "pull request #1 is closed; not reopened" in again.stdout
    reopened = _apply(promoted, "--reopen")
    assert "pull request #1 updated" in reopened.stdout
    assert [p.name for p in pull_records(promoted.parent / "remote.git")] == ["1.json"]


def test_nothing_verified_means_nothing_to_apply(promoted: Path) -> None:
    write_run_json(promoted, promoted=False)
    result = infrarsi("apply", str(promoted))
    assert result.returncode == 1
    assert "no candidate was verified faster than the baseline; nothing to apply" in result.stderr
    report = infrarsi("report", str(promoted))
    assert report.returncode == 0 and "no verified speedup" in report.stdout


def test_report_json_holds_what_the_issue_asks_for(promoted: Path) -> None:
    result = infrarsi("report", str(promoted), "--run-id", RUN_ID)
    assert result.returncode == 0, result.stderr
    data = json.loads((promoted / ".infrarsi" / "runs" / RUN_ID / "report.json").read_text())
    for key in ("speedup", "speedup_ci", "mfu_before", "mfu_after", "trials", "failed_cost_s", "promoted", "audit"):
        assert key in data, key
    assert data["promoted"] is True and data["speedup"] > 1 and len(data["speedup_ci"]) == 2
    assert data["audit"][0]["path"] == "model.py" and data["audit"][0]["patch"] == "fused_gelu"
    assert (promoted / ".infrarsi" / "runs" / RUN_ID / "winner.diff").read_text().startswith("diff --git")
