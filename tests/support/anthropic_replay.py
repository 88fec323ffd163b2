"""A local HTTP server that replays recorded Messages API exchanges, for tests and offline demos.

A recording (``fixtures/recorded/anthropic/*.json``) is ``{"description": …,
"exchanges": [{"status": 200, "headers": {…}, "body": {…}}, …]}``: the
responses the API gave, in order, in its real shape (``tool_use`` blocks, stop
reasons, usage; errors as ``{"type": "error", "error": {…}}``). The server
answers ``POST /v1/messages`` with the next one for the requested tool (an
error: the next, whatever the tool) and keeps every request it received (path,
headers, JSON body) so a test can assert on what the bot sent. Keys never
reach a recording: the server redacts ``x-api-key`` and ``authorization``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recorded" / "anthropic"


def load_recording(name: str | Path) -> list[dict[str, Any]]:
    path = Path(name) if Path(name).suffix == ".json" and Path(name).exists() else RECORDINGS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))["exchanges"]


@dataclass(kw_only=True)
class ReplayServer:
    """``with ReplayServer(exchanges=…) as server:`` then point a client at ``server.url``."""

    exchanges: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    _served: set[int] = field(default_factory=set)
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def _next(self, body: dict[str, Any]) -> int | None:
        """The first unserved exchange for this request: an error (any request) or an answer with its tool."""
        tool = (body.get("tool_choice") or {}).get("name")
        for i, exchange in enumerate(self.exchanges):
            if i in self._served:
                continue
            names = {b.get("name") for b in exchange.get("body", {}).get("content", []) or []
                     if isinstance(b, dict) and b.get("type") == "tool_use"}
            if exchange.get("status", 200) != 200 or not names or tool in names:
                self._served.add(i)
                return i
        return None

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
                with lock:
                    server.requests.append({"path": self.path, "headers": headers, "body": body})
                    n = len(server.requests)
                    index = server._next(body) if self.path.split("?")[0] == "/v1/messages" else None
                if index is None:
                    exchange = {"status": 500, "body": {"type": "error", "error": {
                        "type": "api_error", "message": f"replay: no recorded answer for request {n} {self.path}"}}}
                else:
                    exchange = server.exchanges[index]
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


@contextlib.contextmanager
def replayed_proposer(*recordings: str, config: Any = None, cache_dir: Path | None = None,
                      sleep: Any = None) -> Iterator[tuple[Any, ReplayServer]]:
    """An :class:`~bot.proposers.anthropic.AnthropicProposer` talking to a replay of ``recordings`` (in order)."""
    from dataclasses import replace

    from bot.proposers.anthropic import AnthropicProposer
    from bot.proposers.llm import LLMConfig

    exchanges = [e for name in recordings for e in load_recording(name)]
    with ReplayServer(exchanges=exchanges) as server:
        cfg = replace(config or LLMConfig(), base_url=server.url)
        kwargs = {"sleep": sleep} if sleep is not None else {}
        yield AnthropicProposer(config=cfg, api_key="sk-ant-test-placeholder", cache_dir=cache_dir, **kwargs), server
