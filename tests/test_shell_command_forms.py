"""The shell forms a README writes a training command in, read (never run) into the contract's workdir, env and
command, with one line naming what cannot be kept.

Forms as public repos write them: karpathy/minGPT's ``cd projects/chargpt && python chargpt.py``; a variable
before the interpreter; ``python3``; karpathy/nanochat's ``python -m scripts.base_train`` and its
``bash runs/runcpu.sh`` (exports, an ``if`` that sets a variable, data preparation, then the job)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.stages.init.draft import draft_contract
from bot.stages.init.job import read_job
from bot.stages.init.scan import scan_repo
from bot.stages.init.shell_command import CommandError, read_command

JOB = textwrap.dedent('''
    import argparse, os
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--seq_len", type=int, default=16)
    a = p.parse_args()
    threads = int(os.environ.get("NUM_THREADS", "1"))
    for step in range(a.steps):
        print(f"step {step} loss {1.0 / (step + 1):.4f}", flush=True)
''')

RUN_SH = textwrap.dedent('''\
    #!/bin/bash
    # the whole run; from the repo's root: bash runs/train.sh
    set -euo pipefail
    export OMP_NUM_THREADS=2
    export DATA_HOME="$HOME/.cache/job"
    if [ -z "${RUN:-}" ]; then
        RUN=dummy
    fi
    [ -d .venv ] || python3 -m venv .venv
    python -m pkg.prepare --shards 2
    python -m pkg.train \\
        --steps=5000 \\
        --run=$RUN 2>&1 | tee train.log
''')


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "projects" / "job").mkdir(parents=True)
    (tmp_path / "projects" / "job" / "train.py").write_text(JOB)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(JOB)
    (tmp_path / "pkg" / "prepare.py").write_text("print('prepared')\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "train.sh").write_text(RUN_SH)
    return tmp_path


@pytest.mark.parametrize(("command", "workdir", "env", "argv", "dropped"), [
    ("cd projects/job && python train.py --steps 50", "projects/job", {}, ["python", "train.py", "--steps", "50"],
     []),
    ("cd projects && cd job && NUM_THREADS=4 python3 train.py", "projects/job", {"NUM_THREADS": "4"},
     ["python3", "train.py"], []),
    ("OMP_NUM_THREADS=1 nohup python -m pkg.train --steps=50 > log.txt 2>&1 &", ".", {"OMP_NUM_THREADS": "1"},
     ["python", "-m", "pkg.train", "--steps=50"], ["`&` (the bot runs the job in the foreground)"]),
    ("python -m pkg.prepare && python -u -m pkg.train | tee out.log", ".", {}, ["python", "-u", "-m", "pkg.train"],
     ["`python -m pkg.prepare`", "`| tee out.log`"]),
], ids=["cd", "cd-twice-env-python3", "env-module-redirect-background", "prepare-pipe"])
def test_a_command_line_is_read_into_workdir_env_and_the_job(tmp_path: Path, command: str, workdir: str,
                                                             env: dict[str, str], argv: list[str],
                                                             dropped: list[str]) -> None:
    job = read_command(command, _repo(tmp_path))
    assert (job.workdir, dict(job.env), list(job.argv)) == (workdir, env, argv)
    assert sorted(job.dropped) == sorted(dropped)
    assert "\n" not in job.note()


def test_a_bash_script_is_read_line_by_line_and_its_last_python_command_is_the_job(tmp_path: Path) -> None:
    job = read_command("bash runs/train.sh", _repo(tmp_path))
    assert list(job.argv) == ["python", "-m", "pkg.train", "--steps=5000", "--run=dummy"]
    assert dict(job.env) == {"OMP_NUM_THREADS": "2"}  # DATA_HOME names $HOME, which the script never sets
    assert job.origin == "runs/train.sh line 11"
    note = job.note()
    assert note.startswith("read runs/train.sh line 11: kept `OMP_NUM_THREADS=2 python -m pkg.train --steps=5000 "
                           "--run=dummy`; not kept: ")
    for part in ("`python -m pkg.prepare --shards 2` (runs/train.sh line 10)", "`| tee train.log`",
                 "DATA_HOME=$HOME/.cache/job", "python3 -m venv .venv"):
        assert part in note, note
    assert "\n" not in note


@pytest.mark.parametrize(("command", "message"), [
    ("cd .. && python train.py", "`cd ..` leaves the repo"),
    ("cd /etc && python train.py", "is outside the repo"),
    ("cd nowhere && python train.py", "no folder 'nowhere' in the repo"),
    ("make train", "no Python job found in it"),
    ("bash runs/missing.sh", "no file 'runs/missing.sh' in the repo"),
    ("python train.py --data $DATA_DIR", "names a variable the command does not set"),
], ids=["up", "absolute", "missing-dir", "no-python", "missing-script", "unset-variable"])
def test_what_cannot_be_kept_is_one_line_naming_it(tmp_path: Path, command: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        read_command(command, _repo(tmp_path))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_entry_file_is_found_from_the_workdir_and_a_module(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    assert read_job("cd projects/job && python3 train.py", root).entry == "projects/job/train.py"
    assert read_job("python -m pkg.train --steps=3", root).entry == "pkg/train.py"
    job = read_job("bash runs/train.sh", root)
    assert (job.entry, job.prog, job.args) == ("pkg/train.py", ("python", "-m", "pkg.train"),
                                               ("--steps=5000", "--run=dummy"))


def test_the_draft_keeps_the_workdir_and_env_and_a_variable_the_code_reads_is_the_knobs_default(
        tmp_path: Path) -> None:
    root = _repo(tmp_path)
    draft = draft_contract("cd projects/job && NUM_THREADS=2 OMP_NUM_THREADS=1 python3 train.py --steps 50",
                           scan_repo(root, "projects/job/train.py"))
    workload = draft.data["workload"]
    assert (workload["command"], workload["workdir"], workload["env"]) == (["python", "train.py"], "projects/job",
                                                                          {"OMP_NUM_THREADS": "1"})
    assert draft.data["knobs"]["NUM_THREADS"]["default"] == 2  # the command's value, passed as the knob's env


def test_init_from_a_subfolder_command_writes_a_contract_check_accepts(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    bot = [sys.executable, "-m", "bot"]
    init = subprocess.run(bot + ["init", str(root), "--command", "bash runs/train.sh"], capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    assert init.stdout.startswith("init: read runs/train.sh line 11: kept `OMP_NUM_THREADS=2 python -m pkg.train")
    check = subprocess.run(bot + ["check", str(root)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_the_reports_reproduce_line_starts_in_the_workdir_with_the_fixed_env() -> None:
    from infrarsi.report.model import command_line

    line = command_line(("python", "chargpt.py"), ("--x=1",), (), {}, workdir="projects/chargpt",
                        env=(("OMP_NUM_THREADS", "1"),))
    assert line == "cd projects/chargpt && OMP_NUM_THREADS=1 python chargpt.py --x=1"


# Shapes of train.sh scripts public repos keep beside their code: exports then a backgrounded nohup job whose log
# is tailed; the script's own folder from `$(dirname "$0")` and its first argument; the interpreter in a variable.
SCRIPTS = {
    "nohup.sh": ("export OMP_NUM_THREADS=1\nnohup python -u train.py --config ./cfg.yaml > log_train 2>&1 &\n"
                 "tail -f log_train\n", [], ".", {"OMP_NUM_THREADS": "1"},
                 ["python", "-u", "train.py", "--config", "./cfg.yaml"], ["`tail -f log_train`", "`&`"]),
    "dirname.sh": ('CONFIG=$1\nPYTHONPATH="$(dirname $0)/..":$PYTHONPATH \\\npython $(dirname "$0")/train.py $CONFIG\n',
                   ["cfg.yaml"], ".", {}, ["python", "projects/job/train.py", "cfg.yaml"], ["`PYTHONPATH="]),
    "variable.sh": ("pythonpath='python3'\ncd \"$(dirname \"$0\")\"\n${pythonpath} ./train.py\n", [], "projects/job",
                    {}, ["python3", "./train.py"], []),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_script_shapes_repos_keep_beside_their_code(tmp_path: Path, name: str) -> None:
    text, args, workdir, env, argv, dropped = SCRIPTS[name]
    root = _repo(tmp_path)
    (root / "projects" / "job" / name).write_text("#!/usr/bin/env bash\n" + text)
    job = read_command(" ".join(["bash", f"projects/job/{name}", *args]), root)
    assert (job.workdir, dict(job.env), list(job.argv)) == (workdir, env, argv)
    assert len(job.dropped) == len(dropped) and all(any(d.startswith(p) for d in job.dropped) for p in dropped)
    assert not any(str(root) in a for a in job.argv)  # relative to the tree: a trial runs its own copy
