"""Sharing the experience bank between clones and clusters through one git branch.

Findings travel as files on a dedicated branch (``infrarsi/experience`` by
default) of an ordinary git remote, one file per finding at
``findings/<id[:2]>/<id>.json``. A file is named after the content id of the
finding it holds and is never modified or deleted, so the branch is an
append-only set: two clones that add different findings touch different paths,
and the union of two trees is always a clean tree. That is what makes this
safe without a merge: :func:`sync` commits *on top of the fetched tip*, and if
the remote moved meanwhile the push is refused, we fetch again and rebuild
(bounded by ``max_attempts``).

No worktree and no ``git`` subprocess: everything goes through pygit2 object
writes (blobs, an in-memory index, a commit). The user's branches, index and
working tree are never touched; only ``refs/heads/infrarsi/experience`` (which
``infrarsi gc`` protects) and its remote-tracking ref are updated.

Credentials for real remotes: pass ``credentials`` (a pygit2 credential such
as ``pygit2.UserPass(user, token)`` or ``pygit2.Keypair(...)``, or a callable
``(url, username_from_url, allowed_types) -> credential``); without one, SSH
remotes use the ssh-agent. libgit2 calls the credentials callback again after
every refused attempt, forever; :class:`SyncCallbacks` gives up after
``max_credential_attempts`` with a :class:`BankSyncError` instead of hanging.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import CredentialType, FileMode

from bot.workspace._repo import open_main_repository, ref_lock, retry_locked
from bot.workspace.commits import BOT_IDENTITY, BotIdentity, format_message
from bot.workspace.errors import GitLayerError
from infrarsi.bank import Bank, Finding

__all__ = [
    "DEFAULT_BRANCH",
    "FINDINGS_DIR",
    "BankSyncError",
    "SyncCallbacks",
    "SyncReport",
    "finding_path",
    "read_remote_findings",
    "sync",
]

DEFAULT_BRANCH = "infrarsi/experience"
FINDINGS_DIR = "findings"
_ID = re.compile(r"[0-9a-f]{64}")
# libgit2's wordings for "the remote has commits you have not fetched" (local and smart transports).
_STALE = ("not present locally", "non-fastforward", "non-fast-forward", "fast-forward", "fetch first",
          "stale info", "rejected", "failed to update ref")

CredentialSource = Callable[[str, str | None, CredentialType], Any]


class BankSyncError(GitLayerError):
    """Fetching from or pushing to the experience remote failed; the message says what to do."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncReport:
    """What one :func:`sync` did."""

    remote: str
    branch: str
    imported: int  # findings new to the local bank
    exported: int  # findings new to the remote branch
    remote_findings: int  # files on the remote branch afterwards
    commit: str | None  # the branch tip afterwards (None: the remote has no such branch and we had nothing)
    pushed: bool
    attempts: int  # fetch-build-push rounds; > 1 when the remote moved under us
    skipped: tuple[str, ...] = ()  # remote files that are not readable findings (left alone)


class SyncCallbacks(pygit2.RemoteCallbacks):
    """Credentials with a bound on retries, and the remote's verdict on each pushed ref."""

    def __init__(self, credentials: CredentialSource | None = None, *, max_credential_attempts: int = 3) -> None:
        super().__init__()
        self._source = credentials
        self.max_credential_attempts = max_credential_attempts
        self.credential_attempts = 0
        self.rejected: dict[str, str] = {}

    def credentials(self, url: str, username_from_url: str | None, allowed_types: CredentialType) -> Any:
        self.credential_attempts += 1
        if self.credential_attempts > self.max_credential_attempts:
            raise BankSyncError(
                f"authentication to {url} failed {self.max_credential_attempts} times; check the token or key "
                "you gave (or the ssh-agent) and that it may push to the experience branch")
        if self._source is not None:
            return self._source(url, username_from_url, allowed_types)
        if allowed_types & CredentialType.SSH_KEY:
            return pygit2.KeypairFromAgent(username_from_url or "git")
        raise BankSyncError(f"{url} asks for credentials; pass credentials=pygit2.UserPass(user, token) "
                            "or use an SSH remote with a key in the ssh-agent")

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.rejected[refname] = message


