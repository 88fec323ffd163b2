"""Fetching and pushing: every transfer between a repository and a remote goes through here.

A remote is named by a configured remote's name or by a URL or path (an
anonymous remote). libgit2 calls the credentials callback again after every
refused attempt, forever; :class:`Credentials` gives up after ``max_attempts``
with a :class:`RemoteError` instead of hanging, and records the remote's
verdict on each pushed ref.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import CredentialType

from bot.workspace._access import open_repository
from bot.workspace.errors import RemoteError

__all__ = ["CredentialSource", "Credentials", "add_remote", "fetch", "fetch_branches", "list_heads", "push",
           "remote_names", "strip_auth", "token_credentials"]

# (url, username from the url, allowed credential types) -> a pygit2 credential
CredentialSource = Callable[[str, str | None, CredentialType], Any]


def strip_auth(url: str) -> str:
    """``url`` without a ``user:token@`` part, for messages."""
    scheme, sep, rest = url.partition("://")
    return scheme + sep + rest.split("@", 1)[-1] if sep else url


def token_credentials(token: str, *, username: str = "x-access-token") -> CredentialSource:
    """User/password credentials carrying ``token`` (GitHub's HTTPS pushes); refuses other schemes."""

    def source(url: str, username_from_url: str | None, allowed_types: CredentialType) -> Any:
        if not allowed_types & CredentialType.USERPASS_PLAINTEXT:
            raise RemoteError(f"{strip_auth(url)} does not accept token (user/password) authentication")
        return pygit2.UserPass(username, token)

    return source


class Credentials(pygit2.RemoteCallbacks):
    """Credentials with a bound on retries, and the remote's verdict on each pushed ref.

    ``source`` answers libgit2's credential requests; without one an SSH remote
    gets the ssh-agent. ``hint`` ends the message of an authentication failure
    (what the user should check).
    """

    def __init__(self, source: CredentialSource | None = None, *, max_attempts: int = 3, hint: str = "") -> None:
        super().__init__()
        self.source, self.max_attempts, self.hint = source, max_attempts, hint
        self.attempts = 0
        self.rejected: dict[str, str] = {}

    def credentials(self, url: str, username_from_url: str | None, allowed_types: CredentialType) -> Any:
        self.attempts += 1
        if self.attempts > self.max_attempts:
            raise RemoteError(f"authentication to {strip_auth(url)} failed {self.max_attempts} times"
                              + (f"; {self.hint}" if self.hint else ""))
        if self.source is not None:
            return self.source(url, username_from_url, allowed_types)
        if allowed_types & CredentialType.SSH_KEY:
            return pygit2.KeypairFromAgent(username_from_url or "git")
        raise RemoteError(f"{strip_auth(url)} asks for credentials; pass a token or user/password credential "
                          "or use an SSH remote with a key in the ssh-agent")

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.rejected[refname] = message


def _remote(git: pygit2.Repository, remote: str) -> pygit2.Remote:
    if remote in set(git.remotes.names()):
        return git.remotes[remote]
    return git.remotes.create_anonymous(remote)


def remote_names(repo: Path | str) -> list[str]:
    return list(open_repository(repo).remotes.names())


def add_remote(repo: Path | str, name: str, url: str) -> None:
    open_repository(repo).remotes.create(name, url)


def fetch(repo: Path | str, remote: str, refspecs: Iterable[str], *, callbacks: Credentials | None = None,
          message: str | None = None) -> None:
    """Fetch ``refspecs`` from ``remote`` (a name, URL or path); :class:`RemoteError` with libgit2's reason."""
    git = open_repository(repo)
    handle = _remote(git, remote)
    try:
        handle.fetch(list(refspecs), callbacks=callbacks, message=message)
    except pygit2.GitError as exc:
        raise RemoteError(f"could not fetch from {strip_auth(handle.url or remote)}: {exc}") from exc


def list_heads(repo: Path | str, url: str, *, callbacks: Credentials | None = None) -> dict[str, str]:
    """The refs ``url`` advertises (``git ls-remote``): ref name -> sha; :class:`RemoteError` when refused."""
    try:
        handle = open_repository(repo).remotes.create_anonymous(url)
        return {h.name: str(h.oid) for h in handle.list_heads(callbacks=callbacks) if h.name}
    except pygit2.GitError as exc:
        raise RemoteError(f"could not list the refs of {strip_auth(url)}: {exc}") from exc


def fetch_branches(repo: Path | str, remote: str, branches: Iterable[str]) -> None:
    """Best effort: bring ``branches`` into ``refs/remotes/<remote>/`` (a hosted remote may need
    credentials libgit2 does not have; the caller then works from the local view)."""
    for branch in branches:
        try:
            fetch(repo, remote, [f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"])
        except (RemoteError, KeyError, IndexError, pygit2.GitError):
            pass


def push(repo: Path | str, remote: str, refspecs: Iterable[str], *,
         callbacks: Credentials | None = None) -> dict[str, str]:
    """Push ``refspecs`` to ``remote`` (a name, URL or path).

    Returns ``{refname: reason}`` for each ref the remote refused (empty when it
    took them all); a failed transfer raises :class:`RemoteError` whose message
    holds libgit2's reason (a stale ref reads "non-fast-forward" or "fetch first").
    """
    git = open_repository(repo)
    handle = _remote(git, remote)
    callbacks = callbacks if callbacks is not None else Credentials()
    callbacks.rejected.clear()
    try:
        handle.push(list(refspecs), callbacks=callbacks)
    except RemoteError:
        raise
    except (pygit2.GitError, OSError) as exc:
        raise RemoteError(f"push to {strip_auth(handle.url or remote)} failed: {exc}") from exc
    return dict(callbacks.rejected)
