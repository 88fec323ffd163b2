"""A proposer inside ``infrarsi run``: priors at the start, new patches between batches, all on the record.

Every model call is written to the journal (``llm_calls``) as it happens, so
LLM tokens and dollars are part of the run's cost and survive a kill; patches
proposed so far are kept in ``proposed-patches.json`` in the run directory, so
``--resume`` sees the same search space. The session stops proposing when the
proposer says the token budget is spent, or after ``max_rounds`` rounds, and
says which in ``run.json`` (``llm``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.patching.catalog import editable_files
from bot.proposers.llm import PRICES_AS_OF, PRICES_SOURCE
from infrarsi.rundir import PROPOSED_PATCHES
from infrarsi.contract.model import Contract
from infrarsi.journal import Journal
from infrarsi.patches import PatchSpec
from infrarsi.seams.proposer import LLMCall, ProposalFailure, Proposer, TrialSummary
from infrarsi.search.features import Priors
from infrarsi.trial_record import TrialRecord



def trial_summaries(records: Iterable[TrialRecord]) -> list[TrialSummary]:
    return [TrialSummary(trial_no=r.trial_no, candidate=r.candidate.describe(), patches=tuple(r.candidate.patches),
                         outcome=r.outcome.value, reason=(r.reason or "")[:500], step_time_s=r.metrics.step_time_s,
                         peak_mem_bytes=r.metrics.peak_mem_bytes) for r in records]


def editable_sources(contract: Contract, tree: Path | None = None) -> dict[str, str]:
    """The text of every editable Python file (what a proposer may see and patch)."""
    root = tree or contract.root
    out = {}
    for path in editable_files(contract):
        file = root / path
        if file.is_file():
            out[path] = file.read_text(encoding="utf-8", errors="replace")
    return out


@dataclass(kw_only=True)
class ProposerSession:
    proposer: Proposer
    journal: Journal
    run_id: str
    run_dir: Path
    max_rounds: int = 3
    rounds: int = 0
    exhausted: bool = False
    proposed: list[PatchSpec] = field(default_factory=list)
    failures: list[ProposalFailure] = field(default_factory=list)
    prior_source: str = ""
    #: patch id → what it was judged and why ("rejected when proposed: …", "invalid: …"); told to the
    #: proposer in the next round, kept across a resume, and never judged twice.
    judged: dict[str, str] = field(default_factory=dict)

    @property
    def state_path(self) -> Path:
        return self.run_dir / PROPOSED_PATCHES

    def load(self) -> list[PatchSpec]:
        """Patches proposed earlier in this run (a resumed run), and the tokens they cost against the budget."""
        calls = [c for c in self.journal.llm_calls(self.run_id) if not c.cached]
        if calls:
            self.proposer.charge(sum(c.input_tokens for c in calls), sum(c.output_tokens for c in calls),
                                 sum(c.cost_usd for c in calls))
        state: dict[str, Any] = {}
        if self.state_path.is_file():
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            self.proposed = [PatchSpec.from_dict(p) for p in state.get("patches", [])]
            self.rounds = int(state.get("rounds", 0))
            self.failures = [ProposalFailure(**f) for f in state.get("failures", [])]
            self.judged = dict(state.get("judged", {}))
        self.exhausted = bool(state.get("exhausted")) or self.proposer.usage().budget_exhausted
        return list(self.proposed)

    def _save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state_path.write_text(json.dumps({"patches": [p.to_dict() for p in self.proposed],
                                               "rounds": self.rounds, "exhausted": self.exhausted,
                                               "failures": [f.to_dict() for f in self.failures],
                                               "judged": self.judged},
                                              indent=1, sort_keys=True) + "\n", encoding="utf-8")

    def _record(self, calls: Sequence[LLMCall], failures: Sequence[ProposalFailure]) -> None:
        for call in calls:
            self.journal.record_llm_call(self.run_id, call)
        self.failures.extend(failures)

    def priors(self, contract: Contract, doctor: Any, patches: Sequence[PatchSpec], base: Priors) -> Priors:
        """The proposer's priors over ``base`` (the built-in table); on failure, ``base`` as it is."""
        table = self.proposer.priors(contract, doctor, patches)
        self._record(table.calls, table.failures)
        self.prior_source = self.proposer.name if table.effects else "builtin"
        return table.to_priors(base) if table.effects else base

    def judge(self, patch_id: str, verdict: str, reason: str) -> bool:
        """Record that ``patch_id`` was judged (``rejected`` when proposed, ``invalid`` in a trial or a
        verification); False when it already was (a patch is judged once)."""
        if patch_id in self.judged:
            return False
        self.judged[patch_id] = f"{verdict}: {reason}"
        self._save()
        return True

    def wants_more(self) -> bool:
        return not self.exhausted and self.rounds < self.max_rounds

    def propose(self, contract: Contract, doctor: Any, records: Sequence[TrialRecord],
                known: Mapping[str, PatchSpec], say: Callable[[str], None]) -> list[PatchSpec]:
        """One round: the proposer sees every trial so far; new patches are returned (and remembered)."""
        self.rounds += 1
        everything = {**{p.id: p for p in self.proposed}, **known}
        result = self.proposer.propose_patches(contract, doctor, trial_summaries(records),
                                               editable_sources(contract), list(everything.values()),
                                               judged=dict(self.judged))
        self._record(result.calls, result.failures)
        new = [p for p in result.patches if p.id not in everything]
        self.proposed.extend(new)
        usage = self.proposer.usage()
        if result.budget_exhausted or usage.budget_exhausted:
            self.exhausted = True
        for f in result.failures:
            say(f"proposal failed ({f.job}): {f.error}")
        say(f"round {self.rounds}: {len(new)} new patch(es) from the {self.proposer.name} proposer"
            + (f" ({', '.join(p.id for p in new)})" if new else "")
            + f"; {usage.tokens} tokens, ${usage.cost_usd:.4f} so far")
        if self.exhausted:
            say(f"token budget spent ({usage.tokens} of {usage.token_budget}): stopped proposing")
        self._save()
        return new

    def summary(self) -> dict[str, Any]:
        """The ``llm`` entry of run.json: what the proposer cost and what became of its proposals."""
        calls = self.journal.llm_calls(self.run_id)
        usage = self.proposer.usage()
        tin = sum(c.input_tokens for c in calls)
        tout = sum(c.output_tokens for c in calls)
        note = ""
        if self.exhausted:
            note = f"token budget spent after {self.rounds} round(s): stopped proposing"
        elif self.rounds >= self.max_rounds:
            note = f"stopped after {self.max_rounds} proposal round(s)"
        return {"proposer": self.proposer.name, "model": self.proposer.model,
                "calls": sum(c.sent for c in calls), "cached_calls": sum(1 for c in calls if c.cached),
                "blocked_calls": sum(1 for c in calls if c.outcome == "budget"),
                "input_tokens": tin, "output_tokens": tout, "tokens": tin + tout,
                "cost_usd": round(sum(c.cost_usd for c in calls), 6), "token_budget": usage.token_budget,
                "budget_exhausted": self.exhausted, "rounds": self.rounds, "priors_from": self.prior_source,
                "patches_proposed": [{"id": p.id, "title": p.title, "targets": list(p.targets),
                                      "rationale": p.rationale, "evidence": p.evidence,
                                      "status": self.judged.get(p.id, "accepted").split(":", 1)[0],
                                      "reason": self.judged.get(p.id, ":").split(":", 1)[1].strip(),
                                      "expected": p.effect.to_dict(), "spec": p.to_dict()} for p in self.proposed],
                "failed_proposals": [f.to_dict() for f in self.failures], "note": note,
                "prices_as_of": PRICES_AS_OF, "prices_source": PRICES_SOURCE}
