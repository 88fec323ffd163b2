"""The anthropic proposer: contracts, priors and patches from Claude through the anthropic SDK.

Every answer comes through tool use with a JSON schema and is validated
(:mod:`bot.proposers.answers`); invalid answers are retried once with the
error and then recorded as failed proposals. Requests are cached by hash
(:class:`~bot.proposers.llm.ResponseCache`), counted before they are sent and
budgeted in tokens, their large prompt cached by Anthropic for a re-ask, and
retried on 429/529/5xx by the SDK itself (:class:`~bot.proposers.llm.ToolCaller`). What the model
returns is never executed by the bot and never written anywhere but through
the patch mechanism, whose scope audit and verification it must pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bot.proposers.answers import (
    DRAFT_TOOL,
    PATCH_TOOL,
    PRIORS_TOOL,
    validate_draft,
    validate_patches,
    validate_priors,
)
from bot.proposers.llm import LLMConfig, ResponseCache, ToolCaller
from bot.proposers.prompts import SYSTEM, draft_prompt, patches_prompt, priors_prompt
from infrarsi.seams.proposer import RepoSummary
from infrarsi.contract.model import Contract
from infrarsi.patches import PatchSpec
from infrarsi.seams.proposer import ContractProposal, PatchProposal, PriorTable, TrialSummary, Usage
from infrarsi.search.space import SearchSpace


def make_client(api_key: str, config: LLMConfig, http_client: Any = None) -> Any:
    import anthropic

    # The SDK's own retries (exponential backoff with jitter, retry-after honoured) on 408/409/429/5xx/529 and
    # dropped connections: max_attempts counts the first request too.
    return anthropic.Anthropic(api_key=api_key, base_url=config.base_url, timeout=config.timeout_s,
                               max_retries=max(0, config.max_attempts - 1), http_client=http_client)


class AnthropicProposer:
    """Claude as the proposer; ``http_client`` is a seam for tests (recorded exchanges)."""

    name = "anthropic"

    def __init__(self, *, config: LLMConfig, api_key: str, cache_dir: Path | None = None,
                 http_client: Any = None) -> None:
        self.config = config
        self.caller = ToolCaller(client=make_client(api_key, config, http_client), config=config,
                                 cache=ResponseCache(cache_dir))

    @property
    def model(self) -> str:
        return self.config.model

    def usage(self) -> Usage:
        return self.caller.usage()

    def charge(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.caller.charge(input_tokens, output_tokens, cost_usd)

    def draft_contract(self, command: str, repo_summary: RepoSummary, *,
                       tokens_per_step: int | None = None) -> ContractProposal:
        prompt = draft_prompt(command, repo_summary)
        if tokens_per_step is not None:
            prompt += f"\n\nThe human says each step processes {tokens_per_step} tokens."
        answer = self.caller.ask(job="draft_contract", system=SYSTEM, user=prompt, tool=DRAFT_TOOL,
                                 validate=lambda d: validate_draft(d, command=command, summary=repo_summary,
                                                                   model=self.config.model))
        if answer.value is None:
            return ContractProposal(data=None, proposer=self.name, calls=answer.calls, failures=answer.failures)
        data, rationale = answer.value
        return ContractProposal(data=data, rationale=rationale, proposer=self.name, calls=answer.calls,
                                failures=answer.failures)

    def priors(self, contract: Contract, doctor: Any = None, patches: Sequence[PatchSpec] = ()) -> PriorTable:
        features = SearchSpace.from_contract(contract.knobs, contract.constraints, list(patches)).feature_names
        answer = self.caller.ask(job="priors", system=SYSTEM,
                                 user=priors_prompt(contract, doctor, features, patches), tool=PRIORS_TOOL,
                                 validate=lambda d: validate_priors(d, features=tuple(features), contract=contract,
                                                                    model=self.config.model))
        if answer.value is None:
            return PriorTable(proposer=self.name, calls=answer.calls, failures=answer.failures)
        effects, rationale = answer.value
        return PriorTable(effects=effects, rationale=rationale, proposer=self.name, calls=answer.calls,
                          failures=answer.failures)

    def propose_patches(self, contract: Contract, doctor: Any, trials: Sequence[TrialSummary],
                        sources: Mapping[str, str], known: Sequence[PatchSpec] = (),
                        judged: Mapping[str, str] | None = None) -> PatchProposal:
        answer = self.caller.ask(job="propose_patches", system=SYSTEM,
                                 user=patches_prompt(contract, doctor, trials, sources, known, judged or {}),
                                 tool=PATCH_TOOL,
                                 validate=lambda d: validate_patches(d, model=self.config.model))
        seen = {p.id for p in known}
        patches = tuple(p for p in (answer.value or ()) if p.id not in seen)
        return PatchProposal(patches=patches, proposer=self.name, calls=answer.calls, failures=answer.failures,
                             budget_exhausted=answer.budget_exhausted)
