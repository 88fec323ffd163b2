"""``infrarsi.lock``: the sha256 of every locked file and of the contract itself.

Taken by ``infrarsi init`` (or ``infrarsi lock``), checked by ``infrarsi check``
and by every trial before it starts and after it ends. A lock that does not
match the tree is how a candidate that "won" by changing the task is caught.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import contract_table, find_contract
from infrarsi.contract.model import Contract
from infrarsi.contract.scope import expand_locked

LOCK_FILE = "infrarsi.lock"
LOCK_VERSION = 1
# Data files up to this size are identified by their sha256; larger ones (dataset shards) by size and
# modification time (hashing a 100 GB dataset before every trial is not an option).
DATA_HASH_LIMIT = 8 * 2**20
DATA_FILES_LIMIT = 100_000


@dataclass(frozen=True, kw_only=True, slots=True)
class Lock:
    """What the tree looked like when the contract was locked."""

    version: int = LOCK_VERSION
    contract_path: str
    contract_sha256: str
    files: tuple[tuple[str, str], ...]  # (repo-relative path, sha256), sorted
    data: tuple[tuple[str, str], ...] = ()  # (repo-relative data file, "sha256:…" or "size:…;mtime_ns:…"), sorted

    def to_json(self) -> str:
        body: dict[str, Any] = {"version": self.version,
                                "contract": {"path": self.contract_path, "sha256": self.contract_sha256},
                                "files": dict(self.files)}
        if self.data:
            body["data"] = dict(self.data)
        return json.dumps(body, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True, kw_only=True, slots=True)
class LockViolation:
    """One way the tree no longer matches its lock."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def contract_sha256(root: Path) -> tuple[str, str]:
    """(path, digest) of the contract. In pyproject.toml only the ``[tool.infrarsi]`` table counts,
    so that unrelated edits to the project metadata do not break the lock."""
    path, prefix = find_contract(root)
    rel = path.relative_to(root).as_posix()
    if not prefix:
        return rel, sha256_file(path)
    canonical = json.dumps(contract_table(path, prefix), sort_keys=True, default=str).encode()
    return f"{rel}#{prefix}", hashlib.sha256(canonical).hexdigest()


def locked_files(contract: Contract, root: Path | None = None) -> list[str]:
    """Repo-relative paths of every file the contract locks, in ``root`` (default: the contract's)."""
    tree = root or contract.root
    files = {f for matches in expand_locked(tree, contract.scope.locked).values() for f in matches}
    return sorted(files)


def data_files(root: Path, paths: tuple[str, ...]) -> list[str]:
    """Every file under the contract's data paths (links followed), repo-relative, sorted."""
    out: set[str] = set()
    for p in paths:
        top = root / p
        if top.is_file():
            out.add(p)
            continue
        for dirpath, _dirs, names in os.walk(top, followlinks=True):
            for name in names:
                out.add((Path(dirpath) / name).relative_to(root).as_posix())
            if len(out) > DATA_FILES_LIMIT:
                raise ContractError(str(root / p), "data.paths", f"more than {DATA_FILES_LIMIT} files under {p!r}; "
                                    "name the directories the job reads")
    return sorted(out)


def data_identity(path: Path) -> str:
    """A small file's sha256, or a large file's size and modification time."""
    st = path.stat()
    if st.st_size <= DATA_HASH_LIMIT:
        return "sha256:" + sha256_file(path)
    return f"size:{st.st_size};mtime_ns:{st.st_mtime_ns}"


def take_lock(contract: Contract) -> Lock:
    root = contract.root
    path, digest = contract_sha256(root)
    files = tuple((f, sha256_file(root / f)) for f in locked_files(contract))
    data = tuple((f, data_identity(root / f)) for f in data_files(root, contract.data.paths))
    return Lock(contract_path=path, contract_sha256=digest, files=files, data=data)


def write_lock(contract: Contract) -> Path:
    target = contract.root / LOCK_FILE
    target.write_text(take_lock(contract).to_json(), encoding="utf-8")
    return target


def read_lock(root: Path) -> Lock:
    path = root / LOCK_FILE
    if not path.is_file():
        raise ContractError(str(path), "", "no lock file; run `infrarsi init` (or `infrarsi lock`) to take one")
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        contract = data["contract"]
        lock = Lock(version=int(data["version"]), contract_path=str(contract["path"]),
                    contract_sha256=str(contract["sha256"]),
                    files=tuple(sorted((str(k), str(v)) for k, v in dict(data["files"]).items())),
                    data=tuple(sorted((str(k), str(v)) for k, v in dict(data.get("data", {})).items())))
    except (ValueError, KeyError, TypeError) as e:
        raise ContractError(str(path), "", f"not a valid lock file ({e!r}); rerun `infrarsi lock`") from None
    if lock.version != LOCK_VERSION:
        raise ContractError(str(path), "version", f"expected {LOCK_VERSION}, got {lock.version}")
    return lock


def verify_lock(contract: Contract, lock: Lock, tree: Path | None = None) -> list[LockViolation]:
    """Every difference between ``tree`` (default: the contract's root) and the lock; empty when intact.

    Locked files are checked in ``tree`` (a trial's worktree); the contract is
    checked where it governs the run, in the contract's own root.
    """
    root = tree or contract.root
    out: list[LockViolation] = []
    try:
        path, digest = contract_sha256(contract.root)
    except ContractError as e:
        return [LockViolation(path=lock.contract_path, reason=f"contract missing ({e.message})")]
    if path != lock.contract_path or digest != lock.contract_sha256:
        out.append(LockViolation(path=path, reason="the contract changed since the lock was taken "
                                 "(rerun `infrarsi lock` if the change is intended)"))
    expected = dict(lock.files)
    for rel, want in sorted(expected.items()):
        f = root / rel
        if not f.is_file():
            out.append(LockViolation(path=rel, reason="locked file is missing"))
        elif (got := sha256_file(f)) != want:
            out.append(LockViolation(path=rel, reason=f"locked file changed (sha256 {got[:12]}…, "
                                     f"locked {want[:12]}…)"))
    for rel in locked_files(contract, root):
        if rel not in expected:
            out.append(LockViolation(path=rel, reason="new file under a locked path"))
    out += _verify_data(contract, lock)
    return out


def _verify_data(contract: Contract, lock: Lock) -> list[LockViolation]:
    """Data is checked at its origin (trial worktrees only link to it)."""
    root = contract.root
    out: list[LockViolation] = []
    expected = dict(lock.data)
    try:
        present = data_files(root, contract.data.paths) if all((root / p).exists() for p in contract.data.paths) \
            else [f for f in expected if (root / f).is_file()]
    except ContractError as e:
        return [LockViolation(path="data.paths", reason=e.message)]
    for rel, want in sorted(expected.items()):
        f = root / rel
        if not f.is_file():
            out.append(LockViolation(path=rel, reason="data file is missing"))
        elif (got := data_identity(f)) != want:
            out.append(LockViolation(path=rel, reason=f"data file changed ({got[:40]}, locked {want[:40]})"))
    for rel in present:
        if rel not in expected:
            out.append(LockViolation(path=rel, reason="new file under a data path (rerun `infrarsi lock` if intended)"))
    return out