def finding_path(finding_id: str) -> str:
    """``findings/<id[:2]>/<id>.json``: two-level fan-out keeps trees small as the bank grows."""
    return f"{FINDINGS_DIR}/{finding_id[:2]}/{finding_id}.json"


def _resolve_remote(repo: pygit2.Repository, remote: str, branch: str) -> tuple[pygit2.Remote, str]:
    """A configured remote by name, or an anonymous one for a URL or a local path; and its tracking ref."""
    if remote in set(repo.remotes.names()):
        return repo.remotes[remote], f"refs/remotes/{remote}/{branch}"
    path = Path(remote).expanduser()
    if path.exists():
        url = str(path.resolve())
    elif "://" in remote or re.match(r"^[\w.-]+@[\w.-]+:", remote):
        url = remote
    else:
        raise BankSyncError(f"{remote!r} is neither a remote of this repository "
                            f"({', '.join(repo.remotes.names()) or 'it has none'}) nor a URL or an existing path")
    key = hashlib.sha256(url.encode()).hexdigest()[:12]
    return repo.remotes.create_anonymous(url), f"refs/infrarsi/bank-sync/{key}/{branch}"


def _set_ref(repo: pygit2.Repository, name: str, target: pygit2.Oid | None) -> None:
    with ref_lock(repo):
        if target is None:
            ref = repo.references.get(name)
            if ref is not None:
                retry_locked(ref.delete)
        else:
            retry_locked(lambda: repo.references.create(name, target, force=True))


def _fetch(repo: pygit2.Repository, remote: pygit2.Remote, branch: str, tracking: str,
           callbacks: SyncCallbacks) -> pygit2.Commit | None:
    """The remote branch's tip, fetched; None if the remote has no such branch (yet)."""
    _set_ref(repo, tracking, None)  # a stale tracking ref must not pass for a branch deleted remotely
    try:
        remote.fetch([f"+refs/heads/{branch}:{tracking}"], callbacks=callbacks,
                     message=f"infrarsi bank sync: fetch {branch}")
    except pygit2.GitError as exc:
        raise BankSyncError(f"could not fetch {branch} from {remote.url}: {exc}") from exc
    ref = repo.references.get(tracking)
    if ref is None:
        return None
    commit = repo[ref.target].peel(pygit2.Commit)
    assert isinstance(commit, pygit2.Commit)
    return commit


def _remote_entries(repo: pygit2.Repository, tip: pygit2.Commit | None) -> tuple[dict[str, pygit2.Oid], list[str]]:
    """``{finding id: blob id}`` of the files on the branch, and the paths that are not finding files."""
    entries: dict[str, pygit2.Oid] = {}
    skipped: list[str] = []
    if tip is None or FINDINGS_DIR not in tip.tree:
        return entries, skipped
    top = tip.tree[FINDINGS_DIR]
    if not isinstance(top, pygit2.Tree):
        return entries, [FINDINGS_DIR]
    for shard in top:
        if not isinstance(shard, pygit2.Tree):
            skipped.append(f"{FINDINGS_DIR}/{shard.name}")
            continue
        for entry in shard:
            stem = entry.name.removesuffix(".json")
            if isinstance(entry, pygit2.Blob) and entry.name.endswith(".json") and _ID.fullmatch(stem) \
                    and stem[:2] == shard.name:
                entries[stem] = entry.id
            else:
                skipped.append(f"{FINDINGS_DIR}/{shard.name}/{entry.name}")
    return entries, skipped


