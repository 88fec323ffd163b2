"""bot.workspace.outside_git: what git does not track, listed as ``git ls-files --others --directory`` lists it."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.workspace import GitWorkspace
from bot.workspace.outside_git import outside_git
from tests.support.repos import git, init_repo, write_files


def _ls_others(root: Path) -> dict[str, str]:
    """git's own answer, the way init read it before the workspace did: ignored first, then untracked."""
    def listed(*flags: str) -> list[str]:
        out = git(root, "ls-files", "--others", *flags, "--exclude-standard", "--directory", "-z")
        paths = sorted({p.rstrip("/") for p in out.split("\0") if p.strip()})
        return [p for p in paths if not any(q.startswith(p + "/") for q in paths)]  # an ignored folder's files
    out = {p: "ignored" for p in listed("--ignored")}
    out.update({p: "untracked" for p in listed("--no-empty-directory")})
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    init_repo(root, {".gitignore": "data/\n*.log\nckpt/*.pt\n", "train.py": "print(1)\n",
                     "src/model.py": "x = 1\n", "jobs/run.py": "y = 2\n"})
    write_files(root, {
        "data/train.bin": "t", "data/sub/val.bin": "v",  # an ignored folder: one entry
        "ckpt/model.pt": "m",  # ignored files in a folder that is not ignored: each its own entry
        "only_logs/a.log": "l",  # a folder of ignored files only: not untracked
        "mixed/input.txt": "i", "mixed/run.log": "r",  # untracked folder, an ignored file inside it
        "downloads/deep/shard-0.bin": "s", "downloads/readme.md": "r",  # one untracked entry
        "input.txt": "x", "train.log": "y",
        "src/new_helper.py": "z", "src/cache/blob": "b",  # untracked beside tracked files
    })
    (root / "empty_dir").mkdir()
    return root


def test_each_path_git_does_not_track_is_listed_once_as_git_lists_it(repo: Path) -> None:
    assert outside_git(repo) == {
        "ckpt/model.pt": "ignored", "data": "ignored", "mixed/run.log": "ignored", "only_logs/a.log": "ignored",
        "train.log": "ignored",
        "downloads": "untracked", "input.txt": "untracked", "mixed": "untracked", "src/cache": "untracked",
        "src/new_helper.py": "untracked"}
    assert list(outside_git(repo).items()) == list(_ls_others(repo).items())  # the same entries, in git's order


def test_a_workspace_opened_in_a_folder_lists_what_is_under_it_relative_to_it(repo: Path) -> None:
    assert outside_git(repo / "src") == {"cache": "untracked", "new_helper.py": "untracked"}
    assert outside_git(repo / "src") == _ls_others(repo / "src")
    assert GitWorkspace(repo / "src").outside_git() == outside_git(repo / "src")


def test_a_staged_file_is_tracked(repo: Path) -> None:
    git(repo, "add", "input.txt")
    assert "input.txt" not in outside_git(repo)
    assert outside_git(repo) == _ls_others(repo)


def test_outside_a_repository_nothing_is_outside_git(tmp_path: Path) -> None:
    (tmp_path / "input.txt").write_text("x")
    assert outside_git(tmp_path) == {}
