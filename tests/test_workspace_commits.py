"""Trial commits: everything staged, bot identity, trailers readable by git itself."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from bot.workspace import (
    BOT_IDENTITY,
    BotIdentity,
    ChangedPath,
    CommitError,
    changed_paths,
    commit_worktree,
    is_dirty,
    read_trailers,
    repo_head_commit,
    trial_worktree,
)
from bot.workspace.commits import format_message
from tests.support.repos import MODEL_V1, git, make_model_repo

TRAILERS = {
    "InfraRSI-Run": "run-7",
    "InfraRSI-Trial": "3",
    "InfraRSI-Candidate": "channels-last-7f3a",
}


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "repo"
    first, second = make_model_repo(path)
    return path, first, second


def test_commit_has_bot_identity_and_trailers(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="run-7", trial_no=3) as wt:
        (wt.path / "model.py").write_text(MODEL_V1.replace("nn.ReLU()", "nn.GELU()"))
        commit = commit_worktree(wt.path, message="Use GELU\n\nCandidate from the search.", trailers=TRAILERS)
        assert repo_head_commit(wt.path) == commit
        assert git(wt.path, "status", "--porcelain") == ""

    assert git(path, "rev-parse", "infrarsi/run-7/3").strip() == commit
    assert git(path, "rev-parse", f"{commit}^").strip() == first
    who = git(path, "log", "-1", "--format=%an|%ae|%cn|%ce", commit).strip()
    assert who == "infrarsi-bot|infrarsi-bot@users.noreply.local|infrarsi-bot|infrarsi-bot@users.noreply.local"
    body = git(path, "log", "-1", "--format=%B", commit)
    assert body == (
        "Use GELU\n\nCandidate from the search.\n\n"
        "InfraRSI-Run: run-7\nInfraRSI-Trial: 3\nInfraRSI-Candidate: channels-last-7f3a\n\n"
    )
    parsed = git(path, "log", "-1", "--format=%(trailers:only,unfold)", commit)
    assert parsed.strip().splitlines() == [f"{k}: {v}" for k, v in TRAILERS.items()]
    assert read_trailers(path, commit) == TRAILERS


def test_stages_adds_modifications_deletions_and_respects_gitignore(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="r", trial_no=0) as wt:
        (wt.path / ".gitignore").write_text("*.log\ncheckpoints/\n")
        (wt.path / "model.py").write_text(MODEL_V1 + "\n# tuned\n")
        (wt.path / "README.md").unlink()
        (wt.path / "kernels").mkdir()
        (wt.path / "kernels" / "fused.py").write_text("def fused(): ...\n")
        (wt.path / "train.log").write_text("ignored\n")
        (wt.path / "checkpoints").mkdir()
        (wt.path / "checkpoints" / "step1.pt").write_bytes(b"\0" * 64)
        commit = commit_worktree(wt.path, message="Candidate", trailers=TRAILERS)
        assert not is_dirty(wt.path)

    expected = [
        ChangedPath(".gitignore", "A"),
        ChangedPath("README.md", "D"),
        ChangedPath("kernels/fused.py", "A"),
        ChangedPath("model.py", "M"),
    ]
    assert changed_paths(path, first, commit) == expected
    cli = git(path, "diff", "--name-status", "--no-renames", first, commit)
    assert sorted(tuple(line.split("\t")[::-1]) for line in cli.splitlines()) == [
        (p, s) for p, s in expected
    ]
    tree = git(path, "ls-tree", "-r", "--name-only", commit).split()
    assert "train.log" not in tree and "checkpoints/step1.pt" not in tree


def test_nothing_changed_still_records_an_empty_trial_commit(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="knob", trial_no=0) as wt:
        commit = commit_worktree(wt.path, message="Knob-only: TORCH_CUDNN_V8_API", trailers=TRAILERS)
    assert commit != first
    assert git(path, "rev-parse", f"{commit}^{{tree}}") == git(path, "rev-parse", f"{first}^{{tree}}")
    assert changed_paths(path, first, commit) == []
    assert read_trailers(path, commit) == TRAILERS


def test_custom_identity(repo) -> None:
    path, first, _ = repo
    me = BotIdentity(name="acme-perf-bot", email="perf@acme.example")
    with trial_worktree(path, base=first, run_id="r", trial_no=0) as wt:
        commit = commit_worktree(wt.path, message="x", author=me, trailers={})
    assert git(path, "log", "-1", "--format=%an <%ae>", commit).strip() == "acme-perf-bot <perf@acme.example>"
    assert BOT_IDENTITY.name == "infrarsi-bot"


def test_changed_paths_between_the_fixture_commits(repo) -> None:
    path, first, second = repo
    assert changed_paths(path, first, second) == [("model.py", "M")]
    assert changed_paths(path, "main~1", "main") == [("model.py", "M")]


def test_commit_refuses_a_detached_head(repo) -> None:
    path, first, _ = repo
    r = pygit2.Repository(str(path))
    r.set_head(pygit2.Oid(hex=first))
    with pytest.raises(CommitError, match="detached"):
        commit_worktree(path, message="x", trailers={})


@pytest.mark.parametrize(
    ("message", "trailers", "error"),
    [
        ("", {}, "non-empty message"),
        ("msg", {"Bad Key": "v"}, "letters, digits"),
        ("msg", {"Key": "two\nlines"}, "single-line"),
        ("msg", {"Key": "  "}, "single-line"),
    ],
)
def test_format_message_rejects_bad_input(message: str, trailers: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        format_message(message, trailers)


def test_is_dirty_and_head(repo) -> None:
    path, _, second = repo
    assert repo_head_commit(path) == second
    assert not is_dirty(path)
    (path / ".gitignore").write_text("*.log\n")
    assert is_dirty(path)  # untracked .gitignore
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".gitignore")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ignore")
    (path / "x.log").write_text("ignored")
    assert not is_dirty(path)
    (path / "model.py").write_text("changed")
    assert is_dirty(path)
