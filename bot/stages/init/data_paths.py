"""Draft ``[data] paths``: the git-ignored files a job reads (datasets, tokenizers, checkpoints).

Datasets are not in git, so a trial's fresh worktree would not have them. ``init``
names them in the contract from what git ignores in the repo, keeping those the
code or the command refers to (or that look like data) and leaving out what jobs
write (outputs, logs, caches, virtual environments).
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from pathlib import Path

_JUNK = re.compile(r"(^|/)(__pycache__|\.venv|venv|env|\.infrarsi|\.pytest_cache|\.mypy_cache|\.ruff_cache|"
                   r"\.ipynb_checkpoints|\.idea|\.vscode|node_modules|build|dist|[^/]*\.egg-info|\.tox|\.cache)(/|$)"
                   r"|\.(pyc|pyo|log|swp)$|(^|/)\.DS_Store$|(^|/)infrarsi\.(toml|lock)$")
_OUTPUTS = re.compile(r"^(out|outs|output|outputs|runs|logs|log|wandb|lightning_logs|mlruns|multirun|tb|tensorboard|"
                      r"results|artifacts|samples|tmp)([-_][^/]*)?(/|$)")
_DATA_NAMES = re.compile(r"(data|dataset|corpus|token|vocab|ckpt|checkpoint|weights|pretrained|shards?)|"
                         r"\.(bin|npy|npz|pt|pth|safetensors|arrow|parquet|jsonl|txt|csv|tsv|json|model|idx|h5|tar)$",
                         re.I)


def ignored_paths(root: Path) -> list[str]:
    """What git ignores in ``root`` (whole ignored directories collapsed), repo-relative; [] outside git."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard",
                              "--directory", "-z"], capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    paths = sorted({p.rstrip("/") for p in out.decode("utf-8", "replace").split("\0") if p.strip()})
    # git may list a directory that merely holds ignored ones; keep the ignored entries themselves
    return [p for p in paths if not any(q.startswith(p + "/") for q in paths)]


def _strings(root: Path, files: list[str], command: str) -> str:
    texts = [command]
    for f in files:
        try:
            texts.append((root / f).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            pass
    return "\n".join(texts)


#: A string in the code or the command naming something one level above the repo: ``'../data'``.
_PARENT_LITERAL = re.compile(r"""(?:^|['"\s=])(\.\./[^'"\s,)]+)""", re.M)


def parent_paths(root: Path, text: str) -> list[str]:
    """Existing paths one level above ``root`` that the code or the command names (``'../data'``).

    Jobs run from a trial worktree, whose ``..`` is InfraRSI's worktrees directory, not the repo's
    parent: without a link there ``datasets.MNIST('../data')`` would find nothing (or download again).
    Two levels up would be InfraRSI's own state directory, so such paths are left to the user (an
    absolute path works from anywhere).
    """
    found: list[str] = []
    for m in _PARENT_LITERAL.finditer(text):
        rel = posixpath.normpath(m.group(1))
        if not rel.startswith("../") or rel.startswith("../../") or _OUTPUTS.match(rel[3:]):
            continue
        if rel not in found and (root / rel).exists():
            found.append(rel)
    return found


def draft_data_paths(root: Path, python_files: list[str], command: str) -> tuple[list[str], str]:
    """(paths, note): git-ignored data the job plausibly reads, and data one level above the repo it names."""
    text = _strings(root, python_files, command)
    keep: list[str] = parent_paths(root, text)
    for rel in ignored_paths(root):
        if _JUNK.search(rel) or _OUTPUTS.match(rel) or not (root / rel).exists():
            continue
        parts = rel.split("/")
        referenced = any(re.search(rf"['\"/]{re.escape(p)}['\"/]|\b{re.escape(p)}\b", text) for p in
                         (rel, parts[0], parts[-1]))
        if referenced or _DATA_NAMES.search(rel):
            keep.append(rel)
    note = ("guessed: git-ignored files the job reads" + (" and data one level above the repo it names" if
            any(p.startswith("../") for p in keep) else "") + "; trials reach them through links, never a copy, "
            "and the lock holds their identity (sha256 up to 8 MiB, else size and mtime)")
    return keep, note
