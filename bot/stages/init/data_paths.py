"""Draft ``[data] paths``: the files a job reads that git does not track (datasets, tokenizers, checkpoints).

Datasets are rarely in git, so a trial's fresh worktree would not have them. ``init``
names them in the contract: what git ignores in the repo, keeping those the code or
the command refers to (or that look like data); what is merely untracked (a
downloaded ``input.txt`` nobody wrote a ``.gitignore`` line for) when the job names
it (:mod:`path_refs`) or it is a data folder beside the entry script; and data one
level above the repo it names. What jobs write (outputs, logs, caches, virtual
environments) is left out. ``check`` asks the same question of a written contract:
which paths the job names are outside git and outside ``[data]``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from bot.stages.init.path_refs import PathRef
from infrarsi.source_text import read_source

_JUNK = re.compile(r"(^|/)(__pycache__|\.venv|venv|env|\.infrarsi|\.pytest_cache|\.mypy_cache|\.ruff_cache|"
                   r"\.ipynb_checkpoints|\.idea|\.vscode|node_modules|build|dist|[^/]*\.egg-info|\.tox|\.cache)(/|$)"
                   r"|\.(pyc|pyo|log|swp)$|(^|/)\.DS_Store$|(^|/)infrarsi\.(toml|lock)$")
_OUTPUTS = re.compile(r"^(out|outs|output|outputs|runs|logs|log|wandb|lightning_logs|mlruns|multirun|tb|tensorboard|"
                      r"results|artifacts|samples|tmp)([-_][^/]*)?(/|$)")
_DATA_NAMES = re.compile(r"(data|dataset|corpus|token|vocab|ckpt|checkpoint|weights|pretrained|shards?)|"
                         r"\.(bin|npy|npz|pt|pth|safetensors|arrow|parquet|jsonl|txt|csv|tsv|json|model|idx|h5|tar)$",
                         re.I)


def outside_git_data(outside: Mapping[str, str]) -> dict[str, str]:
    """The paths of ``outside`` (what git does not track: path -> "ignored" or "untracked") that could be data:
    junk and outputs left out."""
    return {p: kind for p, kind in outside.items() if not _JUNK.search(p) and not _OUTPUTS.match(p)}


def _covers(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def named_untracked(refs: Sequence[PathRef], untracked: Iterable[str], near: Sequence[str]) -> dict[str, str]:
    """Untracked paths the job reads -> why: named by the code or the command (as themselves, a file in them
    or a folder around them), or a data folder beside the entry script; code and outputs are not data."""
    read = [r for r in refs if not r.written]
    written = [r.path for r in refs if r.written]
    out: dict[str, str] = {}
    for rel in untracked:
        if rel.endswith(".py") or any(_covers(w, rel) for w in written):
            continue
        ref = next((r for r in read if r.path == rel), None) or next(
            (r for r in read if _covers(rel, r.path) or _covers(r.path, rel)), None)
        if ref is not None:
            out[rel] = f"named in {ref.where}"
        elif posixpath.dirname(rel) in near and _DATA_DIR.match(posixpath.basename(rel)):
            out[rel] = "a data folder beside the entry script"
    return out


#: A folder beside the entry script that holds its data, whatever builds the path to it.
_DATA_DIR = re.compile(r"^(data|dataset|datasets|corpus|inputs?|raw|shards?|tokens|tokenized)$", re.I)


def _strings(root: Path, files: list[str], command: str) -> str:
    texts = [command]
    for f in files:
        try:
            texts.append(read_source(root / f))
        except (OSError, UnicodeError):
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


def draft_data_paths(root: Path, python_files: list[str], command: str, *, outside: Mapping[str, str],
                     refs: Sequence[PathRef] = (), near: Sequence[str] = ()) -> tuple[list[str], str]:
    """(paths, note): of ``outside`` (what git does not track in ``root``), git-ignored data the job plausibly reads
    and untracked data it names (``refs``, or a data folder in ``near``: the entry script's folder and the working
    directory); and data one level above the repo it names."""
    text = _strings(root, python_files, command)
    keep: list[str] = parent_paths(root, text)
    written = [r.path for r in refs if r.written]
    candidates = outside_git_data(outside)
    for rel in (p for p, kind in candidates.items() if kind == "ignored"):
        if not (root / rel).exists() or any(_covers(w, rel) for w in written):
            continue
        parts = rel.split("/")
        referenced = any(re.search(rf"['\"/]{re.escape(p)}['\"/]|\b{re.escape(p)}\b", text) for p in
                         (rel, parts[0], parts[-1]))
        if referenced or _DATA_NAMES.search(rel):
            keep.append(rel)
    untracked = sorted(p for p, kind in candidates.items() if kind == "untracked")
    named = named_untracked(refs, untracked, near)
    keep += [p for p in named if p not in keep]
    whence = "; ".join(f"{p} (untracked, {why})" for p, why in named.items())
    note = ("guessed: files outside git the job reads: git-ignored ones" + (f", untracked ones: {whence}" if whence
                                                                            else "")
            + (" and data one level above the repo it names" if any(p.startswith("../") for p in keep) else "")
            + "; trials reach them through links, never a copy, and the lock holds their identity (sha256 up to "
            "8 MiB, else size and mtime)")
    return keep, note


def unlisted_data(refs: Sequence[PathRef], outside: dict[str, str], listed: Sequence[str]) -> list[str]:
    """One line per path outside git that the job names and ``[data] paths`` lacks (what ``check`` says)."""
    named: dict[str, PathRef] = {}  # the path outside git (as git lists it) -> the first reference to it
    for ref in refs:
        if ref.written or ref.path.endswith(".py") or any(_covers(p, ref.path) for p in listed):
            continue
        path = next((p for p in outside if _covers(p, ref.path) or _covers(ref.path, p)), None)
        if path is not None and not any(_covers(p, path) for p in listed):
            named.setdefault(path, ref)
    return [f"{path}: {outside[path]} by git and not in [data] paths, but the job names it ({ref.where}); a trial's "
            "worktree will not have it: add it to [data] paths in infrarsi.toml, then run `infrarsi lock`"
            for path, ref in named.items()]
