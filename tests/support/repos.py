"""Builders for small real repositories, shared by the tests and the benchmark.

Kept in ``tests/support`` (not in a conftest, not in the product) so the
benchmark script can build the same fixture repositories.
"""

from __future__ import annotations

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
    """Make the files already in ``path`` a git repository on ``main`` with one commit (ignored files left out)."""
    pygit2.init_repository(str(path), initial_head="main")
    return commit_all(path, message)
