"""The "Model calibration" table: main effects first, "in the winner" true exactly where the winner's candidate
switches the term on (checked against the search model's own design row), interactions only above the noise."""

from __future__ import annotations

import math

import numpy as np

from infrarsi.report.model import _calibration
from infrarsi.report.render import render_sections
from infrarsi.search.engine import SearchEngine
from infrarsi.trial_record import Candidate
from tests.support.demo_space import DEMO_KNOBS, SPACE, demo_record
from tests.support.reports import sample_report


def _fitted() -> tuple[SearchEngine, dict]:
    engine = SearchEngine(SPACE, seed=5)
    batch = [p.candidate for p in engine.initial_batch(10)]
    engine.observe([demo_record(i, c) for i, c in enumerate(batch, start=1)])
    return engine, engine.posterior_report().to_dict()


def test_in_the_winner_matches_the_winner_s_candidate() -> None:
    engine, posterior = _fitted()
    # The case: the foreach optimizer knob and two patches, neither the fused optimizer nor SDPA.
    winner = SPACE.complete(Candidate.of({"dtype": "bf16", "optimizer": "adamw_foreach", "micro_batch": 8},
                                         ("fused_gelu", "zero_grad_set_to_none")))
    assert SPACE.contains(winner)
    rows = _calibration(posterior, winner, DEMO_KNOBS)
    design = engine.features.expand(SPACE.encode(winner)[None, :])[0]
    on = {name for name, x in zip(engine.features.names, design) if x != 0}
    assert rows and all(r.in_winner == (r.effect in on) for r in rows), [(r.effect, r.in_winner) for r in rows]
    shown = {r.effect: r.in_winner for r in rows}
    assert shown.get("optimizer=adamw_fused") is not True and shown.get("patch:sdpa_causal_attention") is not True
    assert shown["dtype=bf16"] and shown["optimizer=adamw_foreach"] and shown["patch:fused_gelu"]
    # Main effects first, the winner's at the top; then only interaction terms that moved more than the noise.
    kinds = [r.kind for r in rows]
    assert kinds == sorted(kinds, key=lambda k: k != "main")
    mains = [r for r in rows if r.kind == "main"]
    assert [r.in_winner for r in mains] == sorted((r.in_winner for r in mains), reverse=True)
    sigma = posterior["time_sigma"]
    for r in rows:
        if r.kind != "main":
            assert abs(math.log(r.posterior_ratio) - math.log(r.prior_ratio)) > sigma
    hidden = [e for e in posterior["time_effects"] if "*" in e["feature"]
              and abs(e["post_mean"] - e["prior_mean"]) <= sigma]
    assert hidden and not {e["feature"] for e in hidden} & set(shown)


def test_the_table_renders_mains_then_moved_interactions() -> None:
    _, posterior = _fitted()
    winner = SPACE.complete(Candidate.of({"dtype": "bf16"}, ("fused_gelu",)))
    text = render_sections(sample_report(calibration=_calibration(posterior, winner, DEMO_KNOBS)))
    section = text.split("## Model calibration")[1].split("## Reproduce")[0]
    assert "| `dtype=bf16` |" in section and section.count("| yes |") >= 2
    assert ("Interaction terms that moved" in section) or ("No interaction term moved" in section)
    assert np.isfinite(posterior["time_sigma"])
