"""Acceptance: the block-skipping patch of issue 16, proposed through the anthropic proposer, ends invalid.

The recorded exchange (fixtures/recorded/anthropic/patch_skip_blocks.json) is a
Messages API answer proposing ``for block in self.blocks[: max(1, len(self.blocks) // 2)]:``
as a speedup. With the contract ``infrarsi init`` drafts, the doctor and then
verification run as the CLI runs them; the verdict must be ``invalid`` and its
reason must name the work the candidate no longer does.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.executors.local import LocalExecutor
from bot.workspace import GitWorkspace
from tests.support.anthropic_replay import replayed_proposer
from bot.proposers.session import editable_sources
from bot.stages.doctor.baseline import run_doctor
from bot.stages.run.candidate import trial_context
from infrarsi.rundir import journal_path
from bot.stages.run.verify import verify_candidate
from infrarsi.contract import load_contract
from infrarsi.contract.lock import read_lock
from infrarsi.journal import Journal
from infrarsi.trial_record import Candidate
from infrarsi.verdict import VerdictKind
from tests.support.redteam.bench import gpt_repo

pytestmark = pytest.mark.slow


def _device_figures(*_: object, **__: object) -> dict:
    """The device probe's answer, as ``bot.stages.doctor.device_probe`` prints it, without the minutes its matmul
    sweep takes on a shared CI box (it has its own tests; nothing here depends on the peak)."""
    return {"peak_flops": {"fp32": 1e11, "bf16": 1e11}, "peak_flops_method": "stand-in for the test",
            "fingerprint": {"cpu": "test"}}


def test_the_block_skipping_patch_from_the_anthropic_proposer_is_invalid_with_the_work_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bot.stages.doctor.baseline.measure_device", _device_figures)
    repo = gpt_repo(tmp_path)
    contract = load_contract(repo)
    assert contract.loss.rtol <= 0.005, "the drafted default no longer invites 2%"
    with replayed_proposer("patch_skip_blocks") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, [], editable_sources(contract))
    assert server.requests and server.requests[0]["path"].startswith("/v1/messages")
    (spec,) = proposal.patches
    assert "self.blocks[: max(1, len(self.blocks) // 2)]" in (spec.replacement or "")

    with Journal(journal_path(repo)) as journal:
        ctx = trial_context(contract, read_lock(repo), workspace=GitWorkspace(repo), executor=LocalExecutor(),
                            journal=journal)
        ctx = replace(ctx, patches={**ctx.patches, spec.id: spec})
        doctor, _ = run_doctor(ctx, run_id="skip", repeats=2)
        assert doctor.work is not None and doctor.work.flops
        verdict = verify_candidate(ctx, run_id="skip", candidate=Candidate.of(contract.defaults(), (spec.id,)),
                                   doctor=doctor, pairs=2)
    print("\nVERDICT", verdict.kind.value, verdict.reason)
    assert verdict.kind is VerdictKind.INVALID
    assert verdict.reason.startswith("work: "), verdict.reason
    assert "less work than the baseline" in verdict.reason and "MFLOP" in verdict.reason
    broken = {c.name for c in verdict.invariants if not c.ok}
    assert {"work", "trainable"} <= broken, broken
