"""The levers real repos need, made safe (issue 48), on fixtures written from public conventions: dropgpt (dropout
0.2 on the attention weights and residuals; it prints its last micro-batch's loss) and capmoe (an MoE with a
capacity factor, a load-balancing and a z-loss in a global collector, a hand-written expert loop).

Each cheat ends ``invalid`` with its row named (``dropout``, ``moe``); the honest rewrites (SDPA with its dropout,
checkpointing under dropout, grouped experts) and an honest re-split of a job that prints only its last
micro-batch's loss pass every row; a re-split that leaves a micro-batch out does not; a re-split of an MoE whose
capacity counts one micro-batch is named for the tokens it drops. ``pytest -s`` prints one ``REDTEAM |`` line each.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.patching.catalog import catalog_for_repo
from infrarsi.contract import load_contract
from tests.support.redteam.bench import Bench
from tests.support.redteam.cheats import Cheat
from tests.support.redteam.lever_cheats import (DROP_ARGS, DROPOUT, MOE, MOE_ARGS, drafted_repo, dropped_micro_batch,
                                                with_micro_batch_knob)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def drop_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench.open(drafted_repo("dropgpt", Path(tmp_path_factory.mktemp("levers-drop")), DROP_ARGS))


@pytest.fixture(scope="module")
def capmoe_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    """capmoe with its micro-batch as a knob after all (the baseline is the same; a re-split can be tried)."""
    return Bench.open(with_micro_batch_knob(drafted_repo("capmoe", Path(tmp_path_factory.mktemp("levers-moe")),
                                                         MOE_ARGS)))


#: In the suite one cheat of each kind and the honest rewrites a promotion would rest on, to keep CI short;
#: ``REDTEAM_FULL=1`` runs every cheat and every honest rewrite.
FULL = os.environ.get("REDTEAM_FULL") == "1"
DROPOUT_CHEATS = [c for c in DROPOUT if FULL or c.name == "attention_dropout_off"]
MOE_CHEATS = [c for c in MOE if FULL or c.name != "aux_loss_down_weighted"]
HONEST = [("dropgpt", "sdpa_causal_attention"), ("capmoe", "grouped_experts")] + (
    [("dropgpt", "checkpoint_blocks"), ("capmoe", "sdpa_causal_attention")] if FULL else [])


def _show(fixture: str, name: str, judged) -> None:  # noqa: ANN001
    print(f"\nREDTEAM | {fixture} | {name} | {judged.verdict} | {judged.caught_by} | {judged.reason()[:300]}")


def _caught_by(bench: Bench, cheat: Cheat, row: str) -> None:
    judged = bench.judge(knobs=dict(cheat.knobs), patches=cheat.specs())
    _show(bench.repo.name, cheat.name, judged)
    assert judged.verdict == "invalid", judged.checks
    assert row in {c.name for c in judged.checks if c.broken}, judged.reason()


@pytest.mark.parametrize("cheat", DROPOUT_CHEATS, ids=[c.name for c in DROPOUT_CHEATS])
def test_dropout_switched_off_or_lowered_is_invalid_on_the_dropout_row(drop_bench: Bench, cheat: Cheat) -> None:
    _caught_by(drop_bench, cheat, "dropout")


@pytest.mark.parametrize("cheat", MOE_CHEATS, ids=[c.name for c in MOE_CHEATS])
def test_capacity_auxiliary_losses_and_skipped_tokens_are_invalid_on_the_moe_row(capmoe_bench: Bench,
                                                                                cheat: Cheat) -> None:
    _caught_by(capmoe_bench, cheat, "moe")


@pytest.mark.parametrize(("fixture", "patch"), HONEST, ids=[f"{f}-{p}" for f, p in HONEST])
def test_an_honest_rewrite_passes_every_row(request: pytest.FixtureRequest, fixture: str, patch: str) -> None:
    """SDPA with the attention's dropout (its masks keyed as the explicit dropout's), checkpointing under dropout
    (the recomputation redraws the same masks), grouped experts over capmoe's module list."""
    bench = request.getfixturevalue("drop_bench" if fixture == "dropgpt" else "capmoe_bench")
    judged = bench.judge(patches=(bench.ctx.patches[patch],))
    _show(fixture, patch, judged)
    assert judged.verdict == "ok", [c for c in judged.checks if not c.ok]
    assert any(c.name == ("dropout" if fixture == "dropgpt" else "moe") and c.ok for c in judged.checks)


def test_checkpointing_capmoe_blocks_is_declined_for_their_global_collector(capmoe_bench: Bench) -> None:
    entry = next(a for a in catalog_for_repo(load_contract(capmoe_bench.repo)) if a.entry.codemod == "checkpoint_blocks")
    assert not entry.applies and any("AUX.add(" in why and "outside themselves" in why for why in entry.reasons)


@pytest.mark.parametrize("with_patch", [False, True], ids=["alone", "with-sdpa"])
def test_an_honest_resplit_of_a_job_printing_its_last_micro_batch_verifies(drop_bench: Bench, with_patch: bool) -> None:
    """dropgpt prints its last micro-batch's loss: 2 x 2 and 4 x 1 print other numbers for the same step. The
    re-split is held to the baseline at its own split, on the loss the witness saw reach backward() over the whole
    step, the gradients and the weights."""
    patches = (drop_bench.ctx.patches["sdpa_causal_attention"],) if with_patch else ()
    judged = drop_bench.judge(knobs={"batch_size": 4, "gradient_accumulation_steps": 1}, patches=patches)
    _show("dropgpt", "re-split 4 x 1" + (" + sdpa" if with_patch else ""), judged)
    assert judged.verdict == "ok", [c for c in judged.checks if not c.ok]
    assert any(c.name == "split_reference" and c.ok for c in judged.checks)


def test_a_resplit_that_drops_a_micro_batch_is_invalid(drop_bench: Bench) -> None:
    cheat = dropped_micro_batch((drop_bench.repo / "train.py").read_text())
    judged = drop_bench.judge(knobs={"batch_size": 1, "gradient_accumulation_steps": 4}, patches=cheat.specs())
    _show("dropgpt", cheat.name, judged)
    assert judged.verdict == "invalid", judged.checks


def test_a_resplit_of_an_moe_with_capacity_is_named_for_the_tokens_it_drops(capmoe_bench: Bench) -> None:
    """The split baseline at micro-batch 2 caps its experts at half the assignments of a forward at 4: "expert
    capacity is computed per micro-batch", never "less work"."""
    judged = capmoe_bench.judge(knobs={"micro_batch_size": 2})
    _show("capmoe", "re-split 4 -> 2", judged)
    split = next(c for c in judged.checks if c.name == "split_reference")
    assert split.broken and "expert capacity is computed per micro-batch" in split.detail, split.detail
    assert "capped its experts at 10 assignments a forward, the baseline at 20" in split.detail
