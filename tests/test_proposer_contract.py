"""One suite every Proposer must pass: the built-in one and the anthropic one (against recorded exchanges)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.proposers import BuiltinProposer
from tests.support.anthropic_replay import replayed_proposer
from bot.proposers.session import editable_sources
from bot.stages.init.scan import scan_repo
from infrarsi.contract import load_contract
from infrarsi.contract.load import CONTRACT_FILE, parse_contract
from infrarsi.patches import PatchSpec
from infrarsi.seams.proposer import ContractProposal, PatchProposal, PriorTable, Proposer, TrialSummary, Usage
from infrarsi.search.space import SearchSpace
from tests.support.tinygpt import TINY_ARGS, copy_fixture

COMMAND = f"python train.py {TINY_ARGS}"


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinygpt with its tiny contract, drafted in-process (one per module: the suite only reads it)."""
    from bot.cli.main import main

    repo = copy_fixture(tmp_path_factory.mktemp("proposer") / "tinygpt")
    assert main(["init", str(repo), "--command", COMMAND]) == 0
    return repo


@contextlib.contextmanager
def _builtin(tmp: Path) -> Iterator[tuple[Proposer, None]]:
    from bot.stages.init.draft import draft_contract

    yield BuiltinProposer(drafter=draft_contract), None


@contextlib.contextmanager
def _anthropic(tmp: Path) -> Iterator[tuple[Proposer, object]]:
    # a request with no recorded answer is a 500 that tells the SDK not to retry it (x-should-retry: false)
    with replayed_proposer("draft_tinygpt", "priors_tinygpt", "patch_tinygpt", cache_dir=tmp / "cache") as pair:
        yield pair


@pytest.fixture(params=["builtin", "anthropic"])
def proposer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Proposer, object]]:
    make = _builtin if request.param == "builtin" else _anthropic
    with make(tmp_path) as pair:
        yield pair


def test_charge_counts_against_the_budget_or_is_ignored(proposer) -> None:
    """A resumed run charges what it spent before; a proposer with a model counts it, one without ignores it."""
    p, _ = proposer
    before = p.usage()
    assert isinstance(before, Usage)
    p.charge(1_000, 200, 0.01)
    after = p.usage()
    if p.model is None:
        assert after == before
    else:
        assert (after.input_tokens, after.output_tokens) == (before.input_tokens + 1_000, before.output_tokens + 200)
        assert after.cost_usd == pytest.approx(before.cost_usd + 0.01)


def test_the_three_jobs_answer_with_valid_records(proposer, tiny_repo: Path) -> None:
    p, server = proposer
    summary = scan_repo(tiny_repo, "train.py")
    draft = p.draft_contract(COMMAND, summary)
    assert isinstance(draft, ContractProposal) and draft.ok, draft.failures
    parse_contract(dict(draft.data), source=tiny_repo / CONTRACT_FILE, root=tiny_repo)  # strict loader accepts it
    for section in ("workload", "timing", "scope"):
        for key in draft.data[section]:
            assert draft.rationale.get(f"{section}.{key}"), f"{section}.{key} has no rationale"
    for knob in draft.data.get("knobs", {}):
        assert draft.rationale.get(f"knobs.{knob}")

    contract = load_contract(tiny_repo)
    table = p.priors(contract, None, ())
    assert isinstance(table, PriorTable) and not table.failures
    features = set(SearchSpace.from_contract(contract.knobs, contract.constraints, []).feature_names)
    assert table.effects and set(table.effects) <= features
    for name, effect in table.effects.items():
        assert effect.time_ratio > 0 and effect.time_sigma > 0 and table.rationale[name]

    sources = editable_sources(contract)
    trials = [TrialSummary(trial_no=1, candidate="baseline", patches=(), outcome="ok", step_time_s=0.01)]
    proposal = p.propose_patches(contract, None, trials, sources, known=())
    assert isinstance(proposal, PatchProposal) and not proposal.failures and proposal.patches
    for spec in proposal.patches:
        assert isinstance(spec, PatchSpec) and spec.rationale and spec.effect.source
        assert all(t.partition("::")[0] in sources for t in spec.targets)
    again = p.propose_patches(contract, None, trials, sources, known=proposal.patches)
    assert not {s.id for s in again.patches} & {s.id for s in proposal.patches}, "a known patch is not new"
    if server is not None:  # the model was told which patches it already proposed (the replay has no new answer)
        asked = json.dumps(server.requests[-1]["body"])
        assert all(s.id in asked for s in proposal.patches), asked[-2000:]


def test_same_inputs_give_the_same_answer(proposer, tiny_repo: Path) -> None:
    p, server = proposer
    contract = load_contract(tiny_repo)
    first = p.priors(contract, None, ())
    sent = len(server.requests) if server is not None else 0
    second = p.priors(contract, None, ())
    assert first.effects == second.effects
    if server is not None:  # the anthropic proposer answered from its cache: no request, no tokens
        assert len(server.requests) == sent
        assert second.calls and all(c.cached and c.input_tokens == 0 for c in second.calls)
