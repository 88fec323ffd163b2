"""bot.stages.init.data_paths: which paths outside git are data the job reads (and which ``check`` finds missing)."""
from __future__ import annotations

from pathlib import Path

from bot.stages.init.data_paths import named_untracked, outside_git, parent_paths, unlisted_data
from bot.stages.init.path_refs import PathRef


def _ref(path: str, where: str = "train.py line 3", written: bool = False) -> PathRef:
    return PathRef(path=path, where=where, written=written)


def test_an_untracked_path_is_data_when_the_job_names_it_or_it_is_a_data_folder_beside_the_script() -> None:
    refs = [_ref("input.txt"), _ref("shards/part-0.bin", "the command"), _ref("out", written=True)]
    untracked = ["input.txt", "shards", "out/ckpt.pt", "helper.py", "proj/data", "proj/notes", "other/data"]
    assert named_untracked(refs, untracked, near=["proj"]) == {
        "input.txt": "named in train.py line 3",
        "shards": "named in the command",  # a folder around a named file
        "proj/data": "a data folder beside the entry script",
    }


def test_a_folder_above_the_repo_is_kept_when_named_and_there(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    text = "datasets.MNIST('../data')\nsave('../out/x')\nopen('../missing')\nopen('../../state')\n"
    assert parent_paths(root, text) == ["../data"]


def test_check_names_each_path_outside_git_that_data_lacks_once() -> None:
    refs = [_ref("data/train.bin"), _ref("data/val.bin", "train.py line 9"), _ref("vocab.json", "the command"),
            _ref("out", written=True), _ref("gen.py")]
    outside = {"data": "ignored", "vocab.json": "untracked", "out": "ignored", "gen.py": "untracked"}
    lines = unlisted_data(refs, outside, listed=[])
    assert lines == [
        "data: ignored by git and not in [data] paths, but the job names it (train.py line 3); a trial's worktree "
        "will not have it: add it to [data] paths in infrarsi.toml, then run `infrarsi lock`",
        "vocab.json: untracked by git and not in [data] paths, but the job names it (the command); a trial's "
        "worktree will not have it: add it to [data] paths in infrarsi.toml, then run `infrarsi lock`"]
    assert unlisted_data(refs, outside, listed=["data", "vocab.json"]) == []


def test_outside_a_git_repo_nothing_is_outside_git(tmp_path: Path) -> None:
    (tmp_path / "input.txt").write_text("x")
    assert outside_git(tmp_path) == {}
