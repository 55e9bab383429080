"""Per-host TLS for the fast front end: leaf certificates minted from the project CA.

The project CA (:func:`ego2web_replay.proxy.project_ca`, the one mitmproxy uses
too) signs one short-lived leaf per host the client tunnels to, so a client that
trusts the CA, by file or by its SPKI pin, trusts the replay. Leaves share one
P-256 key (minting is one signature); each host's :class:`ssl.SSLContext` is made
once and kept, at most ``cache`` of them (the least recently used is dropped, and
made again if its host comes back), so a client naming ever new SNI hosts cannot
grow the proxy's memory. The standard library loads certificates only from files, so each
leaf (with the key) is written to a private temporary file (0600), loaded, and
removed at once: nothing stays on disk, even when the process is killed.
An SNI callback moves a handshake to the context of the name the client asked for.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
import threading
from collections import OrderedDict
from typing import Any

from ..errors import ProxyError
from ..proxy import ProjectCA

__all__ = ["LeafCerts", "ALPN_H2", "ALPN_HTTP1"]

ALPN_H2 = "h2"
ALPN_HTTP1 = "http/1.1"
_VALID_DAYS = 365  # Chromium refuses leaves valid for more than 398 days


class LeafCerts:
    """Server-side SSL contexts per host, signed by ``ca``; ``http2`` offers h2 by ALPN; at most
    ``cache`` kept (``minted`` counts those made)."""

    def __init__(self, ca: ProjectCA, *, http2: bool = True, cache: int = 1000) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        bundle = ca.confdir / "mitmproxy-ca.pem"
        try:
            pem = bundle.read_bytes()
            self._ca_key = serialization.load_pem_private_key(pem, password=None)
            self._ca_cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
        except (OSError, ValueError) as e:
            raise ProxyError(f"cannot read the project CA in {ca.confdir}: {e}") from None
        self._ca_pem = ca.cert_path.read_bytes()
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._key_pem = self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption())
        self._alpn = [ALPN_H2, ALPN_HTTP1] if http2 else [ALPN_HTTP1]
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._cache = max(1, cache)
        self._lock = threading.Lock()
        self.minted = 0

    def __len__(self) -> int:
        return len(self._contexts)

    def context(self, host: str) -> ssl.SSLContext:
        """The server context presenting a certificate for ``host`` (made once while it stays cached)."""
        host = host.strip("[]").lower().rstrip(".") or "localhost"
        with self._lock:
            ctx = self._contexts.get(host)
            if ctx is not None:
                self._contexts.move_to_end(host)
                return ctx
            ctx = self._contexts[host] = self._make(host)
            self.minted += 1
            while len(self._contexts) > self._cache:
                self._contexts.popitem(last=False)
        return ctx

    def _make(self, host: str) -> ssl.SSLContext:
        from cryptography.hazmat.primitives import serialization

        cert = self._mint(host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        fd, name = tempfile.mkstemp(prefix="ego2web-leaf-", suffix=".pem")  # 0600, this process's own
        try:
            with os.fdopen(fd, "wb") as f:  # leaf, then the CA, then the key
                f.write(cert.public_bytes(serialization.Encoding.PEM) + self._ca_pem + self._key_pem)
            ctx.load_cert_chain(name)
        finally:
            os.unlink(name)
        ctx.set_alpn_protocols(self._alpn)
        ctx.sni_callback = self._sni
        return ctx

    def _sni(self, sslobj: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        """Present the certificate of the name the client asked for (when it names one)."""
        if server_name:
            sslobj.context = self.context(server_name)

    def _mint(self, host: str) -> Any:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._ca_cert.subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=2))
            .not_valid_after(now + dt.timedelta(days=_VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._ca_cert.public_key()), critical=False)  # type: ignore[arg-type]
        )
        return builder.sign(self._ca_key, hashes.SHA256())  # type: ignore[arg-type]

    def close(self) -> None:
        """Nothing is left to remove (no leaf stays on disk); kept so a proxy's stop reads the same."""
