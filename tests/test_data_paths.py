"""bot.stages.init.data_paths: which paths outside git are data the job reads (and which ``check`` finds missing)."""
from __future__ import annotations

from pathlib import Path

from bot.stages.init.data_paths import draft_data_paths, named_untracked, outside_git_data, parent_paths, unlisted_data
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


def test_junk_and_outputs_are_never_data() -> None:
    outside = {"data": "ignored", "__pycache__": "ignored", "train.log": "ignored", "out": "ignored",
               "runs-2": "untracked", "input.txt": "untracked", ".venv": "untracked"}
    assert outside_git_data(outside) == {"data": "ignored", "input.txt": "untracked"}


def test_the_draft_keeps_ignored_data_and_the_untracked_paths_the_job_names(tmp_path: Path) -> None:
    for name in ("data", "cache", "input.txt", "notes"):
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("x")
    (tmp_path / "train.py").write_text("open('input.txt')\nopen('cache/x')\n")
    outside = {"data": "ignored", "cache": "ignored", "gone": "ignored", "input.txt": "untracked",
               "notes": "untracked"}
    paths, note = draft_data_paths(tmp_path, ["train.py"], "python train.py", outside=outside,
                                   refs=[_ref("input.txt")])
    # "data" by its name, "cache" because the code names it; "gone" is not there; "notes" is named by nobody
    assert paths == ["data", "cache", "input.txt"]  # in the order the workspace listed them
    assert "input.txt (untracked, named in train.py line 3)" in note
    assert draft_data_paths(tmp_path, ["train.py"], "python train.py", outside={})[0] == []
