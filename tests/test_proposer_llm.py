"""One structured question to a model, against an in-process stand-in client: validated, retried once with the
error, cached, charged and budgeted. HTTP retries against the replayed API: test_proposer_anthropic.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bot.proposers.llm import (InvalidAnswer, LLMConfig, ResponseCache, Tool, ToolCaller, request_hash)

TOOL = Tool(name="answer", description="give the number", schema={"type": "object"})


class _Message:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        return self.data


class _Raw:
    """What ``messages.with_raw_response.create`` returns: ``parse()`` and the request it sent (the SDK stamps
    ``x-stainless-retry-count`` on each attempt; this one never retries)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.http_request = SimpleNamespace(headers={"x-stainless-retry-count": "0"})

    def parse(self) -> _Message:
        return _Message(self.data)


class _Client:
    """``client.messages.with_raw_response.create(**body)`` answers in order, every request kept;
    ``client.messages.count_tokens(**body)`` counts 1000 tokens each."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self.counted: list[dict[str, Any]] = []
        self.messages = self
        self.with_raw_response = self

    def create(self, **body: Any) -> _Raw:
        self.requests.append(body)
        return _Raw(self.answers.pop(0))

    def count_tokens(self, **body: Any) -> SimpleNamespace:
        self.counted.append(body)
        return SimpleNamespace(input_tokens=1000)


def _answer(value: object, *, tokens: tuple[int, int] = (1000, 200), stop: str = "tool_use") -> dict[str, Any]:
    return {"model": "claude-test", "stop_reason": stop,
            "content": [{"type": "tool_use", "id": "tu_1", "name": "answer", "input": {"n": value}}],
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def _validate(data: dict[str, Any]) -> int:
    if not isinstance(data.get("n"), int):
        raise InvalidAnswer(f"n: expected an integer, got {data.get('n')!r}")
    return data["n"]


def _caller(client: _Client, tmp_path: Path | None = None, **config: Any) -> ToolCaller:
    return ToolCaller(client=client, config=LLMConfig(model="claude-haiku-4-5", **config),
                      cache=ResponseCache(tmp_path))


def _ask(caller: ToolCaller):  # noqa: ANN202
    return caller.ask(job="patches", system="sys", user="how many?", tool=TOOL, validate=_validate)


def test_a_valid_answer_is_charged_at_the_models_price_and_cached(tmp_path: Path) -> None:
    client = _Client(_answer(7))
    caller = _caller(client, tmp_path / "cache")
    got = _ask(caller)
    assert got.value == 7 and got.failures == () and not got.budget_exhausted
    [call] = got.calls
    assert (call.outcome, call.cached, call.input_tokens, call.output_tokens) == ("ok", False, 1000, 200)
    assert call.cost_usd == (1000 * 1.0 + 200 * 5.0) / 1e6
    assert client.requests[0]["tool_choice"] == {"type": "tool", "name": "answer"}
    again = _caller(_Client(), tmp_path / "cache")  # no answer left: the cache must serve it
    replay = _ask(again)
    assert replay.value == 7 and replay.calls[0].cached and replay.calls[0].cost_usd == 0.0
    assert again.usage().cached_calls == 1 and again.usage().calls == 0


def test_an_invalid_answer_is_sent_back_once_with_the_error() -> None:
    client = _Client(_answer("seven"), _answer(7))
    got = _ask(_caller(client))
    assert got.value == 7 and [c.outcome for c in got.calls] == ["invalid", "ok"]
    retry = client.requests[1]["messages"]
    assert retry[1]["role"] == "assistant" and retry[2]["content"][0]["tool_use_id"] == "tu_1"
    assert retry[2]["content"][0]["is_error"] is True
    assert "Your answer was rejected: n: expected an integer, got 'seven'" in retry[2]["content"][0]["content"]


def test_two_invalid_answers_are_a_failure_never_a_half_parsed_value() -> None:
    caller = _caller(_Client(_answer(None), _answer(None, stop="max_tokens")))
    got = _ask(caller)
    assert got.value is None
    assert got.failures[-1].error == "attempt 2: the answer was cut off at max_tokens; give a shorter answer"
    assert caller.usage().failed_proposals == 1 and caller.usage().calls == 2


def test_no_request_is_sent_once_the_budget_is_spent() -> None:
    client = _Client()
    caller = _caller(client, token_budget=1000)
    caller.charge(900, 100, 0.5)
    got = _ask(caller)
    assert got.value is None and got.budget_exhausted and client.requests == []
    assert got.failures[0].error == ("token budget spent (1000 of 1000 tokens, $0.5000): attempt 1 was not sent")
    assert caller.usage().blocked_calls == 1 and caller.usage().budget_exhausted


def test_the_answer_gets_what_the_budget_still_holds_and_no_less_than_an_answer_needs() -> None:
    client = _Client(_answer(7))
    caller = _caller(client, token_budget=3000)
    got = _ask(caller)
    assert got.value == 7 and client.requests[0]["max_tokens"] == 2000  # 3000 - the 1000 counted
    assert client.counted[0] == {k: v for k, v in client.requests[0].items() if k != "max_tokens"}
    assert caller.usage().tokens == 1200 <= 3000
    blocked = _ask(caller)  # 1200 spent + 1000 counted leaves 800 for an answer: less than one needs
    assert blocked.value is None and len(client.requests) == 1 and client.answers == []
    assert "this request holds 1000 input tokens and leaves no room for an answer" in blocked.failures[0].error


def test_a_text_answer_without_the_tool_is_refused() -> None:
    text = {"model": "m", "stop_reason": "end_turn", "content": [{"type": "text", "text": "42"}], "usage": {}}
    got = _ask(_caller(_Client(text, text)))
    assert got.value is None and "no call of the tool 'answer': answer only by calling it" in got.failures[0].error


def test_prices_hashes_and_the_cache_file() -> None:
    assert LLMConfig(model="claude-opus-4-1").prices() == (15.0, 75.0)
    assert LLMConfig(model="unknown", price_out=2.0).prices() == (0.0, 2.0)
    assert request_hash({"a": 1, "b": [1, 2]}) == request_hash({"b": [1, 2], "a": 1})
    assert request_hash({"a": 1}) != request_hash({"a": 2})
    assert ResponseCache(None).get("k") is None
