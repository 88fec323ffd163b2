"""A one-file argparse training script and its in-process draft (no subprocess, no git): for init unit tests."""
from __future__ import annotations

from pathlib import Path

from bot.stages.init.draft import ContractDraft, draft_contract
from bot.stages.init.scan import scan_repo

ARGPARSE_JOB = '''import argparse
p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int, default=8)
p.add_argument("--seq_len", type=int, default=64)
p.add_argument("--steps", type=int, default=100)
p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
args = p.parse_args()
for step in range(args.steps):
    print(f"step {step} loss {1.0:.4f}")
'''


def drafted(root: Path, source: str = ARGPARSE_JOB, command: str = "python train.py", **kw: object) -> ContractDraft:
    """The draft ``init`` makes for ``command`` with ``source`` written as ``root/train.py``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(source)
    return draft_contract(command, scan_repo(root, "train.py"), **kw)  # type: ignore[arg-type]
