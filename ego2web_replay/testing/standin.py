"""A stand-in "live" server: binds a stopped site's port, records every request, answers 200.

Frozen tests start it on the recorded origin's port after the site is stopped: a
request that reached it went around the replay (a loopback bypass, a browser that
was not sealed), so a hermetic episode leaves :attr:`StandIn.requests` empty.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from ..httpd import LoopbackHTTPServer

__all__ = ["StandIn"]


class StandIn(LoopbackHTTPServer):
    """A "live" server on the snapshot's origin that records every request and answers 200."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                server.requests.append(self.path)
                body = b"<title>stand-in</title>the live site, reached directly"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

        return Handler
