"""HTTP/1.1 request parsers side by side (`bench_replay.py --parsers`): CPU per request of the wire's
own strict parser (`ego2web_replay.wire.h1.H1Handler`) and of llhttp through PyPI `httptools` (the
parser of uvicorn) doing the same job: bytes in, a `wire.h1.Request` with its body out, the checks
llhttp does not make (one Host) added, answered by a no-op and asked whether the connection is kept,
as `H1Handler` asks.

Workloads: a Chromium-like GET head (12 fields) per read; a 4 KiB form POST with Content-Length; a
64 KiB body in 1-byte chunks, fed in 1 KiB reads (the case that was quadratic). Rounds interleave the
parsers; the median of the rounds is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ego2web_replay.wire.h1 import MAX_BODY, H1Handler, Request

GET = (b"GET http://shop.example/static/app.js?v=3 HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive\r\n"
       b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 "
       b"Safari/537.36\r\nAccept: */*\r\nSec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: no-cors\r\n"
       b"Sec-Fetch-Dest: script\r\nReferer: http://shop.example/\r\nAccept-Encoding: gzip, deflate, br\r\n"
       b"Accept-Language: en-US,en;q=0.9\r\nCookie: a=1; b=2\r\n\r\n")
_FORM = b"q=" + b"x" * 4094
POST = (b"POST http://shop.example/form HTTP/1.1\r\nHost: shop.example\r\nContent-Type: application/x-www-form-"
        b"urlencoded\r\nContent-Length: %d\r\n\r\n%b" % (len(_FORM), _FORM))
_TINY = 65536
CHUNKED = (b"POST http://shop.example/up HTTP/1.1\r\nHost: shop.example\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"1\r\nx\r\n" * _TINY + b"0\r\n\r\n")
WORKLOADS: dict[str, tuple[bytes, int, int]] = {  # name: (bytes, read size (0: whole), requests per round)
    "GET head, 12 fields": (GET, 0, 20_000),
    "POST 4 KiB, Content-Length": (POST, 0, 10_000),
    "POST 64 KiB in 1-byte chunks, 1 KiB reads": (CHUNKED, 1024, 4),
}


class LlhttpHandler:
    """What :class:`H1Handler` does for a request, on httptools: fields, body, one Host, the body cap."""

    def __init__(self, answer: Callable[[Request], object]) -> None:
        import httptools

        self.answer = answer
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.request: Request | None = None

    def feed(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        headers = [(k.decode("ascii"), v.decode("utf-8", "surrogateescape")) for k, v in self.fields]
        lowered = "\n" + (b":\n".join([k for k, _ in self.fields]) + b":").decode("ascii").lower()
        version = f"HTTP/{self.parser.get_http_version()}"
        self.request = Request(self.parser.get_method().decode("ascii"), self.url.decode("utf-8", "surrogateescape"),
                               version, headers, lowered)
        if self.request.count("host") > 1:
            raise ValueError("more than one Host")

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > MAX_BODY:
            raise ValueError("request body too large")
        self.body.append(data)

    def on_message_complete(self) -> None:
        req = self.request
        assert req is not None
        req.body = b"".join(self.body)
        self.url, self.fields, self.body, self.size, self.request = b"", [], [], 0, None
        self.answer(req)
        if not req.keep_alive:  # what H1Handler asks of every request it answers
            raise ValueError("closed")


def _hand(answer: Callable[[Request], object]) -> H1Handler:
    def reply(req: Request) -> tuple[None, bool]:
        answer(req)
        return None, True

    return H1Handler(reply, lambda _data: None, lambda: None, None)


PARSERS: dict[str, Callable[[Callable[[Request], object]], object]] = {
    "wire.h1 (strict hand parser)": _hand,
    "httptools (llhttp) + the same checks": LlhttpHandler,
}


def _round(make: Callable[[Callable[[Request], object]], object], data: bytes, read: int, n: int) -> float:
    """CPU µs per request for ``n`` requests of ``data`` fed in reads of ``read`` bytes (0: whole)."""
    seen = [0]
    handler = make(lambda _req: seen.__setitem__(0, seen[0] + 1))
    feed = handler.feed  # type: ignore[attr-defined]
    pieces = [data] if not read else [data[i:i + read] for i in range(0, len(data), read)]
    started = time.process_time()
    for _ in range(n):
        for piece in pieces:
            feed(piece)
    spent = time.process_time() - started
    if seen[0] != n:
        raise RuntimeError(f"a parser answered {seen[0]} of {n} requests")
    return spent / n * 1e6


def measure(rounds: int = 5) -> dict[str, dict[str, list[float]]]:
    """``{workload: {parser: [µs per request, one per round]}}``, parsers interleaved per round."""
    out: dict[str, dict[str, list[float]]] = {w: {p: [] for p in PARSERS} for w in WORKLOADS}
    for r in range(rounds):
        for name, (data, read, n) in WORKLOADS.items():
            order = list(PARSERS.items())
            for parser, make in order[r % 2:] + order[:r % 2]:
                out[name][parser].append(_round(make, data, read, n))
    return out
