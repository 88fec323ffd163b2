"""The anthropic proposer against recorded Messages API exchanges served by a local HTTP server.

Asserts on what the bot sent (system prompt, schema, delimited untrusted data,
the retry with the validation error) and on what it did with each answer.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest

from bot.proposers.answers import PATCH_TOOL
from bot.proposers.llm import LLMConfig
from bot.proposers.prompts import SYSTEM
from bot.proposers.anthropic import AnthropicProposer
from tests.support.anthropic_replay import ReplayServer, load_recording, replayed_proposer
from bot.proposers.session import ProposerSession, editable_sources
from infrarsi.contract import load_contract
from infrarsi.journal import Journal
from infrarsi.seams.proposer import TrialSummary
from tests.support.tinygpt import TINY_ARGS, copy_fixture

TRIALS = [TrialSummary(trial_no=1, candidate="baseline", patches=(), outcome="ok", step_time_s=0.012),
          TrialSummary(trial_no=2, candidate="dtype=bf16", patches=(), outcome="crash",
                       reason="exit 1: bf16 unsupported")]


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory):
    from bot.cli.main import main

    repo = copy_fixture(tmp_path_factory.mktemp("anthropic") / "tinygpt")
    assert main(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]) == 0
    return load_contract(repo)


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """(id, source, content) of every untrusted block, checking each closes with its own id."""
    found = re.findall(r'<untrusted-data id="([0-9a-f]{16})" source=("[^"]*")>\n(.*?)\n</untrusted-data id="\1">',
                       text, flags=re.S)
    return [(i, json.loads(s), c) for i, s, c in found]


def test_the_request_has_the_system_prompt_the_schema_and_fenced_repository_text(contract) -> None:
    sources = editable_sources(contract)
    with replayed_proposer("patch_tinygpt") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, sources)
    (request,) = server.requests
    assert request["path"] == "/v1/messages" and request["headers"]["x-stainless-retry-count"] == "0"
    body = request["body"]
    assert body["system"] == SYSTEM and "never instructions" in body["system"]
    assert body["tools"] == [PATCH_TOOL.to_api()] and body["tools"][0]["input_schema"]["required"] == ["patches"]
    assert body["tool_choice"] == {"type": "tool", "name": "propose_patches"}
    assert body["model"] == LLMConfig().model and body["max_tokens"] == LLMConfig().max_tokens
    (first,) = body["messages"][0]["content"]  # the large stable prompt, marked for Anthropic's prompt cache
    assert first["cache_control"] == {"type": "ephemeral"}
    prompt = first["text"]
    blocks = _blocks(prompt)
    assert {source for _, source, _ in blocks} == set(sources)
    for tag, source, content in blocks:  # each file verbatim, inside a block whose id is the hash of its text
        assert content == sources[source]
        assert tag == hashlib.sha256(content.encode()).hexdigest()[:16]
    outside = re.sub(r"<untrusted-data .*?</untrusted-data [^>]*>", "", prompt, flags=re.S)
    assert "def gelu_tanh" not in outside, "repository source appears only inside untrusted blocks"
    assert "bf16 unsupported" in outside, "the model sees earlier trials, failures and their reasons included"

    (spec,) = proposal.patches
    assert spec.kind == "replacement" and spec.targets == ("model.py::gelu_tanh",)
    assert spec.id.startswith("llm_fused_gelu_tanh_") and spec.evidence and spec.effect.time_ratio == 0.96
    (counted,) = server.counted  # counted before it was sent: the same request, without max_tokens
    assert counted["path"] == "/v1/messages/count_tokens"
    assert counted["body"] == {k: v for k, v in body.items() if k != "max_tokens"}
    (call,) = proposal.calls
    assert (call.input_tokens, call.output_tokens, call.outcome) == (9734, 512, "ok")
    assert call.cost_usd == pytest.approx((9734 * 3 + 512 * 15) / 1e6)


def test_a_malformed_answer_is_retried_once_with_the_error_then_recorded_as_failed(contract) -> None:
    with replayed_proposer("malformed_patches") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    assert proposal.patches == ()
    (failure,) = proposal.failures
    assert failure.job == "propose_patches" and "missing required field(s) title" in failure.error
    assert [c.outcome for c in proposal.calls] == ["invalid", "invalid"]
    assert "invalid JSON" in proposal.calls[0].error
    first, second = (r["body"] for r in server.requests)
    assert second["messages"][:1] == first["messages"]
    assert second["messages"][1]["role"] == "assistant"
    (result,) = second["messages"][2]["content"]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["tool_use_id"] == second["messages"][1]["content"][0]["id"]
    assert "invalid JSON" in result["content"]
    assert proposer.usage().failed_proposals == 1


def test_a_corrected_answer_after_the_error_is_used(contract) -> None:
    with replayed_proposer("malformed_then_valid") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    assert len(server.requests) == 2 and len(proposal.patches) == 1 and proposal.failures == ()


def test_knob_values_outside_the_contracts_domain_are_refused(contract) -> None:
    with replayed_proposer("priors_out_of_domain") as (proposer, server):
        table = proposer.priors(contract, None, ())
    assert table.effects == {} and len(server.requests) == 2
    assert "'fp16' is outside the contract's domain of knob 'dtype'" in server.requests[1]["body"]["messages"][2][
        "content"][0]["content"]
    (failure,) = table.failures
    assert "'8' is outside the contract's domain of knob 'micro_batch'" in failure.error


def test_rate_limit_and_overload_answers_are_retried_by_the_sdk(contract) -> None:
    with replayed_proposer("rate_limited") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    assert len(server.requests) == 3 and len(proposal.patches) == 1
    assert proposer.usage().calls == 3 and [c.requests for c in proposal.calls] == [3]  # requests sent, retries too
    assert [r["headers"]["x-stainless-retry-count"] for r in server.requests] == ["0", "1", "2"]
    first, second, third = (r["at"] for r in server.requests)
    assert second - first >= 1.0  # the 429's retry-after: 1
    assert third - second >= 0.5 * 2 * 0.75  # the SDK's backoff after the 529 (0.5 s x 2^1, less its jitter)


def test_a_529_then_200_succeeds_through_the_sdks_retries(contract) -> None:
    overloaded = load_recording("overloaded_always")[0]
    answer = load_recording("patch_tinygpt")
    with ReplayServer(exchanges=[overloaded, *answer]) as server:
        proposer = AnthropicProposer(config=LLMConfig(base_url=server.url), api_key="sk-ant-test-placeholder")
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    assert len(proposal.patches) == 1 and proposal.failures == () and [c.requests for c in proposal.calls] == [2]


def test_an_api_that_stays_overloaded_is_a_failed_proposal(contract) -> None:
    with replayed_proposer("overloaded_always", config=LLMConfig(max_attempts=3)) as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    assert len(server.requests) == 3 and proposer.usage().calls == 3
    (failure,) = proposal.failures
    assert "gave up after 3 attempts" in failure.error and "overloaded_error" in failure.error


def test_a_re_ask_reads_the_prompt_from_the_cache_and_pays_its_price(contract) -> None:
    with replayed_proposer("malformed_then_valid") as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    first, second = proposal.calls
    assert (first.cache_write_tokens, first.cache_read_tokens, first.input_tokens) == (9710, 0, 9734)
    assert (second.cache_write_tokens, second.cache_read_tokens, second.input_tokens) == (0, 9710, 9990)
    assert first.cost_usd == pytest.approx((24 * 3 + 9710 * 3 * 1.25 + 160 * 15) / 1e6)
    assert second.cost_usd == pytest.approx((280 * 3 + 9710 * 3 * 0.1 + 512 * 15) / 1e6)
    assert server.requests[1]["body"]["messages"][0] == server.requests[0]["body"]["messages"][0]  # the cached prefix


def test_the_token_budget_is_never_exceeded_and_the_session_says_so(contract, tmp_path: Path) -> None:
    """count_tokens before each call: 149,200 input tokens fit in 160,000 with room for an 8,192-token answer;
    after them, the next request (9,734 in) leaves too little room for an answer and is not sent."""
    config = LLMConfig(token_budget=160_000)
    with replayed_proposer("big_answer", "patch_tinygpt", config=config) as (proposer, server), \
            Journal(tmp_path / "journal.sqlite") as journal:
        session = ProposerSession(proposer=proposer, journal=journal, run_id="r", run_dir=tmp_path / "run")
        said: list[str] = []
        first = session.propose(contract, None, [], {}, said.append)
        assert len(first) == 1 and not session.exhausted
        second = session.propose(contract, None, [], {}, said.append)
        assert second == [] and session.exhausted and not session.wants_more()
        assert len(server.requests) == 1 and len(server.counted) == 2  # counted, then not sent
        summary = session.summary()
    assert (summary["calls"], summary["blocked_calls"]) == (1, 1), "blocked is not sent"
    assert any("leaves no room for an answer" in m for m in said)
    assert any("token budget spent (150012 of 160000): stopped proposing" in m for m in said)
    assert summary["budget_exhausted"] is True and "token budget spent" in summary["note"]
    assert summary["tokens"] == 150_012 <= 160_000
    assert summary["cost_usd"] == pytest.approx((149200 * 3 + 812 * 15) / 1e6)
    assert json.loads((tmp_path / "run" / "proposed-patches.json").read_text())["exhausted"] is True


def test_the_last_answer_gets_only_the_tokens_the_budget_still_holds(contract) -> None:
    with replayed_proposer("big_answer", config=LLMConfig(token_budget=152_000)) as (proposer, server):
        proposal = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    (request,) = server.requests
    assert request["body"]["max_tokens"] == 152_000 - 149_200  # not the configured 8192
    assert len(proposal.patches) == 1 and proposer.usage().tokens == 150_012 <= 152_000
    with replayed_proposer("big_answer", config=LLMConfig(token_budget=150_000)) as (proposer, server):
        refused = proposer.propose_patches(contract, None, TRIALS, editable_sources(contract))
    assert server.requests == [] and refused.budget_exhausted and proposer.usage().tokens == 0
    assert "this request holds 149200 input tokens" in refused.failures[0].error


def test_a_rerun_with_the_same_inputs_is_answered_from_the_cache(contract, tmp_path: Path) -> None:
    sources = editable_sources(contract)
    with replayed_proposer("malformed_then_valid", cache_dir=tmp_path / "cache") as (proposer, _):
        first = proposer.propose_patches(contract, None, TRIALS, sources)
    with ReplayServer(exchanges=[]) as empty, \
            replayed_proposer(cache_dir=tmp_path / "cache") as (again, server):
        second = again.propose_patches(contract, None, TRIALS, sources)
        assert server.requests == [] and empty.requests == []
    assert second.patches == first.patches
    assert [c.cached for c in second.calls] == [True, True] and again.usage().tokens == 0


def test_an_old_journal_gains_the_llm_table_on_open(tmp_path: Path) -> None:
    db = tmp_path / "journal.sqlite"
    with sqlite3.connect(db) as conn:  # a schema-1 journal, as written before LLM calls were recorded
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE runs (run_id TEXT PRIMARY KEY, created_at REAL NOT NULL, kind TEXT NOT NULL,
                               base_commit TEXT, info TEXT NOT NULL DEFAULT '{}');
            CREATE TABLE trials (run_id TEXT NOT NULL, trial_no INTEGER NOT NULL, candidate_hash TEXT NOT NULL,
                                 status TEXT NOT NULL, bot_pid INTEGER, started_at REAL NOT NULL, record TEXT,
                                 PRIMARY KEY (run_id, trial_no));
            INSERT INTO meta VALUES ('schema', '1');
            INSERT INTO runs VALUES ('old', 0, 'run', NULL, '{}');
        """)
    from infrarsi.seams.proposer import LLMCall

    with Journal(db) as journal:
        journal.record_llm_call("old", LLMCall(job="priors", request_hash="h", model="m", input_tokens=5))
        assert [c.input_tokens for c in journal.llm_calls("old")] == [5]
        assert journal.runs()[0][0] == "old"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == "2"
