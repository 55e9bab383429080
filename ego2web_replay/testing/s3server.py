"""A real S3-compatible server on 127.0.0.1 for tests and benchmarks: moto's server in a child process.

``S3Server().start()`` runs ``python -m moto.server`` on a free loopback port
(in its own session, so it is stopped by its own process id), with moto's
request recorder writing to a file of its own: :meth:`requests` then says what
the server was asked (method and path), so a test can count GETs of objects.
:meth:`env` gives the standard AWS variables that point a client at it; :meth:`pause` freezes it
(a store that accepts connections and never answers) and :meth:`stop` ends it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["S3Server"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """``start()``, ``create_bucket()``, ``env()``, ``requests()``, ``pause()``, ``resume()``, ``stop()``."""

    def __init__(self, *, check_credentials: bool = False) -> None:
        """``check_credentials``: moto checks every request's signature against its (empty) IAM, so any
        access key is refused, as a real store refuses wrong credentials."""
        self.check_credentials = check_credentials
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = Path(tempfile.mkdtemp(prefix="ego2web-moto-"))
        self.recording = self.folder / "requests.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """The AWS variables a client needs to reach this server (fake credentials; moto takes any)."""
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", **extra}

    def start(self) -> S3Server:
        self.folder.mkdir(parents=True, exist_ok=True)  # again after a stop
        env = dict(os.environ, MOTO_RECORDER_FILEPATH=str(self.recording), MOTO_ENABLE_RECORDING="",
                   AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        if self.check_credentials:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        log = open(self.folder / "server.log", "wb")  # noqa: SIM115 - kept open by the child
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited: {(self.folder / 'server.log').read_text()[-500:]}")
            try:
                self._api("GET", "/moto-api/")
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("moto server did not start within 30 s")

    def _api(self, method: str, path: str, data: bytes | None = None) -> bytes:
        req = urllib.request.Request(self.url + path, data=data, method=method)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        with opener.open(req, timeout=10) as resp:
            return bytes(resp.read())

    def create_bucket(self, name: str) -> str:
        """Create a bucket; returns ``s3://name``."""
        self._api("PUT", f"/{name}")
        return f"s3://{name}"

    def record_requests(self) -> None:
        """Forget the requests seen so far and record those from now on."""
        self._api("POST", "/moto-api/recorder/reset-recording")
        self._api("POST", "/moto-api/recorder/start-recording")

    def requests(self) -> list[tuple[str, str, str, dict[str, str]]]:
        """(method, path, query, headers) of each request since :meth:`record_requests`."""
        text = self._api("GET", "/moto-api/recorder/download-recording").decode("utf-8")
        out = []
        for line in text.splitlines():
            entry = json.loads(line)
            parts = urlsplit(entry["url"])
            out.append((entry["method"], parts.path, parts.query, dict(entry.get("headers") or {})))
        return out

    def object_gets(self) -> list[tuple[str, str | None]]:
        """(path, Range header) of the GETs of objects (not listings) since :meth:`record_requests`."""
        return [(path, headers.get("Range") or headers.get("range")) for method, path, query, headers
                in self.requests() if method == "GET" and path.count("/") >= 2 and "list-type" not in query]

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections are still accepted by the kernel, nothing answers."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Undo :meth:`pause`."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()  # a frozen process cannot act on SIGTERM
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.folder, ignore_errors=True)  # its log, its request recording, its objects

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
