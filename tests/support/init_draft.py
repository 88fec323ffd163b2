"""A one-file argparse training script, its in-process draft and contract (no subprocess, no git), and an
executor that runs nothing: for unit tests of the init and run stages."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bot.stages.init.draft import ContractDraft, draft_contract
from bot.stages.init.scan import scan_repo
from bot.stages.init.toml_writer import render_contract
from infrarsi.contract.load import CONTRACT_FILE, load_contract
from infrarsi.contract.model import Contract
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.trial_record import StepEvent

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


def drafted_contract(root: Path, source: str = ARGPARSE_JOB, command: str = "python train.py") -> Contract:
    """The contract ``init`` drafts for ``command``, written to ``root/infrarsi.toml`` and loaded (nothing run)."""
    (root / CONTRACT_FILE).parent.mkdir(parents=True, exist_ok=True)
    text = render_contract(drafted(root, source, command))
    (root / CONTRACT_FILE).write_text(text)
    return load_contract(root)


@dataclass
class FakeExecutor:
    """An executor that runs nothing: it hands back ``execution`` and keeps every spec it was given."""

    execution: Execution
    name: str = "fake"
    specs: list[TrialSpec] = field(default_factory=list)

    def execute(self, spec: TrialSpec) -> Execution:
        self.specs.append(spec)
        return self.execution


def steps(n: int, *, start: int = 1, every: int = 1, dt: float = 0.1) -> tuple[StepEvent, ...]:
    """``n`` step events ``dt`` seconds apart, step numbers advancing by ``every``, loss falling from 2."""
    return tuple(StepEvent(step=start + i * every, stamp=i * dt, loss=2.0 - i * 0.01) for i in range(n))


def step_log(events: tuple[StepEvent, ...]) -> str:
    """The stdout lines a job printing ``events`` leaves in its log, one ``step N loss X`` line each."""
    return "".join(f"step {e.step} loss {e.loss:.4f}\n" for e in events)
