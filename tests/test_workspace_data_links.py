"""Data outside git linked into a trial's tree: symbolic links, directories recreated, nothing replaced."""

from __future__ import annotations

from pathlib import Path

from bot.workspace.data_links import link_data


def test_files_and_directory_trees_are_linked_never_copied(tmp_path: Path) -> None:
    origin, tree = tmp_path / "repo", tmp_path / "wt"
    (origin / "data" / "shards").mkdir(parents=True)
    (origin / "data" / "shards" / "0.bin").write_bytes(b"0")
    (origin / "data" / "meta.json").write_text("{}")
    (origin / "tok.model").write_text("t")
    tree.mkdir()
    assert link_data(origin, tree, ("data", "tok.model")) == 3
    for rel in ("data/shards/0.bin", "data/meta.json", "tok.model"):
        assert (tree / rel).is_symlink() and (tree / rel).resolve() == (origin / rel).resolve()
    assert (tree / "data").is_dir() and not (tree / "data").is_symlink()


def test_an_existing_file_is_never_replaced_and_linking_again_makes_nothing(tmp_path: Path) -> None:
    origin, tree = tmp_path / "repo", tmp_path / "wt"
    (origin / "data").mkdir(parents=True)
    (origin / "data" / "a").write_text("orig")
    (origin / "data" / "b").write_text("orig")
    (tree / "data").mkdir(parents=True)
    (tree / "data" / "a").write_text("tracked")
    assert link_data(origin, tree, ("data",)) == 1
    assert (tree / "data" / "a").read_text() == "tracked" and not (tree / "data" / "a").is_symlink()
    assert link_data(origin, tree, ("data",)) == 0
    assert link_data(origin, tree, ()) == 0
