"""bot.stages.init.proposed_draft: a contract drafted by a proposer — the shell forms and the launcher read from
the command as the built-in drafter does, each rationale kept as a note, a failed draft one line. The proposer
here is a stub that answers from a table (no model is called)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.stages.init.draft import DraftError
from bot.stages.init.proposed_draft import draft_with
from infrarsi.seams.proposer import ContractProposal, ProposalFailure, RepoSummary, Usage


class _Stub:
    def __init__(self, name: str, proposal: ContractProposal, *, model: str | None = None,
                 usage: Usage | None = None) -> None:
        self.name, self.model, self.proposal, self._usage = name, model, proposal, usage or Usage()
        self.asked: list[tuple[str, int | None]] = []

    def draft_contract(self, command: str, repo_summary: RepoSummary, *,
                       tokens_per_step: int | None = None) -> ContractProposal:
        self.asked.append((command, tokens_per_step))
        return self.proposal

    def usage(self) -> Usage:
        return self._usage


DATA: dict[str, Any] = {"version": 1, "workload": {"command": ["python", "train.py"], "args": []},
                        "launch": {"executor": "local"}}


@pytest.fixture
def summary(tmp_path: Path) -> RepoSummary:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print('step 1 loss 2.0')\n")
    return RepoSummary(root=tmp_path, entry="proj/train.py", flags=(), files=())


def test_a_model_drafts_the_job_and_the_command_forms_are_read_here(summary: RepoSummary) -> None:
    stub = _Stub("anthropic", ContractProposal(data=DATA, rationale={"workload.command": "the entry point"}),
                 model="claude-x")
    command = "cd proj && OMP_NUM_THREADS=2 torchrun --nproc_per_node 2 train.py --lr 1"
    draft = draft_with(stub, command, summary, tokens_per_step=64)  # type: ignore[arg-type]
    assert stub.asked == [("python train.py --lr 1", 64)]  # the model sees the job's own command
    assert draft.notes["workload.command"] == "claude-x: the entry point"
    assert draft.data["launch"] == {"executor": "torchrun", "nproc_per_node": 2}  # from the command, not the model
    assert draft.data["workload"]["workdir"] == "proj"
    assert draft.data["workload"]["env"] == {"OMP_NUM_THREADS": "2"}
    assert draft.notes["workload.workdir"] == "from the command: cd proj; the job starts there"


def test_the_builtin_drafter_reads_the_command_itself(summary: RepoSummary) -> None:
    stub = _Stub("builtin", ContractProposal(data=DATA, rationale={"version": "default"}))
    draft = draft_with(stub, "cd proj && python train.py", summary)  # type: ignore[arg-type]
    assert stub.asked == [("cd proj && python train.py", None)]
    assert (draft.data, draft.notes) == (DATA, {"version": "default"})


def test_a_failed_draft_names_its_failures_and_what_it_spent(summary: RepoSummary) -> None:
    failed = ContractProposal(data=None, failures=(ProposalFailure(job="contract", error="not TOML"),
                                                   ProposalFailure(job="contract", error="no command")))
    stub = _Stub("anthropic", failed, usage=Usage(input_tokens=100, output_tokens=20, cost_usd=0.01, calls=2))
    with pytest.raises(DraftError) as caught:
        draft_with(stub, "python proj/train.py", summary)  # type: ignore[arg-type]
    assert str(caught.value) == ("the anthropic proposer could not draft a contract: not TOML; no command "
                                 "(spent 120 tokens, $0.0100 in 2 request(s))")
    with pytest.raises(DraftError, match=r"could not draft a contract: no answer$"):
        silent = _Stub("anthropic", ContractProposal(data=None))
        draft_with(silent, "python proj/train.py", summary)  # type: ignore[arg-type]


def test_a_launcher_the_contract_cannot_express_is_refused_before_the_model_is_asked(summary: RepoSummary) -> None:
    stub = _Stub("anthropic", ContractProposal(data=DATA))
    with pytest.raises(DraftError, match=r"^--command: "):
        draft_with(stub, "torchrun --nnodes 2 proj/train.py", summary)  # type: ignore[arg-type]
    assert stub.asked == []
