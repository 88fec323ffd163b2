"""The lock: sha256 of the contract and every locked file, data identified, and each way a tree stops matching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infrarsi.contract import load_contract
from infrarsi.contract.errors import ContractError
from infrarsi.contract.lock import (DATA_HASH_LIMIT, LOCK_FILE, Lock, data_identity, locked_files, read_lock,
                                    take_lock, verify_lock, write_lock)
from tests.support.contracts import write_contract


def test_a_fresh_lock_matches_and_round_trips(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    path = write_lock(contract)
    assert path == tmp_path / LOCK_FILE
    lock = read_lock(tmp_path)
    assert lock == take_lock(contract)
    assert lock.contract_path == "infrarsi.toml" and [f for f, _ in lock.files] == ["harness.py"]
    assert json.loads(lock.to_json())["files"] == {"harness.py": dict(lock.files)["harness.py"]}
    assert verify_lock(contract, lock) == []
    assert locked_files(contract) == ["harness.py"]


def test_each_change_is_a_violation(tmp_path: Path) -> None:
    contract = write_contract(tmp_path, "")
    lock = take_lock(contract)
    (tmp_path / "harness.py").write_text("changed\n")
    (tmp_path / "infrarsi.toml").write_text((tmp_path / "infrarsi.toml").read_text() + "\n# note\n")
    reasons = [str(v) for v in verify_lock(contract, lock)]
    assert reasons[0].startswith("infrarsi.toml: the contract changed since the lock was taken")
    assert reasons[1].startswith("harness.py: locked file changed (sha256 ")
    (tmp_path / "harness.py").unlink()
    assert "harness.py: locked file is missing" in [str(v) for v in verify_lock(contract, lock)]


def test_a_new_file_under_a_locked_pattern_and_a_worktree_checked_in_place(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write_contract(root)
    (root / "infrarsi.toml").write_text((root / "infrarsi.toml").read_text().replace('locked = ["harness.py"]',
                                                                                     'locked = ["h*.py"]'))
    contract = load_contract(root)
    lock = take_lock(contract)
    (root / "helpers.py").write_text("")
    assert [str(v) for v in verify_lock(contract, lock)] == ["helpers.py: new file under a locked path"]
    tree = tmp_path / "wt"
    tree.mkdir()
    (tree / "harness.py").write_text("edited in the trial\n")
    assert [str(v)[:39] for v in verify_lock(contract, lock, tree)] == ["harness.py: locked file changed (sha256"]


def test_data_is_identified_small_by_hash_large_by_size_and_mtime(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"a")
    contract = write_contract(tmp_path, '\n[data]\npaths = ["data"]\n')
    lock = take_lock(contract)
    assert dict(lock.data)["data/a.bin"].startswith("sha256:")
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(DATA_HASH_LIMIT + 1)
    assert data_identity(big).startswith(f"size:{DATA_HASH_LIMIT + 1};mtime_ns:")
    (tmp_path / "data" / "a.bin").write_bytes(b"b")
    (tmp_path / "data" / "new.bin").write_bytes(b"n")
    reasons = [str(v) for v in verify_lock(contract, lock)]
    assert reasons[0].startswith("data/a.bin: data file changed (sha256:")
    assert reasons[1] == "data/new.bin: new file under a data path (rerun `infrarsi lock` if intended)"


def test_read_lock_refusals(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="no lock file; run `infrarsi init`"):
        read_lock(tmp_path)
    (tmp_path / LOCK_FILE).write_text("{}")
    with pytest.raises(ContractError, match="not a valid lock file"):
        read_lock(tmp_path)
    lock = Lock(version=9, contract_path="infrarsi.toml", contract_sha256="0", files=())
    (tmp_path / LOCK_FILE).write_text(lock.to_json())
    with pytest.raises(ContractError, match="version: expected 1, got 9"):
        read_lock(tmp_path)
