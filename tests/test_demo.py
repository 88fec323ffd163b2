"""The README's first command: the offline demo runs the five stages to the end on a fresh fixture copy.

CI runs the tiny config (seconds per trial), where bf16 brings nothing on a CPU, so the test accepts the
demo's honest ending either way: a merged pull request with a verified speedup, or the report saying that
nothing was verified. The path with a winner is covered stage by stage in test_apply.py and test_merge_promote.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.contract.knob_codec import value_text
from infrarsi.report import SECTIONS
from infrarsi.report.charts import mermaid_blocks
from tests.support.mermaid_parse import parse

pytestmark = pytest.mark.slow


def test_demo_runs_every_stage_offline(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "bot.demo", "--workdir", str(tmp_path), "--config", "tiny",
                             "--repeats", "2", "--budget-trials", "3", "--initial", "3", "--max-pairs", "4",
                             "--promote-pairs", "4"], capture_output=True, text=True, timeout=1800)
    out = result.stdout
    for n, name in enumerate(("init", "doctor", "run", "report"), start=1):
        assert f"[{n}/7] {name}" in out, out[-3000:] + result.stderr[-3000:]
    report_json = tmp_path / "tinygpt" / ".infrarsi" / "runs" / "demo" / "report.json"
    report = json.loads(report_json.read_text())
    for key in ("speedup", "speedup_ci", "mfu_before", "mfu_after", "trials", "failed_cost_s", "promoted", "audit"):
        assert key in report
    assert f"report.json: {report_json}" in out
    # Issue 18: figures a reviewer can trust, pictures that render.
    for key in ("mfu_before", "mfu_after"):
        assert report[key] is None or 0 < report[key] < 1, report[key]
    _check_calibration(report)
    md_blocks = mermaid_blocks(report_json.with_name("report.md").read_text())
    assert len(md_blocks) >= 2 and all(v["ok"] for v in parse(md_blocks))
    if not report["promoted"]:
        assert result.returncode == 1 and "no candidate was verified faster than the baseline" in out
        return
    record_path = tmp_path / "remote.git" / "infrarsi-forge" / "pulls" / "1.json"
    assert f"pull-request record: {record_path}" in out and "verified speedup: " in out
    record = json.loads(record_path.read_text())
    for section in SECTIONS:
        assert f"## {section}\n" in record["body"]
    body_blocks = mermaid_blocks(record["body"])
    assert len(body_blocks) >= 3 and all(v["ok"] for v in parse(body_blocks))
    invariants = [line.split("|")[1].strip() for line in record["body"].split("| invariant | runs | detail |")[1]
                  .split("\n\n")[0].splitlines()[2:]]
    assert invariants and len(invariants) == len(set(invariants))  # one row per invariant
    assert record["state"] in ("merged", "open")  # open: the re-verification on a busy box refused
    assert result.returncode == (0 if record["state"] == "merged" else 1)


def _check_calibration(report: dict) -> None:
    """Each calibration row's "in the winner" says whether every factor of the term is on at the winner."""
    changed = {c["name"]: c["new"] for c in report["knob_changes"]}
    on = {f"patch:{p}" for p in report["winner_patches"]} | set(changed) | {
        f"{k}={value_text(v)}" for k, v in changed.items()}
    for row in report["calibration"]:
        parts = row["effect"].removesuffix("^2").split("*") if row["kind"] != "main" else [row["effect"]]
        assert row["in_winner"] == (report["promoted"] and all(p in on for p in parts)), row
