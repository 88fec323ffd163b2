"""The Proposer protocol: who drafts contracts, states priors and writes code patches.

Three jobs, each answered with a frozen record rather than an exception, so a
proposer that fails (a model that answers nonsense, a spent token budget) is
on the record and the run goes on without it:

- :meth:`Proposer.draft_contract` — a contract draft for ``infrarsi init``,
  every field with a rationale (written as a comment above it);
- :meth:`Proposer.priors` — expected effect of each knob value and each patch
  on step time and peak memory, with an uncertainty (:class:`~infrarsi.patches.Effect`);
- :meth:`Proposer.propose_patches` — new replacement patches for editable
  symbols, having seen every trial so far (failures and their reasons included).

Implementations live in ``bot/proposers``: the built-in one (offline, the
default) and the anthropic one. Both pass ``tests/test_proposer_contract.py``.
Nothing a proposer returns is trusted: patches go through the same libcst
application, scope audit and verification as catalog patches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from infrarsi.patches import Effect, PatchSpec
from infrarsi.search.features import Priors

PROPOSAL_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMCall:
    """One request to a model (or a cache hit standing in for one) and what it cost."""

    job: str  # "draft_contract" | "priors" | "propose_patches"
    request_hash: str
    model: str
    input_tokens: int = 0  # every input token, the prompt cache's writes and reads included
    output_tokens: int = 0
    cost_usd: float = 0.0
    #: Of ``input_tokens``, those written to and read from Anthropic's prompt cache (priced 1.25x and 0.1x of
    #: an input token); 0 in records written before they were counted.
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cached: bool = False
    outcome: str = "ok"  # "ok" | "invalid" | "error" | "budget"
    error: str = ""
    attempt: int = 1
    #: HTTP requests this call sent (retries included; 0 for a cache hit or a budget block); None in
    #: records written before it was counted, read as 1 unless cached or blocked.
    requests: int | None = None

    @property
    def sent(self) -> int:
        if self.requests is not None:
            return self.requests
        return 0 if self.cached or self.outcome == "budget" else 1

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProposalFailure:
    """A proposal that was not passed on: why, and the (truncated) answer it came from."""

    job: str
    error: str
    answer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "error": self.error, "answer": self.answer}


@dataclass(frozen=True, kw_only=True, slots=True)
class ContractProposal:
    """A drafted contract table (TOML shape) and a rationale per dotted key; ``data`` is None on failure."""

    data: Mapping[str, Any] | None
    rationale: Mapping[str, str] = field(default_factory=dict)
    proposer: str = ""
    calls: tuple[LLMCall, ...] = ()
    failures: tuple[ProposalFailure, ...] = ()

    @property
    def ok(self) -> bool:
        return self.data is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorTable:
    """Expected effects by search-space feature name (``dtype=bf16``, ``micro_batch``, ``patch:<id>``).

    ``rationale`` says where each figure comes from. :meth:`to_priors` turns the
    table into the engine's Gaussian priors on log ratios.
    """

    effects: Mapping[str, Effect] = field(default_factory=dict)
    rationale: Mapping[str, str] = field(default_factory=dict)
    proposer: str = ""
    calls: tuple[LLMCall, ...] = ()
    failures: tuple[ProposalFailure, ...] = ()

    def to_priors(self, base: Priors | None = None) -> Priors:
        base = base or Priors()
        time = dict(base.time)
        memory = dict(base.memory)
        for name, e in self.effects.items():
            time[name] = (math.log(e.time_ratio), e.time_sigma)
            memory[name] = (math.log(e.mem_ratio), e.mem_sigma)
        # everything else in ``base`` (which part each feature acts on, per-part priors) is kept: a
        # proposer states total effects, and dropping the parts would silently switch the models off
        return replace(base, time=time, memory=memory)

    def to_dict(self) -> dict[str, Any]:
        return {"proposer": self.proposer,
                "effects": {k: {**v.to_dict(), "rationale": self.rationale.get(k, "")}
                            for k, v in sorted(self.effects.items())},
                "failures": [f.to_dict() for f in self.failures]}


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchProposal:
    """New patches (replacement definitions, each with rationale, evidence and expected effect).

    ``budget_exhausted`` is set when the proposer refused to ask (or to ask
    again) because the run's token budget is spent: the run stops proposing.
    """

    patches: tuple[PatchSpec, ...] = ()
    proposer: str = ""
    calls: tuple[LLMCall, ...] = ()
    failures: tuple[ProposalFailure, ...] = ()
    budget_exhausted: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialSummary:
    """What a proposer is told about one trial: enough to learn from it, nothing it could act on."""

    trial_no: int
    candidate: str
    patches: tuple[str, ...]
    outcome: str
    reason: str = ""
    step_time_s: float | None = None
    peak_mem_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in
                ((k, getattr(self, k)) for k in self.__slots__)}  # type: ignore[attr-defined]


# -- what a proposer is told about the repo (read statically by ``init``'s scan) --

@dataclass(frozen=True, kw_only=True, slots=True)
class ArgFlag:
    """One ``add_argument`` call, as far as it can be read without running it."""

    flag: str
    dest: str
    type: str | None = None  # "int", "float", "str" or None
    default: Any = None
    has_default: bool = False
    choices: tuple[Any, ...] | None = None
    action: str | None = None
    help: str = ""
    line: int = 0
    aliases: tuple[str, ...] = ()  # the other option strings of the same argument (``-b`` for ``--batch-size``)


@dataclass(frozen=True, kw_only=True, slots=True)
class FileSummary:
    """What a Python file of the repo defines and uses."""

    path: str
    modules: tuple[str, ...]  # classes deriving from (nn.)Module
    classes: tuple[str, ...]
    functions: tuple[str, ...]  # top-level functions
    uses_timing: bool
    uses_probe: bool
    lines: int
    class_bases: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (class, base expressions), for module detection
    trains: tuple[str, ...] = ()  # top-level functions that run a backward pass or build the optimizer or loader
    is_script: bool = False  # reads a command line itself (argparse, fire, Hydra, a configurator): an entry script


@dataclass(frozen=True, kw_only=True, slots=True)
class RepoSummary:
    """What ``init`` (and a proposer) knows about a repo before anything runs."""

    root: Path
    entry: str | None
    flags: tuple[ArgFlag, ...]
    files: tuple[FileSummary, ...]
    #: what git does not track in ``root`` -> "ignored" or "untracked" (``Workspace.outside_git``); {} outside git
    outside_git: Mapping[str, str] = field(default_factory=dict)

    def file(self, path: str) -> FileSummary | None:
        return next((f for f in self.files if f.path == path), None)


class ContractDrafter(Protocol):
    """The init stage's static drafter (``bot.stages.init.draft.draft_contract``), handed to the built-in
    proposer by whoever builds it: a proposer never imports a stage."""

    def __call__(self, command: str, summary: RepoSummary, *, tokens_per_step: int | None = None) -> Any: ...


@runtime_checkable
class Proposer(Protocol):
    """Drafts contracts, states priors and proposes patches.

    Contract: no method raises for a bad answer or a spent budget — it returns a
    record with ``failures`` (and ``budget_exhausted``). Calls with the same
    inputs give the same records (the anthropic proposer caches responses by
    request), so a rerun is reproducible. ``usage()`` is the running total of
    every call this instance made.

    Thread safety: none; one run's search drives one instance from one thread.
    """

    name: str
    #: The model that answers (reported in run.json and in contract comments); None for the built-in tables.
    model: str | None

    def draft_contract(self, command: str, repo_summary: RepoSummary, *,
                       tokens_per_step: int | None = None) -> ContractProposal: ...

    def priors(self, contract: Any, doctor: Any, patches: Sequence[PatchSpec] = ()) -> PriorTable: ...

    def propose_patches(self, contract: Any, doctor: Any, trials: Sequence[TrialSummary],
                        sources: Mapping[str, str], known: Sequence[PatchSpec] = (),
                        judged: Mapping[str, str] | None = None) -> PatchProposal:
        """New patches, not among ``known``; ``judged`` (patch id → "rejected: why" / "invalid: why")
        says what became of earlier proposals, so a proposer can learn from it."""
        ...

    def usage(self) -> Usage: ...

    def charge(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        """Count tokens an earlier process of this run spent (a resumed run) against the budget.
        A proposer without a budget ignores it."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Tokens and dollars spent so far, against the budget (None: unlimited)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0  # requests sent
    cached_calls: int = 0
    blocked_calls: int = 0  # requests the token budget stopped before they were sent
    token_budget: int | None = None
    budget_exhausted: bool = False
    failed_proposals: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]
        out["tokens"] = self.tokens
        return out
