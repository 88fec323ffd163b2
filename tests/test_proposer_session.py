"""A proposer inside a run, with a stand-in proposer: every call journaled, proposals kept on disk for a resume,
rounds and the token budget bounding it, its cost summarised for run.json."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from bot.proposers.session import ProposerSession, editable_sources, trial_summaries
from infrarsi.contract.load import parse_contract
from infrarsi.journal import Journal
from infrarsi.patches import Effect, PatchSpec
from infrarsi.search.features import Priors
from infrarsi.seams.proposer import LLMCall, PatchProposal, PriorTable, ProposalFailure, Usage
from infrarsi.trial_record import Candidate, Outcome
from tests.support.tinygpt import REPO
from tests.support.witnessed import trial

DDP = REPO / "fixtures" / "ddp"
CONTRACT = parse_contract(tomllib.loads((DDP / "infrarsi.toml").read_text()), source=Path("infrarsi.toml"),
                          root=DDP)
EFFECT = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")


def _patch(pid: str) -> PatchSpec:
    return PatchSpec(id=pid, title=f"title {pid}", rationale="why", targets=("model.py::MLP",), kind="replacement",
                     replacement="class MLP:\n    pass\n", effect=EFFECT, evidence="profile")


class _Proposer:
    name, model = "stand-in", "m-1"

    def __init__(self, *rounds: PatchProposal, budget: int = 1000) -> None:
        self.rounds = list(rounds)
        self.spent = 0
        self.budget = budget
        self.seen: list[dict[str, Any]] = []

    def usage(self) -> Usage:
        return Usage(input_tokens=self.spent, token_budget=self.budget, budget_exhausted=self.spent >= self.budget)

    def charge(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.spent += input_tokens + output_tokens

    def priors(self, contract, doctor, patches) -> PriorTable:  # noqa: ANN001
        return PriorTable(proposer=self.name, calls=(LLMCall(job="priors", request_hash="h0", model="m-1"),))

    def propose_patches(self, contract, doctor, trials, sources, known, judged=None) -> PatchProposal:  # noqa: ANN001
        self.seen.append({"trials": trials, "known": [p.id for p in known], "judged": judged})
        result = self.rounds.pop(0)
        self.spent += sum(c.input_tokens + c.output_tokens for c in result.calls)
        return result


def _call(h: str, tokens: int = 100) -> LLMCall:
    return LLMCall(job="propose_patches", request_hash=h, model="m-1", input_tokens=tokens, cost_usd=0.01)


@pytest.fixture
def journal(tmp_path: Path):  # noqa: ANN201
    with Journal(tmp_path / "journal.sqlite") as j:
        j.ensure_run("r1", kind="run")
        yield j


def test_rounds_propose_new_patches_journal_every_call_and_survive_a_resume(journal: Journal,
                                                                           tmp_path: Path) -> None:
    proposer = _Proposer(PatchProposal(patches=(_patch("a"), _patch("b")), calls=(_call("h1"),)),
                         PatchProposal(patches=(_patch("a"), _patch("c")), calls=(_call("h2"),),
                                       failures=(ProposalFailure(job="propose_patches", error="invalid once"),)))
    session = ProposerSession(proposer=proposer, journal=journal, run_id="r1", run_dir=tmp_path / "run", max_rounds=2)
    said: list[str] = []
    records = [trial(1, 0.5, cand=Candidate.of({"micro_batch": 2}), loss=(1.0,))]
    assert [p.id for p in session.propose(CONTRACT, None, records, {}, said.append)] == ["a", "b"]
    assert proposer.seen[0]["trials"][0].candidate == "micro_batch=2" and proposer.seen[0]["known"] == []
    assert session.judge("b", "rejected", "outside the editable scope") and not session.judge("b", "invalid", "x")
    assert [p.id for p in session.propose(CONTRACT, None, records, {}, said.append)] == ["c"]
    assert proposer.seen[1]["known"] == ["a", "b"]
    assert proposer.seen[1]["judged"] == {"b": "rejected: outside the editable scope"}
    assert "proposal failed (propose_patches): invalid once" in said
    assert said[-1].startswith("round 2: 1 new patch(es) from the stand-in proposer (c); ")
    assert not session.wants_more()  # max_rounds reached
    assert [c.request_hash for c in journal.llm_calls("r1")] == ["h1", "h2"]

    resumed_proposer = _Proposer()
    resumed = ProposerSession(proposer=resumed_proposer, journal=journal, run_id="r1", run_dir=tmp_path / "run")
    assert [p.id for p in resumed.load()] == ["a", "b", "c"]
    assert resumed.rounds == 2 and resumed.judged == session.judged and resumed.failures[0].error == "invalid once"
    assert resumed_proposer.spent == 200  # the calls already made count against the budget

    summary = session.summary()
    assert (summary["proposer"], summary["model"], summary["tokens"], summary["cost_usd"]) == ("stand-in", "m-1",
                                                                                               200, 0.02)
    assert summary["note"] == "stopped after 2 proposal round(s)"
    status = {p["id"]: (p["status"], p["reason"]) for p in summary["patches_proposed"]}
    assert status == {"a": ("accepted", ""), "b": ("rejected", "outside the editable scope"), "c": ("accepted", "")}


def test_a_spent_budget_stops_proposing_and_is_said(journal: Journal, tmp_path: Path) -> None:
    proposer = _Proposer(PatchProposal(patches=(), calls=(_call("h1", 1000),), budget_exhausted=True), budget=1000)
    session = ProposerSession(proposer=proposer, journal=journal, run_id="r1", run_dir=tmp_path / "run")
    said: list[str] = []
    assert session.propose(CONTRACT, None, [], {}, said.append) == []
    assert session.exhausted and not session.wants_more()
    assert said[-1] == "token budget spent (1000 of 1000): stopped proposing"
    assert session.summary()["note"] == "token budget spent after 1 round(s): stopped proposing"


def test_priors_fall_back_to_the_base_table_when_the_proposer_gives_none(journal: Journal, tmp_path: Path) -> None:
    session = ProposerSession(proposer=_Proposer(), journal=journal, run_id="r1", run_dir=tmp_path / "run")
    base = Priors()
    assert session.priors(CONTRACT, None, [], base) is base and session.prior_source == "builtin"
    assert [c.job for c in journal.llm_calls("r1")] == ["priors"]


def test_summaries_and_sources() -> None:
    record = trial(3, 0.25, cand=Candidate.of({"dtype": "bf16"}, ["p1"]), loss=(1.0,), outcome=Outcome.CRASH,
                   reason="x" * 900)
    [summary] = trial_summaries([record])
    assert (summary.trial_no, summary.candidate, summary.patches, summary.outcome) == (3, "dtype=bf16 +p1", ("p1",),
                                                                                       "crash")
    assert len(summary.reason) == 500 and summary.step_time_s == 0.25
    sources = editable_sources(CONTRACT)
    assert set(sources) == {"model.py", "train.py"} and "def build_model" in sources["train.py"]
