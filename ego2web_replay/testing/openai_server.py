"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests.

It implements ``POST /v1/chat/completions`` and ``GET /v1/models``, answers
from a scripted list of replies (or a callable that sees each request body),
can answer a scripted step with an HTTP error (429, 500 ...) or after a delay,
and records every request it received. Use it as a context manager::

    with FakeOpenAIServer(["Status: success", Reply(status=429), "Status: failure"]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        ...
        assert len(srv.requests) == 3

A scripted item is a string (the assistant's text), a :class:`Reply`, a dict
holding a whole completion (with ``choices``) or an assistant message (with
``role``/``content``/``tool_calls``). When the script runs out the server
answers 500 with ``no scripted reply left``, so a test that calls too often fails.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from ..httpd import LoopbackHTTPServer

__all__ = ["Reply", "FakeOpenAIServer", "ReplySource"]


@dataclass
class Reply:
    """One scripted answer.

    ``status`` other than 200 sends an OpenAI-style error body (``error`` as its
    message); ``delay`` sleeps first (to trigger client timeouts); ``tool_calls``
    are passed through in the assistant message; ``body`` replaces the whole
    JSON response; ``usage`` overrides the token counts.
    """

    content: str | None = None
    status: int = 200
    error: str | None = None
    delay: float = 0.0
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str = "stop"
    usage: dict[str, int] | None = None
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


ReplySource = Iterable["str | Reply | dict[str, Any]"] | Callable[[dict[str, Any]], "str | Reply | dict[str, Any]"]


def _count_tokens(value: Any) -> int:
    """A crude, deterministic token count: words in every text part."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_count_tokens(v) for v in value)
    if isinstance(value, dict):
        if value.get("type") == "image_url":
            return 85
        return sum(_count_tokens(v) for k, v in value.items() if k in ("content", "text"))
    return 0


class FakeOpenAIServer(LoopbackHTTPServer):
    """A threaded OpenAI-compatible server bound to 127.0.0.1 on an ephemeral port."""

    thread_name = "fake-openai"

    def __init__(self, replies: ReplySource | None = None, *, models: list[str] | None = None,
                 list_models: bool = True) -> None:
        super().__init__()
        self._callable: Callable[[dict[str, Any]], Any] | None = None
        self._script: list[Any] = []
        if callable(replies):
            self._callable = replies
        elif replies is not None:
            self._script = list(replies)
        self.models = models or ["fake-model"]
        #: False: ``GET /models`` answers 404, as servers without the route do.
        self.list_models = list_models
        #: ``GET .../models`` requests received (they are not model calls: never in ``requests``).
        self.model_lists = 0
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._lock = threading.Lock()

    # -- scripting -------------------------------------------------------------
    def add(self, *replies: str | Reply | dict[str, Any]) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._script)

    def _next(self, body: dict[str, Any]) -> Any:
        if self._callable is not None:
            return self._callable(body)
        with self._lock:
            if not self._script:
                return Reply(status=500, error="no scripted reply left")
            return self._script.pop(0)

    # -- lifecycle ---------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """The ``/v1`` base URL to hand to an OpenAI client."""
        if self._server is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}/v1"

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    # -- answering ---------------------------------------------------------------
    def _completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str], float]:
        item = self._next(body)
        if isinstance(item, str):
            item = Reply(content=item)
        if isinstance(item, dict):
            if "choices" in item:
                return 200, item, {}, 0.0
            item = Reply(content=item.get("content"), tool_calls=item.get("tool_calls"))
        if not isinstance(item, Reply):
            raise TypeError(f"scripted reply of unsupported type {type(item).__name__}")
        if item.status != 200:
            kind = {429: "rate_limit_exceeded", 500: "server_error"}.get(item.status, "error")
            err = {"error": {"message": item.error or f"scripted status {item.status}", "type": kind, "code": kind}}
            return item.status, item.body or err, item.headers, item.delay
        if item.body is not None:
            return 200, item.body, item.headers, item.delay
        message: dict[str, Any] = {"role": "assistant", "content": item.content}
        if item.tool_calls:
            message["tool_calls"] = item.tool_calls
        prompt = _count_tokens(body.get("messages", []))
        completion = _count_tokens(item.content or "")
        usage = item.usage or {"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion}
        with self._lock:
            n = len(self.requests)
        payload = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model") or self.models[0],
            "choices": [{"index": 0, "message": message, "finish_reason": item.finish_reason}],
            "usage": usage,
        }
        return 200, payload, item.headers, item.delay


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                with server._lock:
                    server.model_lists += 1
            if self.path.rstrip("/").endswith("/models") and server.list_models:
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in server.models]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                return
            with server._lock:
                server.requests.append(body)
                server.request_headers.append({k.lower(): v for k, v in self.headers.items()})
            status, payload, headers, delay = server._completion(body)
            if delay:
                time.sleep(delay)
            try:
                self._send(status, payload, headers)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler
