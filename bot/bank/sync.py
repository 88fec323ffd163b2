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

No worktree and no ``git`` subprocess: the branch is written with git objects
(:func:`bot.workspace.trees.commit_files`). The user's branches, index and
working tree are never touched; only ``refs/heads/infrarsi/experience`` (which
``infrarsi gc`` protects) and its remote-tracking ref are updated.

Credentials for real remotes: pass ``credentials``, a callable
``(url, username_from_url, allowed_types) -> credential`` (see
:mod:`bot.workspace.remotes`); without one, SSH remotes use the ssh-agent.
Refused credentials are retried at most ``max_credential_attempts`` times.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from bot.workspace.naming import EXPERIENCE_BRANCH
from bot.workspace.commits import BOT_IDENTITY, BotIdentity, format_message
from bot.workspace.errors import RemoteError
from bot.workspace.refs import head_branch, main_repository_dir, set_ref, ref_tip
from bot.workspace.remotes import CredentialSource, Credentials, fetch, push, remote_names
from bot.workspace.trees import commit_files, list_files, read_blob
from infrarsi.bank import Bank, Finding

__all__ = [
    "DEFAULT_BRANCH",
    "FINDINGS_DIR",
    "BankSyncError",
    "SyncReport",
    "finding_path",
    "read_remote_findings",
    "sync",
]

DEFAULT_BRANCH = EXPERIENCE_BRANCH
FINDINGS_DIR = "findings"
_ID = re.compile(r"[0-9a-f]{64}")
# libgit2's wordings for "the remote has commits you have not fetched" (local and smart transports).
_STALE = ("not present locally", "non-fastforward", "non-fast-forward", "fast-forward", "fetch first",
          "stale info", "rejected", "failed to update ref")


class BankSyncError(RemoteError):
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


def finding_path(finding_id: str) -> str:
    """``findings/<id[:2]>/<id>.json``: two-level fan-out keeps trees small as the bank grows."""
    return f"{FINDINGS_DIR}/{finding_id[:2]}/{finding_id}.json"


def _resolve_remote(repo: Path, remote: str, branch: str) -> tuple[str, str]:
    """A configured remote's name, or the URL of a URL or local path; and its tracking ref."""
    names = remote_names(repo)
    if remote in names:
        return remote, f"refs/remotes/{remote}/{branch}"
    path = Path(remote).expanduser()
    if path.exists():
        url = str(path.resolve())
    elif "://" in remote or re.match(r"^[\w.-]+@[\w.-]+:", remote):
        url = remote
    else:
        raise BankSyncError(f"{remote!r} is neither a remote of this repository "
                            f"({', '.join(names) or 'it has none'}) nor a URL or an existing path")
    key = hashlib.sha256(url.encode()).hexdigest()[:12]
    return url, f"refs/infrarsi/bank-sync/{key}/{branch}"


def _fetch(repo: Path, remote: str, branch: str, tracking: str, callbacks: Credentials) -> str | None:
    """The remote branch's tip, fetched; None if the remote has no such branch (yet)."""
    set_ref(repo, tracking, None)  # a stale tracking ref must not pass for a branch deleted remotely
    try:
        fetch(repo, remote, [f"+refs/heads/{branch}:{tracking}"], callbacks=callbacks,
              message=f"infrarsi bank sync: fetch {branch}")
    except BankSyncError:
        raise
    except RemoteError as exc:
        raise BankSyncError(f"could not fetch {branch}: {exc}") from exc
    return ref_tip(repo, tracking)


def _remote_entries(repo: Path, tip: str | None) -> tuple[dict[str, str], list[str]]:
    """``{finding id: blob id}`` of the files on the branch, and the paths under findings/ that are not
    finding files."""
    entries: dict[str, str] = {}
    skipped: list[str] = []
    for path, blob in sorted(list_files(repo, tip).items()):
        parts = path.split("/")
        if parts[0] != FINDINGS_DIR:
            continue
        stem = parts[-1].removesuffix(".json")
        if len(parts) == 3 and parts[2].endswith(".json") and _ID.fullmatch(stem) and stem[:2] == parts[1]:
            entries[stem] = blob
        else:
            skipped.append(path)
    return entries, skipped


def read_remote_findings(repo: Path, entries: dict[str, str], wanted: set[str], skipped: list[str]) -> list[Finding]:
    """Parse the ``wanted`` files; one that does not hold the finding its name promises is skipped."""
    out: list[Finding] = []
    for finding_id in sorted(wanted):
        path = finding_path(finding_id)
        try:
            finding = Finding.from_json(read_blob(repo, entries[finding_id]))
        except (ValueError, UnicodeDecodeError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if finding.id != finding_id:
            skipped.append(f"{path}: holds finding {finding.id}")
            continue
        out.append(finding)
    return out


def _commit(repo: Path, tip: str | None, findings: list[Finding], identity: BotIdentity) -> str:
    """A commit whose tree is the tip's tree plus one new file per finding; refs untouched."""
    noun = "finding" if len(findings) == 1 else "findings"
    message = format_message(f"infrarsi bank: add {len(findings)} {noun}", {"InfraRSI-Bank-Added": str(len(findings))})
    sha, _ = commit_files(repo, tree=tip, files={finding_path(f.id): f.to_json(pretty=True).encode() for f in findings},
                          parents=[tip] if tip is not None else [], message=message, identity=identity)
    return sha


def _push(repo: Path, remote: str, branch: str, callbacks: Credentials) -> str | None:
    """Push the local branch; None when accepted, else why the remote refused (it moved, usually)."""
    ref = f"refs/heads/{branch}"
    try:
        rejected = push(repo, remote, [f"{ref}:{ref}"], callbacks=callbacks)
    except RemoteError as exc:
        if callbacks.attempts <= callbacks.max_attempts and any(m in str(exc).lower() for m in _STALE):
            return str(exc)
        raise BankSyncError(f"could not push {branch}: {exc}") from exc
    return rejected.get(ref)


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
    repo = main_repository_dir(repo_path)
    local_ref = f"refs/heads/{branch}"
    if head_branch(repo) == branch:
        raise BankSyncError(f"{branch} is checked out in {repo}; the bank branch is written "
                            "without a worktree, so check out another branch first")
    git_remote, tracking = _resolve_remote(repo, remote, branch)
    callbacks = Credentials(credentials, max_attempts=max_credential_attempts,
                            hint="check the token or key you gave (or the ssh-agent) and that it may push to the "
                                 "experience branch")
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
                set_ref(repo, local_ref, tip)
            return SyncReport(remote=remote, branch=branch, imported=imported, exported=0,
                              remote_findings=len(entries), commit=tip, pushed=False, attempts=attempt,
                              skipped=tuple(skipped))
        commit = _commit(repo, tip, outgoing, identity)
        set_ref(repo, local_ref, commit)
        refusal = _push(repo, git_remote, branch, callbacks)
        if refusal is None:
            set_ref(repo, tracking, commit)
            return SyncReport(remote=remote, branch=branch, imported=imported, exported=len(outgoing),
                              remote_findings=len(entries) + len(outgoing), commit=commit, pushed=True,
                              attempts=attempt, skipped=tuple(skipped))
        last_refusal = refusal
        if attempt < max_attempts:
            time.sleep(random.uniform(0.0, 0.05 * 2**attempt))
    raise BankSyncError(f"the remote refused {branch} {max_attempts} times (last: {last_refusal}); if others are "
                        "syncing right now, run `infrarsi bank sync` again; otherwise check that the branch "
                        "may be pushed to (branch protection, hooks)")
