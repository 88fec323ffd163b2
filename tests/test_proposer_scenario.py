"""Model-written patches as first-class candidates, on the tiny tinygpt config, against a recorded exchange.

The model proposes three patches (``fixtures/recorded/anthropic/patch_collisions.json``):
a correct SDPA rewrite of ``CausalSelfAttention.forward`` (the symbol the catalog's
``sdpa_causal_attention`` rewrites), a rewrite of ``harness.py::lr_at`` (a locked
file) and a loss that sums per sequence (it changes what the job computes). The
locked-file patch is rejected when proposed and costs no trial; the two attention
patches are never stacked; the invalid one is verified at most once and then
excluded, so the correct model patch is verified in its place and can win.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bot.executors.local import LocalExecutor
from bot.workspace import GitWorkspace
from bot.patching.catalog import applicable_patches
from bot.patching.screen import commit_reader, screen_patches
from bot.proposers.session import editable_sources
from bot.stages.doctor.baseline import run_doctor
from bot.stages.run.candidate import TrialContext
from bot.stages.run.search import _verify_top
from bot.workspace.commits import repo_head_commit
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.journal import Journal
from infrarsi.rundir import journal_path
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome
from infrarsi.verdict import VerdictKind
from tests.support.anthropic_replay import replayed_proposer
from tests.support.tinygpt import committed_tinygpt

pytestmark = pytest.mark.slow


def test_a_correct_model_patch_runs_and_is_verified_beside_a_colliding_a_locked_and_an_invalid_one(
        tmp_path: Path) -> None:
    repo = committed_tinygpt(tmp_path / "tinygpt")
    contract_file = repo / "infrarsi.toml"
    contract_file.write_text(contract_file.read_text() + "\n[verify]\ntop_k = 1\nmax_pairs = 4\n")
    from bot.cli.main import main
    from tests.support.repos import commit_all

    assert main(["lock", str(repo)]) == 0
    commit_all(repo, "verify settings")
    contract = load_contract(repo)
    with replayed_proposer("patch_collisions") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, [], editable_sources(contract))
    assert len(server.requests) == 1
    correct, locked, invalid = proposal.patches
    catalog = applicable_patches(contract)
    base = repo_head_commit(repo)

    # Proposal time: each patch applied alone to the base and audited.
    screening = screen_patches(commit_reader(GitWorkspace(repo), base), [*catalog.values(), *proposal.patches],
                               contract.scope)
    assert list(screening.rejected) == [locked.id]
    assert "harness.py" in screening.rejected[locked.id] and "locked" in screening.rejected[locked.id]
    patches = {p.id: p for p in screening.accepted}
    assert "sdpa_causal_attention" in patches[correct.id].conflicts_with  # derived from what both change
    assert correct.id in patches["sdpa_causal_attention"].conflicts_with
    space = SearchSpace.from_contract(contract.knobs, contract.constraints, list(patches.values()))
    stacked = Candidate.of(contract.defaults(), patches=(correct.id, "sdpa_causal_attention"))
    assert not space.contains(stacked)
    import numpy as np

    assert not any({correct.id, "sdpa_causal_attention"} <= set(c.patches)
                   for c in space.sample(np.random.default_rng(0), 200))

    with Journal(journal_path(repo)) as journal:
        ctx = TrialContext(contract=contract, lock=read_lock(repo), repo=repo, executor=LocalExecutor(),
                           journal=journal, patches=patches, base=base, workspace=GitWorkspace(repo))
        doctor, _ = run_doctor(ctx, run_id="scn", repeats=2)
        # Stacked anyway (by hand), the two attention rewrites are refused before anything runs.
        refused = ctx.run("scn", stacked)
        assert refused.outcome is Outcome.REJECTED and refused.cost_s == 0
        assert "also changes model.py::CausalSelfAttention.forward" in refused.reason
        search = [ctx.run("scn", Candidate.of(contract.defaults(), patches=ids))
                  for ids in ((invalid.id, "sdpa_causal_attention"), (invalid.id,), (correct.id,))]
        assert [r.outcome for r in search] == [Outcome.OK] * 3, [r.reason for r in search]
        # The invalid candidates measured fastest: they are first in line for verification.
        search = [dataclasses.replace(r, metrics=dataclasses.replace(r.metrics, step_time_s=t))
                  for r, t in zip(search, (0.001, 0.002, 0.003))]
        verdicts = _verify_top(ctx, run_id="scn", doctor=doctor, search=search,
                               baseline=Candidate.of(contract.defaults()), progress=lambda e: None)
        every = journal.trials("scn")

    with_invalid = [v for v in verdicts if invalid.id in v.candidate.patches]
    assert len(with_invalid) == 1 and with_invalid[0].kind is VerdictKind.INVALID
    (last,) = [v for v in verdicts if correct.id in v.candidate.patches]
    assert last.kind is not VerdictKind.INVALID and last.kind is not VerdictKind.QUARANTINED, last.reason
    assert not any(locked.id in r.candidate.patches for r in every), "the locked-file patch cost no trial"
