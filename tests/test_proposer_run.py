"""``infrarsi run --proposer anthropic`` end to end on the tiny fixture, against recorded exchanges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.repos import commit_tree
from tests.support.anthropic_replay import ReplayServer, load_recording, prompt_of
from infrarsi.journal import Journal
from tests.support.tinygpt import NO_COMPILE, infrarsi

pytestmark = pytest.mark.slow


def test_a_run_takes_priors_and_patches_from_the_model_and_stops_when_its_budget_is_spent(
        tiny_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tiny_repo
    contract = repo / "infrarsi.toml"
    contract.write_text(contract.read_text() + NO_COMPILE + "\n[verify]\ntop_k = 1\nmax_pairs = 4\n")
    assert infrarsi("lock", str(repo)).returncode == 0
    (repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    commit_tree(repo, "fixture")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-placeholder")
    exchanges = load_recording("priors_tinygpt") + load_recording("patch_tinygpt")
    with ReplayServer(exchanges=exchanges) as server:
        # priors cost 4422 tokens, the first proposal round 10246 (9734 counted in before it was sent, so its
        # answer may have 1344): the 832 left after it hold no answer, so the budget is spent.
        result = infrarsi("run", str(repo), "--run-id", "llm", "--budget-trials", "3", "--initial", "2",
                          "--repeats", "2", "--no-bank", "--json", "--proposer", "anthropic",
                          "--llm-base-url", server.url, "--llm-token-budget", "15500", timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r["body"]["tool_choice"]["name"] for r in server.requests] == ["state_priors", "propose_patches"]
    assert [r["body"]["max_tokens"] for r in server.requests] == [8192, 15500 - 4422 - 9734]
    seen = prompt_of(server.requests[1])
    doctor = json.loads((repo / ".infrarsi" / "runs" / "llm" / "doctor.json").read_text())
    own = set(doctor["trials"]) | set(doctor["calibration_trials"])
    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        first_search = min(r.trial_no for r in journal.trials("llm") if r.trial_no not in own)
    assert f'"trial_no": {first_search}' in seen, "the proposal round saw the first batch's trials"
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert any(e["event"] == "llm" and "stopped proposing" in e["message"] for e in events)

    llm = json.loads((repo / ".infrarsi" / "runs" / "llm" / "run.json").read_text())["llm"]
    assert llm["budget_exhausted"] is True and "token budget spent" in llm["note"]
    assert (llm["calls"], llm["tokens"], llm["rounds"], llm["priors_from"]) == (2, 4422 + 10246, 1, "anthropic")
    assert llm["cost_usd"] == pytest.approx(((4020 + 9734) * 3 + (402 + 512) * 15) / 1e6)
    assert [p["targets"] for p in llm["patches_proposed"]] == [["model.py::gelu_tanh"]]
    with Journal(repo / ".infrarsi" / "journal.sqlite") as journal:
        assert [c.job for c in journal.llm_calls("llm")] == ["priors", "propose_patches"]
