"""Cheats the quarantine stops: each adds what a speed patch never needs, so it ends ``quarantined`` — never run,
no trial, no device time — through the same worktree/patch/audit path a model-written patch takes; what the
static scan cannot see by design (a name built at run time) still meets the lock.

The screening tests are fast (the patch applied alone to the fixture, as when proposed); the bench's are slow only
because the bench witnesses its baseline once per session (shared with test_cheats.py): a quarantined cheat
itself costs no trial.
"""

from __future__ import annotations

import pytest

from bot.patching.screen import dir_reader, screen_one
from infrarsi.contract.model import Scope
from infrarsi.trial_record import QUARANTINED, Outcome
from tests.support.redteam.bench import Bench
from tests.support.redteam.quarantine_cheats import QUARANTINED as CHEATS, UNSEEN
from tests.support.redteam.cheats import Cheat
from tests.support.tinygpt import REPO

TINYGPT = Scope(editable=("train.py::train_step", "model.py"), locked=("harness.py", "data.py"))
NAMES = [c.name for c in CHEATS]


def _screen(cheat: Cheat) -> object:
    (spec,) = cheat.specs()
    return screen_one(dir_reader(REPO / "fixtures" / "tinygpt"), spec, TINYGPT)


@pytest.mark.parametrize("cheat", list(CHEATS), ids=NAMES)
def test_a_cheat_is_quarantined_when_proposed_with_each_line_named(cheat: Cheat) -> None:
    why = _screen(cheat)
    assert isinstance(why, str) and why.startswith(QUARANTINED), why
    for construct in CHEATS[cheat]:
        assert f": {construct} (" in why, (construct, why)
    assert all(part.startswith("train.py:") for part in why.removeprefix(QUARANTINED).split("; ")), why


@pytest.mark.parametrize("cheat", UNSEEN, ids=[c.name for c in UNSEEN])
def test_a_name_built_at_run_time_passes_the_scan_and_is_left_to_the_lock(cheat: Cheat) -> None:
    """The scan is a tripwire, not a proof (docs/trials.md, "The quarantine"): these must still run, so that the
    red team on every executor shows the lock catching it (test_every_executor.py)."""
    assert not isinstance(_screen(cheat), str)


@pytest.mark.slow
@pytest.mark.parametrize("cheat", list(CHEATS), ids=NAMES)
def test_a_cheat_ends_quarantined_never_run_through_the_patch_path(bench: Bench, cheat: Cheat) -> None:
    before = len(bench.ctx.journal.trials("redteam"))
    judged = bench.judge(patches=cheat.specs())
    print(f"\nREDTEAM | {bench.repo.name} | {cheat.name} | {judged.verdict} | {judged.caught_by[:200]}")
    assert judged.verdict == "quarantined" and judged.first == "quarantine", judged.record.reason
    record = judged.record
    assert record.outcome is Outcome.REJECTED and record.cost_s == 0.0 and record.commit is None
    assert record.metrics.step_time_s is None and record.returncode is None  # nothing was launched
    for construct in CHEATS[cheat]:
        assert f": {construct} (" in record.reason, (construct, record.reason)
    flagged = [a for a in record.audit if a.get("kind") == "quarantined"]
    assert flagged and all(a["path"] == "train.py" and a["symbol"].startswith("train_step") for a in flagged)
    assert len(bench.ctx.journal.trials("redteam")) == before + 1  # on the record, with zero device time


@pytest.mark.slow
@pytest.mark.parametrize("cheat", UNSEEN, ids=[c.name for c in UNSEEN])
def test_what_the_scan_cannot_see_the_lock_catches(gpt_bench: Bench, cheat: Cheat) -> None:
    lock = (gpt_bench.repo / "infrarsi.lock").read_bytes()
    try:
        judged = gpt_bench.judge(patches=cheat.specs())
    finally:
        (gpt_bench.repo / "infrarsi.lock").write_bytes(lock)
    print(f"\nREDTEAM | tinygpt | {cheat.name} | {judged.verdict} | {judged.caught_by} | {judged.reason()[:200]}")
    assert judged.verdict == "invalid", judged.checks
    assert judged.first == "lock" and "lock broken" in judged.record.reason, judged.reason()
