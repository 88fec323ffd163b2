"""bot.stages.init.job: a ``--command`` read into where the job starts, its launcher, its argv and entry file."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.stages.init.job import read_job
from bot.stages.init.shell_command import CommandError


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print('step 1')\n")
    (tmp_path / "pkg" / "scripts").mkdir(parents=True)
    (tmp_path / "pkg" / "scripts" / "base_train.py").write_text("")
    return tmp_path


def test_the_workdir_and_env_are_split_from_the_jobs_own_argv(repo: Path) -> None:
    job = read_job("cd proj && OMP_NUM_THREADS=1 python3 train.py --lr 1e-3", repo)
    assert job.workdir == "proj"
    assert job.shell.env == (("OMP_NUM_THREADS", "1"),)
    assert (job.prog, job.args) == (("python", "train.py"), ("--lr", "1e-3"))
    assert job.entry == "proj/train.py"  # repo-relative, found from the workdir
    assert job.launch is None


def test_a_torchrun_launcher_becomes_the_launch_table(repo: Path) -> None:
    job = read_job("torchrun --nproc_per_node 2 proj/train.py --x 1", repo)
    assert job.launch is not None
    assert job.launch.table == {"executor": "torchrun", "nproc_per_node": 2}
    assert (job.prog, job.args, job.entry) == (("python", "proj/train.py"), ("--x", "1"), "proj/train.py")


def test_a_module_is_found_as_its_file(repo: Path) -> None:
    job = read_job("python -m pkg.scripts.base_train --depth 4", repo)
    assert job.prog == ("python", "-m", "pkg.scripts.base_train")
    assert job.entry == "pkg/scripts/base_train.py"


def test_a_missing_entry_file_is_none(repo: Path) -> None:
    assert read_job("python missing.py", repo).entry is None


def test_a_command_with_no_job_is_a_one_line_error(repo: Path) -> None:
    with pytest.raises(CommandError) as caught:
        read_job("echo hello", repo)
    assert "\n" not in str(caught.value)
