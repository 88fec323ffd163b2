"""Tokens per step where the sequence length comes from the data: karpathy/makemore's shape, where the block
size is the longest line of ``--input-file`` + 1 (the start token), so tokens are the batch x that, not the batch
alone (32 x 16, not 32)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.stages.init.data_seq_len import data_sequence_length
from bot.stages.init.draft import draft_contract
from bot.stages.init.scan import scan_repo

JOB = textwrap.dedent('''
    import argparse
    import torch

    class CharDataset(torch.utils.data.Dataset):
        def __init__(self, words, max_word_length):
            self.words, self.max_word_length = words, max_word_length

        def get_output_length(self):
            return self.max_word_length + 1  # the start token, then the word

    def create_datasets(input_file):
        with open(input_file, 'r') as f:
            data = f.read()
        words = [w.strip() for w in data.splitlines()]
        words = [w for w in words if w]
        max_word_length = max(len(w) for w in words)
        return CharDataset(words, max_word_length)

    if __name__ == '__main__':
        parser = argparse.ArgumentParser()
        parser.add_argument('--input-file', '-i', type=str, default='names.txt')
        parser.add_argument('--max-steps', type=int, default=-1)
        parser.add_argument('--batch-size', '-b', type=int, default=32)
        args = parser.parse_args()
        train_dataset = create_datasets(args.input_file)
        block_size = train_dataset.get_output_length()
        model = torch.nn.Linear(block_size, block_size)
        step = 0
        while True:
            loss = model(torch.ones(block_size)).sum()
            if step % 10 == 0:
                print(f"step {step} | loss {loss.item():.4f}")
            step += 1
''')


@pytest.mark.parametrize(("command", "tokens"), [
    ("python makemore.py", 32 * (15 + 1)),  # the default file: the longest name has 15 characters
    ("python makemore.py -i cities.txt -b 8", 8 * (21 + 1)),  # the file and batch the command gives
])
def test_the_sequence_length_is_read_from_the_data_file(tmp_path: Path, command: str, tokens: int) -> None:
    (tmp_path / "makemore.py").write_text(JOB)
    (tmp_path / "names.txt").write_text("emma\nolivia\n\n  maximilianaaaaa  \nava\n")  # 15 after stripping
    (tmp_path / "cities.txt").write_text("paris\nsaint-jean-de-luz-sur\n")  # 21
    draft = draft_contract(command, scan_repo(tmp_path, "makemore.py"))
    assert draft.data["workload"]["tokens_per_step"] == tokens
    assert "the longest line of" in draft.notes["workload.tokens_per_step"]


def test_no_data_derived_length_without_that_shape(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(JOB.replace("max(len(w) for w in words)", "64"))
    (tmp_path / "names.txt").write_text("emma\n")
    assert data_sequence_length(tmp_path, workdir=".", files=["train.py"], flag_values={"input_file": "names.txt"}) \
        is None
