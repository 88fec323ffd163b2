"""docs/CORPUS.md is rendered from the committed corpus data alone, covers every fixture, and labels the interval
at the level the verifications recorded (90% at the default alpha), never at one they were not computed at."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.corpus import CORPUS, DATA, DOC
from benchmarks.corpus_doc import ci_level, load, render

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_doc_is_the_rendering_of_the_committed_data() -> None:
    assert DOC.read_text() == render(load(DATA)), "rerun `python benchmarks/corpus.py render`"


def test_every_job_fixture_is_in_the_corpus_and_in_its_data() -> None:
    jobs = {p.parent.name for p in (ROOT / "fixtures").glob("*/*.py")} | \
        {p.parents[1].name for p in (ROOT / "fixtures").glob("*/*/*.py")}
    assert {f.name for f in CORPUS} == jobs
    assert [r["fixture"] for r in load(DATA)["rows"]] == [f.name for f in CORPUS]


def test_the_interval_is_labelled_at_the_level_it_was_computed_at() -> None:
    data = load(DATA)
    text = render(data)
    level = ci_level(data["rows"])
    assert level is None or f"[{level:.0%} CI]" in text
    assert "95% CI" not in text or level == 0.95
    rows = [{"fixture": "a", "verdicts": [{"ci_level": 0.9}]}, {"fixture": "b", "verdicts": [{"ci_level": 0.8}]}]
    with pytest.raises(ValueError, match="several interval levels"):
        ci_level(rows)


def test_every_row_that_promoted_nothing_says_why_in_its_own_line() -> None:
    from benchmarks.corpus_doc import why_nothing_promoted

    invalid = {"kind": "invalid", "stop": "invariant", "pairs": 1,
               "reason": "precision: trial 10: matrix products ran in bfloat16; the contract allows only float32"}
    futile = {"kind": "not_significant", "stop": "futility", "pairs": 4,
              "reason": "futility at 4 pairs: P(speedup > 1.01) = 0.09 < 0.45 (speedup 0.836x)"}
    line = why_nothing_promoted({"fixture": "x", "promoted": None, "verdicts": [invalid, futile]})
    assert line.startswith("`invalid` precision: trial 10") and "`not_significant` at 4 pairs (futility)" in line
    assert "no candidate was verified" in why_nothing_promoted({"fixture": "y", "promoted": None, "verdicts": []})
    text = render(load(DATA))
    for row in load(DATA)["rows"]:
        if row.get("promoted") is None and not row.get("error"):
            assert f"- {row['fixture']}: {why_nothing_promoted(row)}" in text
