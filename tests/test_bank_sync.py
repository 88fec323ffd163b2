"""Sharing findings through a bare git remote: union, no conflicts, nothing else touched."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

import bot.bank.sync as bank_sync
from bot.bank.sync import DEFAULT_BRANCH, BankSyncError, finding_path, sync
from bot.workspace.errors import RemoteError
from bot.workspace.remotes import Credentials
from tests.support.repos import init_repo
from infrarsi.bank import Finding, SqliteBank
from tests.support.findings import make_finding

_SIG = pygit2.Signature("Tester", "t@example.com", 1_700_000_000, 0)


@dataclass
class Setup:
    remote: Path
    a: Path
    b: Path
    main: str  # the commit main points to everywhere


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    seed = tmp_path / "seed"
    main = init_repo(seed, {"train.py": "print('train')\n"})
    remote = tmp_path / "remote.git"
    pygit2.init_repository(str(remote), bare=True, initial_head="main")
    seed_repo = pygit2.Repository(str(seed))
    seed_repo.remotes.create("origin", str(remote)).push(["refs/heads/main:refs/heads/main"])
    pygit2.clone_repository(str(remote), str(tmp_path / "A"))
    pygit2.clone_repository(str(remote), str(tmp_path / "B"))
    return Setup(remote=remote, a=tmp_path / "A", b=tmp_path / "B", main=main)


def _bank(path: Path) -> SqliteBank:
    return SqliteBank(path / ".infrarsi" / "bank.sqlite")  # .infrarsi/ would be ignored in real use


def _remote_files(remote: Path, branch: str = DEFAULT_BRANCH) -> dict[str, bytes]:
    repo = pygit2.Repository(str(remote))
    tip = repo.references[f"refs/heads/{branch}"].peel(pygit2.Commit)
    out: dict[str, bytes] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            if isinstance(entry, pygit2.Tree):
                walk(entry, f"{prefix}{entry.name}/")
            else:
                out[prefix + entry.name] = entry.data

    walk(tip.tree, "")
    return out


def _history(remote: Path, branch: str = DEFAULT_BRANCH) -> list[pygit2.Commit]:
    repo = pygit2.Repository(str(remote))
    return list(repo.walk(repo.references[f"refs/heads/{branch}"].target))


def _assert_user_state_untouched(s: Setup) -> None:
    assert str(pygit2.Repository(str(s.remote)).references["refs/heads/main"].target) == s.main
    for clone in (s.a, s.b):
        repo = pygit2.Repository(str(clone))
        assert repo.head.name == "refs/heads/main" and str(repo.head.target) == s.main
        assert {p for p in repo.status() if not p.startswith(".infrarsi/")} == set()
        assert not (clone / "findings").exists()


def test_two_clones_converge_to_the_union(setup: Setup) -> None:
    shared = make_finding(99)
    mine = [make_finding(i) for i in range(5)]
    theirs = [make_finding(100 + i) for i in range(5)]
    with _bank(setup.a) as bank_a, _bank(setup.b) as bank_b:
        bank_a.add_many([*mine, shared])
        bank_b.add_many([*theirs, shared])

        r1 = sync(bank_a, setup.a)
        assert (r1.imported, r1.exported, r1.pushed, r1.attempts) == (0, 6, True, 1)
        r2 = sync(bank_b, setup.b)
        assert (r2.imported, r2.exported, r2.pushed, r2.remote_findings) == (5, 5, True, 11)
        r3 = sync(bank_a, setup.a)
        assert (r3.imported, r3.exported, r3.pushed, r3.remote_findings) == (5, 0, False, 11)
        r4 = sync(bank_b, setup.b)
        assert (r4.imported, r4.exported, r4.pushed) == (0, 0, False)

        union = {f.id for f in [*mine, *theirs, shared]}
        assert bank_a.ids() == bank_b.ids() == union
        assert bank_a.findings() == bank_b.findings()

    files = _remote_files(setup.remote)
    assert set(files) == {finding_path(i) for i in union}  # one file per finding, nothing else
    for path, data in files.items():
        assert Finding.from_json(data).id == Path(path).stem
    history = _history(setup.remote)
    assert len(history) == 2 and history[0].parents[0].id == history[1].id and not history[1].parents
    assert r3.commit == r4.commit == str(history[0].id)
    for clone in (setup.a, setup.b):  # the local branch follows, the remote-tracking ref too
        repo = pygit2.Repository(str(clone))
        assert str(repo.references[f"refs/heads/{DEFAULT_BRANCH}"].target) == r3.commit
        assert str(repo.references[f"refs/remotes/origin/{DEFAULT_BRANCH}"].target) == r3.commit
    _assert_user_state_untouched(setup)


def test_nothing_to_share_creates_no_branch(setup: Setup) -> None:
    with _bank(setup.a) as bank:
        report = sync(bank, setup.a)
    assert report.commit is None and not report.pushed
    assert pygit2.Repository(str(setup.remote)).references.get(f"refs/heads/{DEFAULT_BRANCH}") is None


def test_remote_moving_during_push_is_retried(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    with _bank(setup.a) as bank_a, _bank(setup.b) as bank_b:
        bank_a.add(make_finding(1))
        sync(bank_a, setup.a)
        bank_a.add(make_finding(2))
        bank_b.add(make_finding(3))
        real_push = bank_sync._push
        raced: list[str] = []

        def push_after_b(repo, remote, branch, callbacks):  # type: ignore[no-untyped-def]
            if not raced:  # B gets in between A's fetch and A's push, once
                raced.append("B is syncing")
                raced[0] = sync(bank_b, setup.b).commit or ""
            return real_push(repo, remote, branch, callbacks)

        monkeypatch.setattr(bank_sync, "_push", push_after_b)
        report = sync(bank_a, setup.a)
        assert report.pushed and report.attempts == 2 and report.imported == 1
        assert bank_a.ids() == {make_finding(i).id for i in (1, 2, 3)}
    history = [str(c.id) for c in _history(setup.remote)]
    assert len(history) == 3 and raced[0] in history  # B's commit kept: no force push, ever
    assert set(_remote_files(setup.remote)) == {finding_path(make_finding(i).id) for i in (1, 2, 3)}
    _assert_user_state_untouched(setup)


def test_refusals_are_bounded(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_sync, "_push", lambda *a: "rejected: hook declined")
    with _bank(setup.a) as bank:
        bank.add(make_finding(1))
        with pytest.raises(BankSyncError, match="refused infrarsi/experience 2 times"):
            sync(bank, setup.a, max_attempts=2)


def test_foreign_and_damaged_files_are_skipped_and_kept(setup: Setup) -> None:
    # someone commits a README and a damaged finding to the branch
    repo = pygit2.Repository(str(setup.b))
    good, bad = make_finding(1), json.loads(make_finding(2).to_json())
    bad["repo"] = "edited"
    index = pygit2.Index()
    for path, data in {"README.md": b"shared findings\n", finding_path(good.id): good.to_json(pretty=True).encode(),
                       finding_path(bad["id"]): json.dumps(bad).encode(), "findings/zz": b"?"}.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    commit = repo.create_commit(None, _SIG, _SIG, "by hand", index.write_tree(repo), [])
    repo.references.create(f"refs/heads/{DEFAULT_BRANCH}", commit)
    repo.remotes["origin"].push([f"refs/heads/{DEFAULT_BRANCH}:refs/heads/{DEFAULT_BRANCH}"])

    with _bank(setup.a) as bank:
        bank.add(make_finding(3))
        report = sync(bank, setup.a)
        assert bank.ids() == {good.id, make_finding(3).id}
    assert report.imported == 1 and report.exported == 1
    assert any(bad["id"] in s and "does not match" in s for s in report.skipped)
    assert "findings/zz" in report.skipped
    files = _remote_files(setup.remote)
    assert {"README.md", "findings/zz", finding_path(bad["id"])} <= set(files)  # append-only: left alone


def test_sync_with_a_path_or_url_instead_of_a_remote_name(setup: Setup) -> None:
    with _bank(setup.a) as bank:
        bank.add(make_finding(1))
        assert sync(bank, setup.a, str(setup.remote)).pushed
        assert sync(bank, setup.a, setup.remote.as_uri()).exported == 0
        with pytest.raises(BankSyncError, match="neither a remote"):
            sync(bank, setup.a, "upstream")
    assert set(_remote_files(setup.remote)) == {finding_path(make_finding(1).id)}


def test_refuses_when_the_branch_is_checked_out(setup: Setup) -> None:
    repo = pygit2.Repository(str(setup.a))
    repo.references.create(f"refs/heads/{DEFAULT_BRANCH}", repo.head.target)
    repo.set_head(f"refs/heads/{DEFAULT_BRANCH}")
    with _bank(setup.a) as bank, pytest.raises(BankSyncError, match="checked out"):
        sync(bank, setup.a)


def test_credentials_are_bounded() -> None:
    calls: list[str] = []

    def creds(url, user, allowed):  # type: ignore[no-untyped-def]
        calls.append(url)
        return pygit2.UserPass("bot", "wrong-token")

    cb = Credentials(creds, max_attempts=2)
    for _ in range(2):
        assert isinstance(cb.credentials("https://example.invalid/r.git", None,
                                         pygit2.enums.CredentialType.USERPASS_PLAINTEXT), pygit2.UserPass)
    with pytest.raises(RemoteError, match="failed 2 times"):
        cb.credentials("https://example.invalid/r.git", None, pygit2.enums.CredentialType.USERPASS_PLAINTEXT)
    assert len(calls) == 2
    with pytest.raises(RemoteError, match="asks for credentials"):
        Credentials().credentials("https://example.invalid/r.git", None,
                                    pygit2.enums.CredentialType.USERPASS_PLAINTEXT)
