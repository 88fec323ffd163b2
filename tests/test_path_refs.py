"""bot.stages.init.path_refs: the paths a job names, resolved as the job would open them; what it writes is marked."""
from __future__ import annotations

from pathlib import Path

from bot.stages.init.path_refs import OUTPUT_SETTING, PathRef, path_references


def _repo(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_literals_joins_and_module_names_are_resolved_and_kept_when_they_exist(tmp_path: Path) -> None:
    root = _repo(tmp_path, {
        "proj/train.py": ("import os\ndata_dir = 'data'\ntext = open('input.txt').read()\n"
                          "train = os.path.join(data_dir, 'train.bin')\nmissing = open('nope.txt')\n"),
        "proj/input.txt": "hello", "proj/data/train.bin": ""})
    refs = path_references(root, workdir="proj", entry="proj/train.py", files=["proj/train.py"])
    assert {r.path: (r.where, r.written) for r in refs} == {
        "proj/data": ("proj/train.py line 2", False),
        "proj/input.txt": ("proj/train.py line 3", False),
        "proj/data/train.bin": ("proj/train.py line 4", False)}


def test_what_the_job_writes_is_marked_written(tmp_path: Path) -> None:
    root = _repo(tmp_path, {"train.py": ("import os, torch\nos.makedirs('out', exist_ok=True)\n"
                                         "torch.save(model, 'ckpt.pt')\nopen('log.txt', 'w')\n"),
                            "out/x": "", "ckpt.pt": "", "log.txt": ""})
    refs = path_references(root, workdir=".", entry="train.py", files=["train.py"])
    assert sorted((r.path, r.written) for r in refs) == [("ckpt.pt", True), ("log.txt", True), ("out", True)]


def test_values_are_named_first_and_a_file_beside_the_script_is_found_from_its_folder(tmp_path: Path) -> None:
    root = _repo(tmp_path, {"scripts/train.py": "open('names.txt')\n", "scripts/names.txt": "emma\n"})
    refs = path_references(root, workdir=".", entry="scripts/train.py", files=["scripts/train.py"],
                           values=[("names.txt", "--input-file's default", False)])
    assert refs == [PathRef(path="scripts/names.txt", where="--input-file's default", written=False)]


def test_a_file_that_does_not_parse_is_skipped(tmp_path: Path) -> None:
    root = _repo(tmp_path, {"bad.py": "def (:\n", "data.txt": ""})
    assert path_references(root, workdir=".", entry="bad.py", files=["bad.py", "gone.py"]) == []


def test_output_settings_are_recognised_by_name() -> None:
    assert all(OUTPUT_SETTING.search(n) for n in ("out_dir", "work_dir", "output_dir", "save_path", "logdir"))
    assert not any(OUTPUT_SETTING.search(n) for n in ("data_dir", "input_file", "batch_size"))
