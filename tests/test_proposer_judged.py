"""Model patches judged when proposed, and what was judged stays judged (fast: no trial runs).

The proposal-time audit applies each proposed patch alone to the base tree and
audits it against the scope: a locked-file patch is rejected once, never
enters the search space, and the next round tells the model why. A patch found
invalid is excluded from every later candidate the space proposes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infrarsi.search.blame import Judgements
from bot.patching.screen import dir_reader, screen_patches
from bot.proposers.session import ProposerSession, editable_sources
from infrarsi.contract import load_contract
from infrarsi.journal import Journal
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate
from tests.support.tinygpt import TINY_ARGS, copy_fixture
from tests.support.anthropic_replay import prompt_of, replayed_proposer


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory):
    from bot.cli.main import main

    repo = copy_fixture(tmp_path_factory.mktemp("judged") / "tinygpt")
    assert main(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]) == 0
    return load_contract(repo)


def test_a_rejected_proposal_is_judged_once_kept_out_of_the_space_and_told_to_the_model(
        contract, tmp_path: Path) -> None:
    with replayed_proposer("patch_collisions", "patch_tinygpt") as (proposer, server), \
            Journal(tmp_path / "journal.sqlite") as journal:
        session = ProposerSession(proposer=proposer, journal=journal, run_id="r", run_dir=tmp_path / "run")
        new = session.propose(contract, None, [], {}, lambda _: None)
        correct, locked, invalid = new
        screening = screen_patches(dir_reader(contract.root), new, contract.scope)
        assert set(screening.rejected) == {locked.id}
        assert "harness.py" in screening.rejected[locked.id]
        assert {p.id for p in screening.accepted} == {correct.id, invalid.id}
        for pid, why in screening.rejected.items():
            assert session.judge(pid, "rejected", why)
            assert not session.judge(pid, "rejected", why), "judged once"
        space = SearchSpace.from_contract(contract.knobs, contract.constraints, list(screening.accepted))
        assert locked.id not in space.patch_ids
        # The next round: the model sees its earlier patches and what became of them.
        session.propose(contract, None, [], {p.id: p for p in screening.accepted}, lambda _: None)
        summary = session.summary()
    prompt = prompt_of(server.requests[1])
    assert f'"id": "{locked.id}"' in prompt and "rejected: outside the editable scope: harness.py" in prompt
    statuses = {p["id"]: (p["status"], p["reason"]) for p in summary["patches_proposed"]}
    assert statuses[locked.id][0] == "rejected" and "locked" in statuses[locked.id][1]
    assert statuses[correct.id] == ("accepted", "")
    assert summary["calls"] == len(server.requests) == 2


def test_a_patch_judged_invalid_is_never_proposed_again_and_vindicated_patches_are_not_blamed(contract) -> None:
    judged = Judgements()
    defaults = contract.defaults()
    judged.vindicate(["fused_gelu"])  # a trial with it kept the loss inside the band
    blamed = judged.judge(Candidate.of(defaults, patches=("bad_loss", "fused_gelu")), "loss left the band")
    assert blamed == ("bad_loss",)
    assert "judged invalid" in judged.excludes(Candidate.of(defaults, patches=("bad_loss",)))
    assert judged.excludes(Candidate.of(defaults, patches=("fused_gelu",))) is None
    knob_only = Candidate.of({**defaults, "dtype": "bf16"})
    assert judged.judge(knob_only, "final loss 3% worse") == () and judged.excludes(knob_only)

    from infrarsi.patches import Effect, PatchSpec

    effect = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")
    specs = [PatchSpec(id=i, title=i, rationale="r", targets=(f"model.py::{t}",), effect=effect, kind="codemod",
                       codemod="fused_gelu") for i, t in (("bad_loss", "GPT.forward"), ("fused_gelu", "gelu_tanh"),
                                                         ("other", "MLP.forward"))]
    space = SearchSpace.from_contract(contract.knobs, contract.constraints, specs, judged.excluded_sets)
    points = space.sample(np.random.default_rng(1), 300)
    assert points and not any("bad_loss" in c.patches for c in points)
    assert any("fused_gelu" in c.patches for c in points)
    assert all("bad_loss" not in c.patches for p in points[:20] for c in space.neighbors(p))
    assert "holds bad_loss, judged invalid" in space.violations(Candidate.of(space.baseline().knob_dict(),
                                                                              patches=("bad_loss",)))
