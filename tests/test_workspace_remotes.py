"""Remotes: fetch and push through a local bare remote, rejected refs reported, credentials bounded and hidden."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from pygit2.enums import CredentialType

from bot.workspace.errors import RemoteError
from bot.workspace.refs import branch_tip, init_repository, ref_tip
from bot.workspace.remotes import (Credentials, add_remote, fetch, fetch_branches, list_heads, push, remote_names,
                                   strip_auth, token_credentials)
from tests.support.repos import commit_all, init_repo


def test_strip_auth() -> None:
    assert strip_auth("https://user:tok@github.com/o/r.git") == "https://github.com/o/r.git"
    assert strip_auth("https://github.com/o/r.git") == "https://github.com/o/r.git"
    assert strip_auth("/srv/remote.git") == "/srv/remote.git"


def test_push_fetch_and_list_through_a_bare_remote(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    sha = init_repo(root, {"a.py": "x = 1\n"})
    remote = init_repository(tmp_path / "remote.git", bare=True)
    add_remote(root, "origin", str(remote))
    assert remote_names(root) == ["origin"]
    assert push(root, "origin", ["refs/heads/main:refs/heads/main"]) == {}
    assert branch_tip(remote, "main") == sha
    assert list_heads(root, str(remote)) == {"HEAD": sha, "refs/heads/main": sha}
    clone = tmp_path / "clone"
    init_repository(clone)
    fetch(clone, str(remote), ["+refs/heads/main:refs/remotes/up/main"])  # a path works as the remote
    assert ref_tip(clone, "refs/remotes/up/main") == sha
    add_remote(clone, "origin", str(remote))
    fetch_branches(clone, "origin", ["main", "no-such-branch"])  # best effort: the missing one is skipped
    assert ref_tip(clone, "refs/remotes/origin/main") == sha


def test_a_non_fast_forward_push_is_refused(tmp_path: Path) -> None:
    remote = init_repository(tmp_path / "remote.git", bare=True)
    a, b = tmp_path / "a", tmp_path / "b"
    init_repo(a, {"a.py": "1\n"})
    init_repo(b, {"b.py": "2\n"})
    push(a, str(remote), ["refs/heads/main:refs/heads/main"])
    (b / "b.py").write_text("3\n")
    commit_all(b, "more")
    try:
        rejected = push(b, str(remote), ["refs/heads/main:refs/heads/main"])
    except RemoteError as exc:
        assert "push to" in str(exc) and "failed" in str(exc)
    else:
        assert list(rejected) == ["refs/heads/main"]


def test_a_missing_remote_is_a_remote_error(tmp_path: Path) -> None:
    init_repo(tmp_path / "repo", {"a.py": "1\n"})
    with pytest.raises(RemoteError, match="could not fetch from"):
        fetch(tmp_path / "repo", str(tmp_path / "absent.git"), ["refs/heads/main"])
    with pytest.raises(RemoteError, match="could not list the refs of"):
        list_heads(tmp_path / "repo", str(tmp_path / "absent.git"))


def test_credentials_are_bounded_and_never_name_the_token() -> None:
    creds = Credentials(token_credentials("s3cret"), max_attempts=2, hint="check GITHUB_TOKEN")
    url = "https://x:s3cret@github.com/o/r.git"
    for _ in range(2):
        assert isinstance(creds.credentials(url, None, CredentialType.USERPASS_PLAINTEXT), pygit2.UserPass)
    with pytest.raises(RemoteError) as info:
        creds.credentials(url, None, CredentialType.USERPASS_PLAINTEXT)
    assert str(info.value) == "authentication to https://github.com/o/r.git failed 2 times; check GITHUB_TOKEN"
    with pytest.raises(RemoteError, match="does not accept token"):
        token_credentials("t")("ssh://git@h/r", "git", CredentialType.SSH_KEY)
    with pytest.raises(RemoteError, match="asks for credentials"):
        Credentials().credentials("https://h/r", None, CredentialType.USERPASS_PLAINTEXT)
    assert isinstance(Credentials().credentials("ssh://h/r", "git", CredentialType.SSH_KEY), pygit2.KeypairFromAgent)
    creds.push_update_reference("refs/heads/a", None)
    creds.push_update_reference("refs/heads/b", "non-fast-forward")
    assert creds.rejected == {"refs/heads/b": "non-fast-forward"}
