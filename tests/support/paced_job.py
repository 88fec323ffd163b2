"""A small training repo of a user's own whose one speed knob is a sure win: each micro-batch's forward and backward
is paced by a short sleep, so ``--micro-batch 8`` runs a step in an eighth of ``--micro-batch 1``'s time on any
machine, however busy. Real training nonetheless: a tiny language model, AdamW, cross-entropy over every token of
the global batch, gradients accumulated over the micro-batches (the loss curve is the same for every
micro-batch size), one step line per step on stdout."""

from __future__ import annotations

from pathlib import Path

TRAIN = '''"""Train a tiny language model: python train.py [--micro-batch N]."""
import argparse
import time

import torch
import torch.nn.functional as F

from model import TinyLM


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=1, help="rows per forward/backward")
    args = p.parse_args()
    torch.manual_seed(0)
    model = TinyLM(vocab=64, width=32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 64, (args.global_batch, args.seq_len + 1), generator=torch.Generator().manual_seed(1))
    x, y = data[:, :-1], data[:, 1:]
    chunks = args.global_batch // args.micro_batch
    for step in range(1, args.steps + 1):
        total = 0.0
        for i in range(chunks):
            rows = slice(i * args.micro_batch, (i + 1) * args.micro_batch)
            time.sleep(0.015)  # the cost of one micro-batch's kernels, whatever its size
            logits = model(x[rows])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[rows].reshape(-1))
            (loss / chunks).backward()
            total += loss.item() / chunks
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {total:.6f}", flush=True)


if __name__ == "__main__":
    main()
'''

MODEL = '''"""The model."""
import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(x)))
'''


def write_paced_repo(root: Path) -> Path:
    """``root`` with the job's files (not a git repository yet: the caller's steps make it one)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    (root / "model.py").write_text(MODEL)
    (root / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    return root
