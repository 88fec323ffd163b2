"""bot.stages.init.loader_batch: samples per step read from the batch literal of the training DataLoader."""
from __future__ import annotations

from pathlib import Path

from bot.stages.init.loader_batch import loader_batch
from infrarsi.seams.proposer import RepoSummary


def _summary(root: Path, source: str, entry: str | None = "main.py") -> RepoSummary:
    (root / "main.py").write_text(source)
    return RepoSummary(root=root, entry=entry, flags=(), files=())


def test_the_training_loader_is_chosen_over_the_test_loader(tmp_path: Path) -> None:
    src = ("import torch\n"
           "testloader = torch.utils.data.DataLoader(testset, batch_size=100, shuffle=False)\n"
           "trainloader = torch.utils.data.DataLoader(trainset, batch_size=128, shuffle=True)\n")
    assert loader_batch(_summary(tmp_path, src)) == (
        128, "guessed: batch_size=128 of the training DataLoader (line 3 of main.py), samples (no batch setting "
             "or sequence length found: each sample counts as one token)")


def test_a_shuffling_loader_is_the_training_one_whatever_its_name(tmp_path: Path) -> None:
    src = ("from torch.utils.data import DataLoader\n"
           "a = DataLoader(x, batch_size=16)\n"
           "b = DataLoader(y, batch_size=0x20, shuffle=True)\n")
    assert loader_batch(_summary(tmp_path, src))[0] == 32  # type: ignore[index]


def test_a_single_loader_is_the_training_one(tmp_path: Path) -> None:
    assert loader_batch(_summary(tmp_path, "loader = DataLoader(ds, batch_size=64)\n"))[0] == 64  # type: ignore[index]


def test_nothing_is_guessed_where_the_loaders_cannot_be_told_apart_or_read(tmp_path: Path) -> None:
    two = "a = DataLoader(x, batch_size=16)\nb = DataLoader(y, batch_size=32)\n"
    assert loader_batch(_summary(tmp_path, two)) is None
    assert loader_batch(_summary(tmp_path, "train_loader = DataLoader(x, batch_size=args.bs)\n")) is None
    assert loader_batch(_summary(tmp_path, "def (:\n")) is None
    assert loader_batch(_summary(tmp_path, "x = 1\n", entry=None)) is None
    assert loader_batch(_summary(tmp_path, "x = 1\n", entry="missing.py")) is None
