"""A local HTTP server that replays recorded Messages API exchanges, for tests and offline demos.

A recording (``fixtures/recorded/anthropic/*.json``) is ``{"description": …,
"exchanges": [{"status": 200, "headers": {…}, "body": {…}}, …]}``: the
responses the API gave, in order, in its real shape (``tool_use`` blocks, stop
reasons, usage; errors as ``{"type": "error", "error": {…}}``). The server
answers ``POST /v1/messages`` with the next one for the requested tool (an
error: the next, whatever the tool) and keeps every request it received (path,
headers, JSON body) so a test can assert on what the bot sent. As the API does,
it never answers with more output tokens than the request's ``max_tokens`` (a
longer recorded answer comes back cut off: ``stop_reason: max_tokens``).
``POST /v1/messages/count_tokens`` answers with the input tokens the next answer
for that tool is billed (``input_tokens`` plus the prompt cache's), or 1 token
per 4 bytes of the request when none is recorded; those requests are kept apart
(``counted``), since they are free and not messages. Keys never reach a
recording: the server redacts ``x-api-key`` and ``authorization``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recorded" / "anthropic"


def prompt_of(request: dict[str, Any]) -> str:
    """The text of a recorded request's first user message (one text block, marked for the prompt cache)."""
    (block,) = request["body"]["messages"][0]["content"]
    return str(block["text"])


def load_recording(name: str | Path) -> list[dict[str, Any]]:
    path = Path(name) if Path(name).suffix == ".json" and Path(name).exists() else RECORDINGS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))["exchanges"]


@dataclass(kw_only=True)
class ReplayServer:
    """``with ReplayServer(exchanges=…) as server:`` then point a client at ``server.url``."""

    exchanges: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    counted: list[dict[str, Any]] = field(default_factory=list)  # count_tokens requests
    _served: set[int] = field(default_factory=set)
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def _next(self, body: dict[str, Any], *, serve: bool = True) -> int | None:
        """The first unserved exchange for this request: an error (any request) or an answer with its tool."""
        tool = (body.get("tool_choice") or {}).get("name")
        for i, exchange in enumerate(self.exchanges):
            if i in self._served:
                continue
            names = {b.get("name") for b in exchange.get("body", {}).get("content", []) or []
                     if isinstance(b, dict) and b.get("type") == "tool_use"}
            if exchange.get("status", 200) != 200 or not names or tool in names:
                if serve:
                    self._served.add(i)
                return i
        return None

    def _count(self, body: dict[str, Any]) -> dict[str, Any]:
        """What ``count_tokens`` answers: the input tokens of the answer this request would get."""
        index = self._next(body, serve=False)
        answer = self.exchanges[index] if index is not None else {}
        usage = (answer.get("body") or {}).get("usage") if answer.get("status", 200) == 200 else None
        if usage:
            return {"input_tokens": sum(int(usage.get(k) or 0) for k in (
                "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))}
        return {"input_tokens": len(json.dumps(body)) // 4}


    def __enter__(self) -> ReplayServer:
        server = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                headers = {k.lower(): ("<redacted>" if k.lower() in ("x-api-key", "authorization") else v)
                           for k, v in self.headers.items()}
                body = json.loads(raw or b"{}")
                path = self.path.split("?")[0]
                with lock:
                    if path == "/v1/messages/count_tokens":
                        server.counted.append({"path": self.path, "headers": headers, "body": body})
                        exchange: dict[str, Any] | None = {"status": 200, "body": server._count(body)}
                    else:
                        server.requests.append({"path": self.path, "headers": headers, "body": body,
                                                "at": time.monotonic()})
                        n = len(server.requests)
                        index = server._next(body) if path == "/v1/messages" else None
                        exchange = None if index is None else _within(server.exchanges[index], body.get("max_tokens"))
                if exchange is None:  # x-should-retry: the API's own header telling the SDK not to retry
                    missing = f"replay: no recorded answer for request {n} {self.path}"
                    exchange = {"status": 500, "headers": {"x-should-retry": "false"}, "body": {
                        "type": "error", "error": {"type": "api_error", "message": missing}}}
                payload = json.dumps(exchange["body"]).encode()
                self.send_response(int(exchange.get("status", 200)))
                self.send_header("content-type", "application/json")
                for k, v in (exchange.get("headers") or {}).items():
                    self.send_header(k, str(v))
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _within(exchange: dict[str, Any], max_tokens: Any) -> dict[str, Any]:
    """A recorded answer as the API gives it under ``max_tokens``: cut off when it was longer."""
    body = exchange.get("body") or {}
    usage = body.get("usage") or {}
    if exchange.get("status", 200) != 200 or not isinstance(max_tokens, int) or \
            int(usage.get("output_tokens") or 0) <= max_tokens:
        return exchange
    cut = {**body, "stop_reason": "max_tokens", "usage": {**usage, "output_tokens": max_tokens},
           "content": [b for b in body.get("content") or [] if b.get("type") == "text"]}
    return {**exchange, "body": cut}

@contextlib.contextmanager
def replayed_proposer(*recordings: str, config: Any = None,
                      cache_dir: Path | None = None) -> Iterator[tuple[Any, ReplayServer]]:
    """An :class:`~bot.proposers.anthropic.AnthropicProposer` talking to a replay of ``recordings`` (in order)."""
    from dataclasses import replace

    from bot.proposers.anthropic import AnthropicProposer
    from bot.proposers.llm import LLMConfig

    exchanges = [e for name in recordings for e in load_recording(name)]
    with ReplayServer(exchanges=exchanges) as server:
        cfg = replace(config or LLMConfig(), base_url=server.url)
        yield AnthropicProposer(config=cfg, api_key="sk-ant-test-placeholder", cache_dir=cache_dir), server
