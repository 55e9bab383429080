"""The upstream guard: decides which hosts the proxy may ever connect to.

One mitmproxy addon. It answers, in the proxy itself and without any upstream
connection, (a) the background requests Chromium makes on its own (component
updates, time checks, sign-in pings), (b) hosts outside the allow policy.
``loopback`` mode (what every test uses) allows only 127.0.0.0/8, ::1 and
``localhost``; ``allowlist`` allows loopback plus ``guard_allow``; ``open``
allows everything not denied. A ``server_connect`` check repeats the decision
at the socket level, so nothing slips through on another path.
"""

from __future__ import annotations

import ipaddress
import logging
import typing
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["UpstreamGuard", "GuardPolicy", "BACKGROUND_HOSTS", "blocked_response", "is_loopback_host",
           "host_matches"]

log = logging.getLogger(__name__)

#: Hosts Chromium contacts in the background even with --disable-background-networking.
BACKGROUND_HOSTS: tuple[str, ...] = (
    "update.googleapis.com",
    "clients1.google.com",
    "clients2.google.com",
    "clients4.google.com",
    "clients2.googleusercontent.com",
    "accounts.google.com",
    "safebrowsing.googleapis.com",
    "safebrowsing.google.com",
    "optimizationguide-pa.googleapis.com",
    "content-autofill.googleapis.com",
    "android.clients.google.com",
    "componentupdater.googleapis.com",
    "edgedl.me.gvt1.com",
    "redirector.gvt1.com",
    "gvt1.com",
    "gvt2.com",
)

BLOCK_HEADER = "X-Ego2Web-Replay"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals."""
    h = host.strip("[]").lower().rstrip(".")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def host_matches(host: str, patterns: Iterable[str]) -> bool:
    """``host`` equals a pattern or is a subdomain of it (``*.`` prefixes are allowed)."""
    h = host.lower().rstrip(".")
    for p in patterns:
        p = p.lower().lstrip("*").lstrip(".")
        if p and (h == p or h.endswith("." + p)):
            return True
    return False


@dataclass(frozen=True)
class GuardPolicy:
    """Which upstream hosts may be contacted: the guard's decision, without mitmproxy."""

    mode: str = "loopback"
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    block_background: bool = True

    def allowed(self, host: str) -> tuple[bool, str]:
        """Whether ``host`` may be contacted upstream, and why not."""
        if self.block_background and host_matches(host, BACKGROUND_HOSTS):
            return False, "background"
        if host_matches(host, self.deny):
            return False, "denied"
        if is_loopback_host(host):
            return True, ""
        if self.mode == "open":
            return True, ""
        if self.mode == "allowlist" and host_matches(host, self.allow):
            return True, ""
        return False, "not-allowed"


def blocked_response(host: str, why: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """The proxy's own answer for a host it never contacts: status, headers, body."""
    body = f"ego2web-replay: upstream {host} is blocked ({why})\n".encode()
    return 403, [("Content-Type", "text/plain; charset=utf-8"), (BLOCK_HEADER, f"blocked; reason={why}"),
                 ("Cache-Control", "no-store"), ("Content-Length", str(len(body)))], body


class UpstreamGuard:
    """mitmproxy addon; see the module docstring. ``counts`` holds what it answered."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.blocked_urls: list[str] = []

    def load(self, loader: Any) -> None:
        loader.add_option(
            "guard_mode", str, "loopback",
            "Which upstream hosts may be contacted: loopback, allowlist or open.",
            choices=["loopback", "allowlist", "open"],
        )
        loader.add_option("guard_allow", typing.Sequence[str], [], "Hosts allowed in allowlist mode (subdomains included).")
        loader.add_option("guard_deny", typing.Sequence[str], [], "Hosts never contacted, in any mode.")
        loader.add_option("guard_block_background", bool, True, "Answer Chromium's background hosts in the proxy.")

    def allowed(self, host: str) -> tuple[bool, str]:
        """Whether ``host`` may be contacted upstream, and why not."""
        from mitmproxy import ctx

        opts = ctx.options
        return GuardPolicy(opts.guard_mode, tuple(opts.guard_allow), tuple(opts.guard_deny),
                           opts.guard_block_background).allowed(host)

    def request(self, flow: Any) -> None:
        from mitmproxy import http

        if flow.response is not None:
            return
        ok, why = self.allowed(flow.request.pretty_host)
        if ok:
            return
        self.counts[why] += 1
        if len(self.blocked_urls) < 1000:
            self.blocked_urls.append(flow.request.pretty_url)
        flow.metadata["ego2web"] = "blocked"
        status, headers, body = blocked_response(flow.request.pretty_host, why)
        flow.response = http.Response.make(status, body, [(k.encode(), v.encode()) for k, v in headers])

    def server_connect(self, data: Any) -> None:
        address = data.server.address
        if address is None:
            return
        host = str(address[0])
        ok, why = self.allowed(host)
        if not ok:
            self.counts[f"connect-{why}"] += 1
            data.server.error = f"ego2web-replay: connection to {host} refused by the upstream guard ({why})"
