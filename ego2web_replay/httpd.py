"""A threaded HTTP server on 127.0.0.1 that starts, stops and works as a context manager.

The demo site, the fake OpenAI-compatible server (testing) and the benchmarks' sites
subclass it and supply their request handler.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

__all__ = ["LoopbackHTTPServer"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class LoopbackHTTPServer(ABC):
    """Serves :meth:`make_handler`'s handler class on ``127.0.0.1:port`` (0: any free port)."""

    thread_name = "loopback-httpd"

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @abstractmethod
    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class; it may close over ``self``."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int | None = None) -> Self:
        self._server = _Server(("127.0.0.1", self.port if port is None else port), self.make_handler())
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
