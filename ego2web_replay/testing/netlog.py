"""Read a Chromium net-log (``--log-net-log=FILE``): which host names did Chromium resolve itself?"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

__all__ = ["resolved_names", "netlog_args"]

_RESOLVER_EVENTS = ("HOST_RESOLVER_MANAGER_REQUEST", "HOST_RESOLVER_MANAGER_JOB", "DNS_TRANSACTION",
                    "HOST_RESOLVER_SYSTEM_TASK")


def netlog_args(path: Path) -> list[str]:
    """Chromium flags that write every network event (resolver requests included) to ``path``."""
    return [f"--log-net-log={path}", "--net-log-capture-mode=Everything"]


def _host(value: str) -> str:
    host = value.split("://", 1)[-1].rsplit("@", 1)[-1]
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.split(":", 1)[0].rstrip(".").lower()


def resolved_names(path: Path) -> set[str]:
    """Host names Chromium handed to its resolver (system or built-in DNS), not counting IP
    literals, ``localhost`` and names the host-resolver rules turned into a failed lookup."""
    data = json.loads(Path(path).read_text("utf-8"))
    names = {v: k for k, v in data["constants"]["logEventTypes"].items()}
    found: set[str] = set()
    for event in data.get("events", []):
        if names.get(event.get("type")) not in _RESOLVER_EVENTS:
            continue
        params = event.get("params") or {}
        raw = params.get("host") or params.get("hostname")
        if not isinstance(raw, str):
            continue
        host = _host(raw)
        if host in ("", "~notfound", "localhost") or host.endswith(".localhost"):
            continue
        try:
            ipaddress.ip_address(host)
            continue
        except ValueError:
            found.add(host)
    return found
