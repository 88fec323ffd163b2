"""The built-in proposer: offline, deterministic, free.

Contracts come from the init stage's static scan (handed in as ``drafter``), priors from the
documented tables (``infrarsi/search/builtin_priors.py`` for knobs, ``bot/patching/catalog.py`` for
patches; sources in docs/priors.md), patches from the libcst catalog entries
that apply to the repo's editable scope.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from infrarsi.search.builtin_priors import KNOB_PRIORS
from infrarsi.contract.model import Contract
from infrarsi.patches import Effect, PatchSpec
from infrarsi.seams.proposer import (ContractDrafter, ContractProposal, PatchProposal, PriorTable, RepoSummary,
                                     TrialSummary, Usage)
from infrarsi.search.space import SearchSpace


class BuiltinProposer:
    """The offline default; every method is a pure function of its inputs and the repo on disk."""

    name = "builtin"
    model: str | None = None

    def __init__(self, *, drafter: ContractDrafter | None = None) -> None:
        self._drafter = drafter  # the init stage's static drafter: a proposer never imports a stage
        self._catalog: dict[tuple[str, str], dict[str, PatchSpec]] = {}  # (root, sources digest) → applicable

    def draft_contract(self, command: str, repo_summary: RepoSummary, *,
                       tokens_per_step: int | None = None) -> ContractProposal:
        """The drafter's draft. Raises its :class:`bot.stages.init.draft.DraftError` when the scan cannot infer
        what it must not guess; built without a drafter (a programming error: ``init`` hands it in), TypeError."""
        if self._drafter is None:
            raise TypeError("the built-in proposer drafts with the init stage's static scan: build it with "
                            "drafter=bot.stages.init.draft.draft_contract")
        draft = self._drafter(command, repo_summary, tokens_per_step=tokens_per_step)
        return ContractProposal(data=draft.data, rationale=dict(draft.notes), proposer=self.name)

    def priors(self, contract: Contract, doctor: Any = None, patches: Sequence[PatchSpec] = ()) -> PriorTable:
        space = SearchSpace.from_contract(contract.knobs, contract.constraints, list(patches))
        effects: dict[str, Effect] = {}
        rationale: dict[str, str] = {}
        for name in space.feature_names:
            if name.startswith("patch:"):
                continue
            for pattern, t, t_sd, m, m_sd in KNOB_PRIORS:
                if re.match(pattern, name):
                    effects[name] = Effect(time_ratio=t, time_sigma=t_sd, mem_ratio=m, mem_sigma=m_sd,
                                           source="docs/priors.md#knobs")
                    rationale[name] = f"built-in table row {pattern!r}"
                    break
        for spec in patches:
            effects[f"patch:{spec.id}"] = spec.effect
            rationale[f"patch:{spec.id}"] = spec.rationale
        return PriorTable(effects=effects, rationale=rationale, proposer=self.name)

    def propose_patches(self, contract: Contract, doctor: Any, trials: Sequence[TrialSummary],
                        sources: Mapping[str, str], known: Sequence[PatchSpec] = (),
                        judged: Mapping[str, str] | None = None) -> PatchProposal:
        from bot.patching.catalog import applicable_patches

        seen = {p.id for p in known}
        key = (str(contract.root), hashlib.sha256(json.dumps(sorted(sources.items())).encode()).hexdigest())
        if key not in self._catalog:  # running every codemod over the editable files takes seconds
            self._catalog[key] = applicable_patches(contract)
        new = tuple(spec for pid, spec in sorted(self._catalog[key].items()) if pid not in seen)
        return PatchProposal(patches=new, proposer=self.name)

    def usage(self) -> Usage:
        return Usage()

    def charge(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        """Nothing to charge: the built-in tables cost no tokens."""
