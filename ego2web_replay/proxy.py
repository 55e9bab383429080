"""One in-process mitmproxy master on 127.0.0.1, started and stopped cleanly.

mitmproxy keeps one master per process (its ``ctx`` is global), so a process
runs at most one :class:`ProxyServer` at a time; concurrent episodes use
separate processes. The master runs its own asyncio loop in a daemon thread.

The project CA (``<data-dir>/ca/mitmproxy-ca.pem``, key mode 0600) signs the
certificates the proxy presents; clients trust exactly this CA by its SPKI pin
(:func:`spki_pin`) or by the CA file.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import data_dir
from .errors import ProxyError

__all__ = ["ProjectCA", "project_ca", "spki_pin", "ProxyServer"]

log = logging.getLogger(__name__)
_lock = threading.Lock()  # one master per process


@dataclass(frozen=True)
class ProjectCA:
    """The project's certificate authority."""

    confdir: Path
    cert_path: Path  # PEM certificate only: hand this to clients (curl --cacert)
    spki: str  # base64 sha256 of the SubjectPublicKeyInfo (Chromium's --ignore-certificate-errors-spki-list)


def spki_pin(cert_pem: bytes) -> str:
    """Base64 of the sha256 of a PEM certificate's SubjectPublicKeyInfo DER."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cert_pem)
    der = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")


#: the CA last loaded per folder, with the files' identities then: an episode after the first skips
#: reloading the private key (about 0.2 s) while the files are the same ones
_loaded: dict[Path, tuple[tuple[Any, ...], ProjectCA]] = {}
_CA_FILES = ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem")


def _identity(conf: Path) -> tuple[Any, ...] | None:
    try:
        stats = [(conf / n).stat() for n in _CA_FILES]
    except OSError:
        return None
    return tuple((st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode) for st in stats)


def project_ca(confdir: Path | None = None) -> ProjectCA:
    """Create (once) and return the project CA in ``<data-dir>/ca``; private files are 0600."""
    from mitmproxy.certs import CertStore

    conf = Path(confdir) if confdir else data_dir() / "ca"
    seen = _loaded.get(conf)
    if seen is not None and seen[0] == _identity(conf):
        return seen[1]
    conf.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(conf, 0o700)
    try:
        CertStore.from_store(str(conf), "mitmproxy", 2048)
    except OSError as e:
        raise ProxyError(f"cannot create the project CA in {conf}: {e.strerror or e}") from None
    for name in ("mitmproxy-ca.pem", "mitmproxy-ca.p12", "mitmproxy-dhparam.pem"):
        p = conf / name
        if p.exists():
            os.chmod(p, 0o600)
    cert = conf / "mitmproxy-ca-cert.pem"
    ca = ProjectCA(confdir=conf, cert_path=cert, spki=spki_pin(cert.read_bytes()))
    ident = _identity(conf)
    if ident is not None and ident[0][3] & 0o077 == 0:  # kept only while the key is private
        _loaded[conf] = (ident, ca)
    return ca


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class _ErrorCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the connection tasks still open when the proxy stops, so none is destroyed pending."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    loop.set_exception_handler(lambda _loop, _context: None)  # cancellations of open connections are expected
    for t in pending:
        t.cancel()
    if pending:
        try:
            loop.run_until_complete(asyncio.wait(pending, timeout=2))
        except Exception:  # noqa: BLE001 - best effort at shutdown
            pass


class ProxyServer:
    """A mitmproxy master with our addons, on ``host:port`` (port 0: ephemeral).

    ``options`` are mitmproxy options (e.g. ``ssl_verify_upstream_trusted_ca``);
    ``connection_strategy`` defaults to ``lazy`` so that no upstream connection is
    opened before an addon has seen the request.
    """

    def __init__(
        self,
        addons: Sequence[Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ca: ProjectCA | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.addons = list(addons)
        self.host = host
        self.requested_port = port
        self.ca = ca or project_ca()
        self.extra_options = dict(options or {})
        self.port: int | None = None
        self._thread: threading.Thread | None = None
        self._master: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._error: str | None = None
        self._locked = False

    @property
    def url(self) -> str:
        if self.port is None:
            raise ProxyError("the proxy is not running")
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ProxyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 20.0) -> None:
        """Start the proxy thread; return once it listens, or raise :class:`ProxyError`."""
        if self.requested_port and not _port_free(self.host, self.requested_port):
            raise ProxyError(f"port {self.requested_port} on {self.host} is in use; choose another with --port")
        if not _lock.acquire(blocking=False):
            raise ProxyError("another proxy is already running in this process; stop it first")
        self._locked = True
        self._thread = threading.Thread(target=self._run, name="ego2web-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout) or self._error:
            err = self._error or "timed out waiting for the proxy to listen"
            self.stop()
            raise ProxyError(f"the proxy could not start: {err}")
        log.info("proxy listening on %s", self.url)

    def _run(self) -> None:
        collector = _ErrorCollector()
        logging.getLogger().addHandler(collector)
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(collector))
        except BaseException as e:  # noqa: BLE001 - report any startup failure to the caller
            self._error = self._error or f"{type(e).__name__}: {e}"
            self._started.set()
        finally:
            logging.getLogger().removeHandler(collector)
            _cancel_pending(loop)
            loop.close()

    async def _main(self, collector: _ErrorCollector) -> None:
        from mitmproxy import master, options
        from mitmproxy.addons import core, disable_h2c, next_layer, proxyserver, tlsconfig

        opts = options.Options(listen_host=self.host, listen_port=self.requested_port)
        m = master.Master(opts)
        self._master = m
        ps = proxyserver.Proxyserver()
        m.addons.add(core.Core(), disable_h2c.DisableH2C(), ps, next_layer.NextLayer(), tlsconfig.TlsConfig())
        m.addons.add(*self.addons)
        settings: dict[str, Any] = {
            "confdir": str(self.ca.confdir),
            "connection_strategy": "lazy",
            "listen_host": self.host,
            "listen_port": self.requested_port,
        }
        settings.update(self.extra_options)
        try:
            m.options.update(**settings)
        except Exception as e:  # mitmproxy raises OptionsError on bad values
            raise ProxyError(f"bad proxy option: {e}") from None

        async def watch() -> None:
            for _ in range(400):
                addrs = ps.listen_addrs()
                if addrs:
                    self.port = addrs[0][1]
                    self._started.set()
                    return
                if collector.messages:
                    self._error = collector.messages[-1]
                    self._started.set()
                    m.shutdown()
                    return
                await asyncio.sleep(0.02)
            self._error = "the proxy did not start listening"
            self._started.set()
            m.shutdown()

        watcher = asyncio.ensure_future(watch())
        await m.run()
        watcher.cancel()

    def stop(self) -> None:
        """Stop the proxy and free its port; safe to call twice."""
        m, loop = self._master, self._loop
        if m is not None and loop is not None and not loop.is_closed() and loop.is_running():
            ps = m.addons.get("proxyserver")

            async def close() -> None:
                try:
                    await ps.servers.update([])
                finally:
                    m.should_exit.set()

            try:
                asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=10)
            except Exception:  # noqa: BLE001 - fall back to a plain shutdown
                if not loop.is_closed():
                    m.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._master = None
        self.port = None
        if self._locked:
            self._locked = False
            _lock.release()