def read_remote_findings(repo: pygit2.Repository, entries: dict[str, pygit2.Oid], wanted: set[str],
                         skipped: list[str]) -> list[Finding]:
    """Parse the ``wanted`` files; one that does not hold the finding its name promises is skipped."""
    out: list[Finding] = []
    for finding_id in sorted(wanted):
        path = finding_path(finding_id)
        try:
            finding = Finding.from_json(repo[entries[finding_id]].peel(pygit2.Blob).data)
        except (ValueError, UnicodeDecodeError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if finding.id != finding_id:
            skipped.append(f"{path}: holds finding {finding.id}")
            continue
        out.append(finding)
    return out


def _commit(repo: pygit2.Repository, tip: pygit2.Commit | None, findings: list[Finding],
            identity: BotIdentity) -> pygit2.Oid:
    """A commit whose tree is the tip's tree plus one new file per finding; refs untouched."""
    index = pygit2.Index()  # in memory: no worktree, and the repository's own index is not involved
    if tip is not None:
        index.read_tree(tip.tree)
    for finding in findings:
        blob = repo.create_blob(finding.to_json(pretty=True).encode())
        index.add(pygit2.IndexEntry(finding_path(finding.id), blob, FileMode.BLOB))
    tree = index.write_tree(repo)
    signature = identity.signature()
    noun = "finding" if len(findings) == 1 else "findings"
    message = format_message(f"infrarsi bank: add {len(findings)} {noun}", {"InfraRSI-Bank-Added": str(len(findings))})
    return repo.create_commit(None, signature, signature, message, tree, [tip.id] if tip is not None else [])


def _push(remote: pygit2.Remote, branch: str, callbacks: SyncCallbacks) -> str | None:
    """Push the local branch; None when accepted, else why the remote refused (it moved, usually)."""
    ref = f"refs/heads/{branch}"
    callbacks.rejected.clear()
    try:
        remote.push([f"{ref}:{ref}"], callbacks=callbacks)
    except pygit2.GitError as exc:
        if any(marker in str(exc).lower() for marker in _STALE):
            return str(exc)
        raise BankSyncError(f"could not push {branch} to {remote.url}: {exc}") from exc
    return callbacks.rejected.get(ref)


def sync(bank: Bank, repo_path: Path | str, remote: str = "origin", branch: str = DEFAULT_BRANCH,
         identity: BotIdentity = BOT_IDENTITY, *, credentials: CredentialSource | None = None,
         max_attempts: int = 5, max_credential_attempts: int = 3) -> SyncReport:
    """Make ``bank`` and ``remote``'s ``branch`` both hold the union of their findings.

    ``remote`` is the name of a remote of the repository at ``repo_path``, a
    URL, or the path of a (bare) repository. Findings on the branch that the
    bank lacks are imported first (so they are kept even if the push fails),
    then one commit adds the bank's findings the branch lacks. If the remote
    branch moved between our fetch and our push, the round is redone, at most
    ``max_attempts`` times, with a short random back-off so two syncing
    clusters do not keep colliding.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    repo = open_main_repository(repo_path)
    local_ref = f"refs/heads/{branch}"
    if not repo.head_is_unborn and not repo.head_is_detached and repo.head.name == local_ref:
        raise BankSyncError(f"{branch} is checked out in {repo.workdir or repo.path}; the bank branch is written "
                            "without a worktree, so check out another branch first")
    git_remote, tracking = _resolve_remote(repo, remote, branch)
    callbacks = SyncCallbacks(credentials, max_credential_attempts=max_credential_attempts)
    imported = 0
    last_refusal = ""
    for attempt in range(1, max_attempts + 1):
        tip = _fetch(repo, git_remote, branch, tracking, callbacks)
        entries, skipped = _remote_entries(repo, tip)
        have = bank.ids()
        imported += bank.add_many(read_remote_findings(repo, entries, set(entries) - have, skipped))
        outgoing = [f for f in bank.findings() if f.id not in entries]
        if not outgoing:
            if tip is not None:
                _set_ref(repo, local_ref, tip.id)
            return SyncReport(remote=remote, branch=branch, imported=imported, exported=0,
                              remote_findings=len(entries), commit=str(tip.id) if tip is not None else None,
                              pushed=False, attempts=attempt, skipped=tuple(skipped))
        commit = _commit(repo, tip, outgoing, identity)
        _set_ref(repo, local_ref, commit)
        refusal = _push(git_remote, branch, callbacks)
        if refusal is None:
            _set_ref(repo, tracking, commit)
            return SyncReport(remote=remote, branch=branch, imported=imported, exported=len(outgoing),
                              remote_findings=len(entries) + len(outgoing), commit=str(commit), pushed=True,
                              attempts=attempt, skipped=tuple(skipped))
        last_refusal = refusal
        if attempt < max_attempts:
            time.sleep(random.uniform(0.0, 0.05 * 2**attempt))
    raise BankSyncError(f"the remote refused {branch} {max_attempts} times (last: {last_refusal}); if others are "
                        "syncing right now, run `infrarsi bank sync` again; otherwise check that the branch "
                        "may be pushed to (branch protection, hooks)")
