"""The report's pictures: Mermaid charts in the pull-request body and report.md, checked with Mermaid's parser."""

from __future__ import annotations

import pytest

from infrarsi.doctor import render_markdown as doctor_markdown
from infrarsi.report.charts import mermaid_blocks
from infrarsi.report.render import render_markdown, render_pr_body
from tests.support.mermaid_parse import parse
from tests.support.reports import sample_doctor, sample_report

pytestmark = pytest.mark.side_by_side  # its checks time nothing: CI runs it beside other tests (./dev)


def _charts_report():  # noqa: ANN202
    return sample_report(failed=3, memory_limit_bytes=2**30)


def test_the_body_carries_step_time_verification_and_memory_charts() -> None:
    body = render_pr_body(_charts_report())
    blocks = mermaid_blocks(body)
    assert len(blocks) == 3 and all(b.startswith("xychart-beta\n") for b in blocks)
    verification, steps, memory = blocks
    assert 'x-axis ["pair 1", "pair 2"]' in verification and "bar [15.00, 16.00]" in verification \
        and "line [10.00, 11.00]" in verification
    # Trials in order, failed ones at 0 and named by outcome.
    assert 'x-axis ["1 oom", "2 crash", "3 oom", "4"]' in steps and "bar [0.00, 0.00, 0.00, 10.00]" in steps
    # OOMs censored at the limit (labelled ≥), the limit as a line.
    assert '"1 oom ≥"' in memory and "line [1024.00, 1024.00, 1024.00, 1024.00]" in memory
    assert mermaid_blocks(render_markdown(_charts_report())) == blocks


@pytest.mark.slow  # node and mermaid's import take seconds; the first run installs mermaid from npm (~25 s)
def test_mermaid_parses_every_chart_of_the_body_the_report_and_the_doctor() -> None:
    blocks = (mermaid_blocks(render_pr_body(_charts_report()))
              + mermaid_blocks(render_markdown(sample_report(failed=0, promoted=False, verification=None)))
              + mermaid_blocks(doctor_markdown(sample_doctor({"fp32": 100e9, "bf16": 400e9}))))
    assert len(blocks) >= 6
    verdicts = parse(blocks)
    assert all(v["ok"] for v in verdicts), [(v, b) for v, b in zip(verdicts, blocks) if not v["ok"]]
    assert {v["type"] for v in verdicts} == {"xychart"}  # the synthetic doctor has no phases: no pie
    broken = parse(["xychart-beta\n    x-axis [a b]\n    bar [1, oops]\n"])  # the parser does reject
    assert broken[0]["ok"] is False
