"""Data that is not in git reaches trials: untracked (not ignored) files the job names are drafted into ``[data]``
like ignored ones; ``check`` names the ones ``[data]`` lacks; a crashed trial says which path its worktree lacks.

The forms the path takes are those public repos use: a literal opened from the job's folder (minGPT's chargpt
``open('input.txt')``), ``os.path.join`` of literals and of a module-level name (nanoGPT's
``os.path.join(data_dir, 'train.bin')``), an argparse default (makemore's ``--input-file names.txt``), and a
``data/`` folder beside the script whatever builds the path to it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from bot.stages.init.data_check import missing_in_trial
from bot.workspace import GitWorkspace
from bot.stages.init.path_refs import path_references
from infrarsi.contract.load import load_contract
from tests.support.repos import commit_tree, git

BOT = [sys.executable, "-m", "bot"]

JOB = textwrap.dedent('''
    import argparse, os
    import numpy as np
    data_dir = os.path.join('data', 'corpus')
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", default="tokenizer/vocab.json")
    p.add_argument("--out_dir", default="out")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=8)
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    text = open(os.path.join(data_dir, 'train.txt')).read() + open(a.vocab).read()
    shards = sorted(os.listdir(SHARDS)) if (SHARDS := os.environ.get("SHARDS")) else []
    for step in range(a.steps):
        print(f"step {step} loss {len(text) / (step + 1):.4f}", flush=True)
''')


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "train.py").write_text(JOB)
    (root / ".gitignore").write_text("__pycache__/\n")
    commit_tree(root)
    # what the user downloaded and produced afterwards: nothing of it is tracked, nothing ignored
    for rel, text in {"jobs/data/corpus/train.txt": "abc " * 100, "jobs/tokenizer/vocab.json": "{}",
                      "jobs/out/ckpt.pt": "old", "jobs/notes.md": "todo", "jobs/scratch.py": "x = 1\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_untracked_data_the_job_names_is_drafted_and_what_it_writes_is_not(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    init = subprocess.run(BOT + ["init", str(root), "--command", "cd jobs && python train.py"], capture_output=True,
                          text=True)
    assert init.returncode == 0, init.stderr
    contract = load_contract(root)
    assert set(contract.data.paths) == {"jobs/data", "jobs/tokenizer"}
    text = (root / "infrarsi.toml").read_text()
    assert "jobs/data (untracked, named in jobs/train.py line" in text and "jobs/tokenizer (untracked" in text
    check = subprocess.run(BOT + ["check", str(root)], capture_output=True, text=True)
    assert check.returncode == 0 and "warning" not in check.stdout, check.stdout


def test_check_names_the_untracked_paths_the_job_opens_that_data_lacks(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    subprocess.run(BOT + ["init", str(root), "--command", "cd jobs && python train.py"], check=True,
                   capture_output=True)
    text = (root / "infrarsi.toml").read_text()
    (root / "infrarsi.toml").write_text(text.replace('paths = ["jobs/data", "jobs/tokenizer"]',
                                                     'paths = ["jobs/tokenizer"]'))
    subprocess.run(BOT + ["lock", str(root)], check=True, capture_output=True)
    check = subprocess.run(BOT + ["check", str(root)], capture_output=True, text=True)
    warnings = [ln for ln in check.stdout.splitlines() if ln.startswith("warning:")]
    assert check.returncode == 0 and len(warnings) == 1, check.stdout
    assert warnings[0].startswith("warning: jobs/data: untracked by git and not in [data] paths, but the job "
                                  "names it (jobs/train.py line 4)")
    assert warnings[0].endswith("add it to [data] paths in infrarsi.toml, then run `infrarsi lock`")

    # a trial's worktree holds only what git tracks: the crash says what it lacks and how to add it
    tree = tmp_path / "trial"
    git(root, "worktree", "add", "-q", str(tree))
    (tree / "jobs" / "tokenizer").mkdir()
    shutil.copy(root / "jobs" / "tokenizer" / "vocab.json", tree / "jobs" / "tokenizer" / "vocab.json")
    tail = ("Traceback (most recent call last):\n  File \"train.py\", line 13, in <module>\n"
            "FileNotFoundError: [Errno 2] No such file or directory: 'data/corpus/train.txt'\n")
    outside = GitWorkspace(root).outside_git()
    note = missing_in_trial(load_contract(root), tree, tail, outside)
    assert note == ("jobs/data exists in the repo's tree but not in the trial's worktree (git does not track "
                    "it): add it to [data] paths in infrarsi.toml and run `infrarsi lock`, so every trial links it")
    assert missing_in_trial(load_contract(root), root, tail, outside) is None  # a trial in the repo itself lacks nothing


def test_paths_are_resolved_as_the_job_would_open_them(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "jobs" / "helper.py").write_text(textwrap.dedent('''
        import os
        from pathlib import Path
        HERE = Path(__file__).parent / 'data'
        BESIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tokenizer', 'vocab.json')
        torch.save(model, 'out/ckpt.pt')
    '''))
    refs = {r.path: r for r in path_references(root, workdir="jobs", entry="jobs/train.py",
                                               files=["jobs/helper.py"],
                                               values=[("out", "--out_dir's value", True)])}
    assert {"jobs/data", "jobs/tokenizer/vocab.json", "jobs/out/ckpt.pt", "jobs/out"} <= set(refs)
    assert refs["jobs/out"].written and refs["jobs/out/ckpt.pt"].written and not refs["jobs/data"].written
