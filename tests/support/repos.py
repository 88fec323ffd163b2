"""Git for the tests: small real repositories, commits, and the git CLI — the one place tests make them.

Kept in ``tests/support`` (not in a conftest, not in the product) so the
benchmark script can build the same fixture repositories.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pygit2

_AUTHOR = pygit2.Signature("Test User", "user@example.com", 1_700_000_000, 0)

MODEL_V1 = '''"""A tiny model used by the git-layer tests."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
'''

MODEL_V2 = MODEL_V1.replace("width: int = 32", "width: int = 64")


def commit_all(repo_path: Path, message: str) -> str:
    """Stage everything in ``repo_path``'s working tree and commit on HEAD."""
    repo = pygit2.Repository(str(repo_path))
    index = repo.index
    index.add_all()
    index.write()
    tree = index.write_tree()
    parents = [] if repo.head_is_unborn else [repo.head.target]
    return str(repo.create_commit("HEAD", _AUTHOR, _AUTHOR, message, tree, parents))


def init_repo(path: Path, files: Mapping[str, str | bytes], *, message: str = "Initial commit") -> str:
    """``git init`` ``path`` on branch ``main``, write ``files``, commit; return the id."""
    path.mkdir(parents=True, exist_ok=True)
    pygit2.init_repository(str(path), initial_head="main")
    write_files(path, files)
    return commit_all(path, message)


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


def make_model_repo(path: Path) -> tuple[str, str]:
    """A repository with two commits touching ``model.py``; returns both ids."""
    first = init_repo(
        path,
        {
            "model.py": MODEL_V1,
            "train.py": "from model import Model\n\nmodel = Model()\n",
            "README.md": "# toy\n",
            "data/config.json": '{"lr": 0.001}\n',
        },
    )
    write_files(path, {"model.py": MODEL_V2})
    second = commit_all(path, "Widen the model")
    return first, second


def commit_tree(path: Path, message: str = "Initial commit") -> str:
    """Commit the files in ``path`` (ignored files left out), making it a git repository on ``main`` first where it
    is not one yet."""
    if not (path / ".git").exists():
        pygit2.init_repository(str(path), initial_head="main")
    return commit_all(path, message)


def git(repo: Path, *args: str) -> str:
    """The git CLI run in ``repo``; its stdout (a failure raises ``CalledProcessError``)."""
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def git_commit_tree(root: Path, message: str) -> None:
    """``git init``, ``git add -A``, ``git commit`` with the git CLI, as a user would (its default branch and ignore
    rules, a throwaway identity)."""
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message)


def commit_on(repo: Path, branch: str, files: dict[str, str], *, message: str = "change",
              start: str = "main") -> str:
    """Commit ``files`` on top of ``branch`` (created from ``start`` if missing) without a checkout."""
    git = pygit2.Repository(str(repo))
    ref = git.references.get(f"refs/heads/{branch}")
    parent = git.get(ref.target) if ref is not None else git.revparse_single(start).peel(pygit2.Commit)
    builder = git.TreeBuilder(parent.tree)
    for name, text in files.items():
        assert "/" not in name, "commit_on writes top-level files only"
        builder.insert(name, git.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("Contract Test", "contract@example.com")
    sha = git.create_commit(None, sig, sig, message, builder.write(), [parent.id])
    git.references.create(f"refs/heads/{branch}", sha, force=True)
    return str(sha)
