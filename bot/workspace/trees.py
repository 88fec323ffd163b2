"""Trees and commits made without a worktree: diffs, exports, merges and commits of given files.

The promotion commit, the local forge's merge, the experience bank's branch
and the report's ``winner.diff`` are built from git objects directly, so the
user's branches, index and working tree are never touched; only the refs a
caller names move. Every call opens its own repository (libgit2 objects are
not thread-safe).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pygit2

from bot.workspace._access import open_repository, ref_lock, retry_locked
from bot.workspace.commits import signature
from bot.workspace.errors import MergeConflictError, RevisionNotFoundError
from bot.workspace.identity import BOT_IDENTITY, BotIdentity

__all__ = ["changed_files", "commit_files", "diff_to_parent", "export_tree", "list_files", "merge_change",
           "merge_into_branch", "read_blob"]


def _commit(git: pygit2.Repository, sha: str, repo: Path | str) -> pygit2.Commit:
    try:
        obj = git.revparse_single(sha)
        return obj.peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        raise RevisionNotFoundError(sha, repo) from None


def changed_files(worktree: Path, base: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(before, after) contents of every path that differs between ``base`` and the worktree's files.

    Ignored files do not count; a deleted file has a ``before`` and no ``after``."""
    git = open_repository(worktree)
    tree = git.revparse_single(base).peel(pygit2.Tree)
    before: dict[str, bytes] = {}
    after: dict[str, bytes] = {}
    for path, flags in git.status().items():
        if flags & pygit2.enums.FileStatus.IGNORED:
            continue
        try:
            before[path] = tree[path].data
        except KeyError:
            pass
        file = worktree / path
        if file.is_file():
            after[path] = file.read_bytes()
    return before, after


def diff_to_parent(repo: Path | str, commit: str) -> tuple[str, str] | None:
    """(first parent's id, unified diff) of ``commit``; None when it is not there or has no parent."""
    git = open_repository(repo)
    c = git.get(commit)
    if not isinstance(c, pygit2.Commit) or not c.parents:
        return None
    base = c.parents[0]
    return str(base.id), git.diff(base.tree, c.tree).patch or ""


def export_tree(repo: Path | str, treeish: str, directory: Path) -> None:
    """Write the files of a commit or tree into ``directory`` (no index, no HEAD, no worktree metadata)."""
    git = open_repository(repo)
    obj = git.get(treeish)
    if obj is None:
        raise RevisionNotFoundError(treeish, repo)
    git.checkout_tree(obj.peel(pygit2.Tree), directory=str(directory), strategy=pygit2.enums.CheckoutStrategy.FORCE)


def merge_change(repo: Path | str, change: str, onto: str) -> str:
    """The tree of ``onto`` with ``change``'s own diff (against its first parent) merged in.

    Raises :class:`RevisionNotFoundError` when a commit is not there,
    :class:`ValueError` when ``change`` has no parent, and
    :class:`MergeConflictError` naming the conflicting paths."""
    git = open_repository(repo)
    changed, base = _commit(git, change, repo), _commit(git, onto, repo)
    if not changed.parents:
        raise ValueError(f"commit {change[:10]} has no parent to diff against")
    index = git.merge_trees(changed.parents[0].tree, base.tree, changed.tree)
    _no_conflicts(index, f"commit {change[:10]} merged onto {onto[:10]}")
    return str(index.write_tree(git))


def list_files(repo: Path | str, commit: str | None) -> dict[str, str]:
    """``{path: blob id}`` of every file in ``commit``'s tree (``{}`` for None)."""
    if commit is None:
        return {}
    git = open_repository(repo)
    out: dict[str, str] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            if isinstance(entry, pygit2.Tree):
                walk(entry, f"{prefix}{entry.name}/")
            elif isinstance(entry, pygit2.Blob):
                out[f"{prefix}{entry.name}"] = str(entry.id)

    walk(_commit(git, commit, repo).tree, "")
    return out


def read_blob(repo: Path | str, blob: str) -> bytes:
    return open_repository(repo)[blob].peel(pygit2.Blob).data


def commit_files(repo: Path | str, *, tree: str | None, files: Mapping[str, bytes], parents: Sequence[str],
                 message: str, identity: BotIdentity = BOT_IDENTITY) -> tuple[str, str]:
    """A commit whose tree is ``tree`` (a tree or commit id; None: empty) with ``files`` written over it.

    A file keeps its mode when it was in ``tree``. No ref moves and no index or
    worktree is involved. Returns (commit id, tree id)."""
    git = open_repository(repo)
    index = pygit2.Index()  # in memory
    if tree is not None:
        index.read_tree(git.get(tree).peel(pygit2.Tree))
    for rel, data in files.items():
        mode = index[rel].mode if rel in index else pygit2.enums.FileMode.BLOB
        index.add(pygit2.IndexEntry(rel, git.create_blob(data), mode))
    new_tree = index.write_tree(git)
    sig = signature(identity)
    sha = git.create_commit(None, sig, sig, message, new_tree, [pygit2.Oid(hex=p) for p in parents])
    return str(sha), str(new_tree)


def merge_into_branch(repo: Path | str, branch: str, head: str, *, message: str, identity: BotIdentity,
                      method: str = "merge") -> str:
    """Land ``head`` on ``branch`` as a forge's merge button does; ``branch`` moves to the commit returned.

    ``merge``: a merge commit (parents: the branch's tip and ``head``). ``squash``: one commit with the merged
    tree, parent the branch's tip, authored by ``head``'s author. ``rebase``: each commit of ``head`` that the
    branch lacks replayed onto it, oldest first, authors kept. The committer is ``identity`` in every case.
    Raises :class:`RevisionNotFoundError` when the branch or ``head`` is not there, :class:`MergeConflictError`
    when they conflict and :class:`ValueError` for another method."""
    git = open_repository(repo)
    ref = git.references.get(f"refs/heads/{branch}")
    if ref is None:
        raise RevisionNotFoundError(branch, repo)
    base, tip = git.get(ref.target), _commit(git, head, repo)
    sig = signature(identity)
    if method == "rebase":
        sha = base.id
        walker = git.walk(tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        walker.hide(base.id)
        for commit in walker:
            onto = git.get(sha)
            ancestor = commit.parents[0].tree if commit.parents else git.get(git.TreeBuilder().write())
            index = git.merge_trees(ancestor, onto.tree, commit.tree)
            _no_conflicts(index, f"{str(commit.id)[:10]} rebased onto {branch}")
            sha = git.create_commit(None, commit.author, sig, commit.message, index.write_tree(git), [onto.id])
    elif method in ("merge", "squash"):
        index = git.merge_commits(base, tip)
        _no_conflicts(index, f"{head[:10]} merged into {branch}")
        tree = index.write_tree(git)
        if method == "merge":
            sha = git.create_commit(None, sig, sig, message, tree, [base.id, tip.id])
        else:
            sha = git.create_commit(None, tip.author, sig, message, tree, [base.id])
    else:
        raise ValueError(f"unknown merge method {method!r}; expected merge, squash or rebase")
    with ref_lock(git):
        retry_locked(lambda: ref.set_target(sha, message.splitlines()[0] if message else method))
    return str(sha)


def _no_conflicts(index: pygit2.Index, what: str) -> None:
    if index.conflicts is not None:
        raise MergeConflictError([next(e for e in c if e is not None).path for c in index.conflicts], what)
