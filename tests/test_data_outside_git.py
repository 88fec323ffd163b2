"""Data outside git: named in the contract, identified in the lock, linked (never copied) into trial worktrees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.workspace.worktrees import link_data
from infrarsi.contract.load import load_contract
from tests.support.repos import git_commit_tree

pytestmark = pytest.mark.side_by_side  # its checks time nothing: CI runs it beside other tests (./dev)

INFRARSI = [sys.executable, "-m", "bot"]

JOB = textwrap.dedent('''
    """Reads its git-ignored dataset, keeps a cache next to it, prints one line per step."""
    import argparse, os
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=8)
    p.add_argument("--overwrite", type=int, default=0)
    a = p.parse_args()
    data = open(os.path.join("data", "corpus", "train.txt")).read()
    with open(os.path.join("data", "corpus", "cache.idx"), "w") as f:
        f.write(str(len(data)))
    if a.overwrite:
        with open(os.path.join("data", "corpus", "train.txt"), "w") as f:
            f.write("clobbered")
    for step in range(a.steps):
        print(f"step {step} loss {len(data) / (step + 1):.4f}", flush=True)
''')


def _repo(tmp_path: Path, overwrite: int = 0) -> Path:
    root = tmp_path / "repo"
    (root / "data" / "corpus").mkdir(parents=True)
    (root / "train.py").write_text(JOB)
    (root / ".gitignore").write_text("data/corpus/\n")
    (root / "data" / "corpus" / "train.txt").write_text("the quick brown fox " * 50)
    (root / "data" / "corpus" / "vocab.json").write_text(json.dumps({"a": 1}))
    git_commit_tree(root, "job")
    out = subprocess.run(INFRARSI + ["init", str(root), "--command",
                                     f"python train.py --steps 6 --overwrite {overwrite}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return root


def test_init_names_ignored_data_and_locks_its_identity(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    contract = load_contract(root)
    assert contract.data.paths == ("data/corpus",)
    lock = json.loads((root / "infrarsi.lock").read_text())
    assert set(lock["data"]) == {"data/corpus/train.txt", "data/corpus/vocab.json"}
    assert all(v.startswith("sha256:") for v in lock["data"].values())
    ok = subprocess.run(INFRARSI + ["check", str(root)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def test_a_changed_byte_in_the_dataset_fails_check_and_names_it(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    f = root / "data" / "corpus" / "train.txt"
    raw = bytearray(f.read_bytes())
    raw[10] ^= 1
    f.write_bytes(bytes(raw))
    out = subprocess.run(INFRARSI + ["check", str(root)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "data/corpus/train.txt: data file changed" in out.stderr


def test_large_files_are_identified_by_size_and_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infrarsi.contract import lock as lock_module

    monkeypatch.setattr(lock_module, "DATA_HASH_LIMIT", 10)
    f = tmp_path / "big.bin"
    f.write_bytes(b"x" * 100)
    before = lock_module.data_identity(f)
    assert before.startswith("size:100;mtime_ns:")
    os.utime(f, ns=(1, 1))
    assert lock_module.data_identity(f) != before


@pytest.mark.slow
def test_trial_reaches_the_data_through_links_and_never_writes_into_it(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    out = subprocess.run(INFRARSI + ["trial", str(root), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["outcome"] == "ok"
    # the job's cache landed in the worktree, not next to the original data
    assert sorted(p.name for p in (root / "data" / "corpus").iterdir()) == ["train.txt", "vocab.json"]
    assert subprocess.run(INFRARSI + ["check", str(root)], capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_trial_that_overwrites_data_through_a_link_is_invalid_and_named(tmp_path: Path) -> None:
    root = _repo(tmp_path, overwrite=1)
    out = subprocess.run(INFRARSI + ["trial", str(root), "--json"], capture_output=True, text=True)
    record = json.loads(out.stdout)
    assert record["outcome"] == "invalid"
    assert "data/corpus/train.txt" in record["reason"]


def test_link_data_mirrors_directories_and_keeps_tracked_files(tmp_path: Path) -> None:
    origin, tree = tmp_path / "origin", tmp_path / "tree"
    (origin / "d" / "sub").mkdir(parents=True)
    (origin / "d" / "sub" / "a.bin").write_bytes(b"a")
    (origin / "d" / "README").write_text("original")
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "README").write_text("tracked copy")
    assert link_data(origin, tree, ("d",)) == 1
    assert (tree / "d" / "sub" / "a.bin").is_symlink()
    assert not (tree / "d" / "sub").is_symlink()
    assert (tree / "d" / "README").read_text() == "tracked copy"


PARENT_JOB = textwrap.dedent('''
    """Reads its dataset from next to the repo, as pytorch/examples' jobs do with `datasets.MNIST('../data')`."""
    import argparse, os
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=8)
    p.add_argument("--data", default="../data")
    a = p.parse_args()
    data = open(os.path.join(a.data, "train.txt")).read()
    with open(os.path.join(a.data, "cache.idx"), "w") as f:
        f.write(str(len(data)))
    for step in range(a.steps):
        print(f"step {step} loss {len(data) / (step + 1):.4f}", flush=True)
''')


def _parent_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.txt").write_text("the quick brown fox " * 50)
    (tmp_path / "outputs").mkdir()  # what a job writes next to the repo is not data
    (root / "train.py").write_text(PARENT_JOB.replace('"../data")', '"../data")  # also ../outputs'))
    git_commit_tree(root, "job")
    out = subprocess.run(INFRARSI + ["init", str(root), "--command", "python train.py --steps 6"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return root


def test_init_names_data_one_level_above_the_repo_and_locks_it(tmp_path: Path) -> None:
    root = _parent_repo(tmp_path)
    assert load_contract(root).data.paths == ("../data",)
    lock = json.loads((root / "infrarsi.lock").read_text())
    assert set(lock["data"]) == {"../data/train.txt"}


@pytest.mark.parametrize("path", ["../../data", "../data/../../x", "/abs/data"])
def test_data_paths_further_than_one_level_up_are_refused_with_the_way_out(tmp_path: Path, path: str) -> None:
    root = _parent_repo(tmp_path)
    text = (root / "infrarsi.toml").read_text().replace('paths = ["../data"]', f'paths = ["{path}"]')
    (root / "infrarsi.toml").write_text(text)
    out = subprocess.run(INFRARSI + ["check", str(root)], capture_output=True, text=True)
    assert out.returncode != 0
    assert "one level above it" in out.stderr and "absolute path" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_trial_reads_data_above_the_repo_through_links_in_the_worktrees_directory(tmp_path: Path) -> None:
    root = _parent_repo(tmp_path)
    out = subprocess.run(INFRARSI + ["trial", str(root), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["outcome"] == "ok"
    # the cache the job wrote stayed on InfraRSI's side of the link, the original directory is untouched
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["train.txt"]
    assert subprocess.run(INFRARSI + ["check", str(root)], capture_output=True).returncode == 0


def test_gc_keeps_the_links_to_data_above_the_repo_and_says_what_they_are(tmp_path: Path) -> None:
    from infrarsi.rundir import worktrees_dir

    root = _parent_repo(tmp_path)
    links = worktrees_dir(root)
    link_data(root, links / "run-1", ("../data",))  # as a trial's worktree there makes them
    out = subprocess.run(INFRARSI + ["gc", str(root)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "links to the contract's data path ../data, shared by every trial" in out.stdout
    assert "not a git worktree" not in out.stdout
    assert (links / "data" / "train.txt").is_symlink()
