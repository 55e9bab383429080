"""pywb as a peer in tests: load a WACZ into a collection and serve it on 127.0.0.1.

pywb runs in collection mode (``wayback``), never with ``--live`` or
``--proxy`` (both add a live collection that fetches misses from the web), so
it only ever answers from the archive. Requires the ``pywb`` package (dev extra).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

__all__ = ["PywbCollection"]

_BIN = Path(sys.executable).parent


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PywbCollection:
    """``with PywbCollection(folder, wacz) as coll: status, body = coll.get(timestamp, url)``."""

    def __init__(self, folder: Path, wacz: Path, name: str = "coll") -> None:
        self.folder, self.wacz, self.name = Path(folder), Path(wacz), name
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._opener = urllib.request.build_opener(_NoRedirect)

    def __enter__(self) -> PywbCollection:
        self.folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([_BIN / "wb-manager", "init", self.name], cwd=self.folder, check=True, capture_output=True)
        subprocess.run([_BIN / "wb-manager", "add", "--unpack-wacz", self.name, self.wacz], cwd=self.folder,
                       check=True, capture_output=True)
        self.port = _free_port()
        self._proc = subprocess.Popen([_BIN / "wayback", "-b", "127.0.0.1", "-p", str(self.port)], cwd=self.folder,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RuntimeError("pywb did not start") from None
                time.sleep(0.2)

    def get(self, timestamp: str, url: str) -> tuple[int, bytes]:
        """The archived response for ``url`` near ``timestamp``, unrewritten (``id_``), encoding kept."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/{self.name}/{timestamp}id_/{url}",
                                         headers={"Accept-Encoding": "gzip, br"})
        try:
            with self._opener.open(request, timeout=20) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
