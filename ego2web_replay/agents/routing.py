"""Route by destination: what a program agent reaches through the proxy, and what never goes through it.

A program agent (``command:``) gets the proxy in ``HTTP_PROXY``/``HTTPS_PROXY``;
everything it fetches goes through it, except the exact ``host:port`` of its own
services, which ``NO_PROXY`` names:

* the model endpoint given with ``--base-url`` (or ``$OPENAI_BASE_URL``, which
  it inherits), and any ``--agent-service``;
* the DevTools port of the browser the runner gives it (``--agent-browser``).

The choice is made by destination, never by name: a model endpoint on
``127.0.0.1:8000`` bypasses the proxy while the site on ``127.0.0.1:5000`` goes
through it, and a third port of the same host that is neither still goes
through the proxy (a counted miss in a frozen run, which never connects). No
host-wide entry is written: ``NO_PROXY=127.0.0.1`` would hand every port of
that host to the program, the site's included. An own service whose address is
one the snapshot holds (frozen) or one of the task's sites (live) cannot be
told apart from the site: :func:`plan_routing` refuses it in one line.

``NO_PROXY`` entries with a port are honoured by Python's ``urllib``,
``httpx`` (so the OpenAI SDK), ``websockets`` and, for host names (not IP
literals), ``requests``; ``curl``, ``aiohttp`` and ``requests`` with an IP
literal ignore the port (docs/agents.md, "Routing": how to reach your own
service with those).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import AgentError

__all__ = ["Destination", "OwnService", "Routing", "parse_destination", "snapshot_destinations",
           "site_destinations", "proxied_destinations", "plan_routing", "note_own_services", "live_archive_origins",
           "DEFAULT_PORTS"]

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True, order=True)
class Destination:
    """One ``host:port`` a client connects to (the host lower-cased, IPv6 without brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        if self.host == "localhost" or self.host.endswith(".localhost"):
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def same_socket(self, other: Destination) -> bool:
        """The same listening socket: same port, and the same host or both loopback
        (``localhost:8000`` and ``127.0.0.1:8000`` reach one server)."""
        return self.port == other.port and (self.host == other.host or (self.loopback and other.loopback))


def parse_destination(text: str) -> Destination:
    """``scheme://host[:port]/...`` (the scheme's default port) or ``host:port``;
    :class:`AgentError` for anything else."""
    raw = text.strip()
    parts = urlsplit(raw if "://" in raw else "tcp://" + raw)
    try:
        port = parts.port
    except ValueError:
        port = None
        parts = parts._replace(netloc="")
    host = (parts.hostname or "").lower().rstrip(".")
    if port is None:
        port = DEFAULT_PORTS.get(parts.scheme.lower())
    if not host or port is None:
        raise AgentError(f"{text!r} is not a service address: give a URL (http://127.0.0.1:8000/v1) or host:port")
    return Destination(host, port)


def snapshot_destinations(urls: Iterable[str]) -> list[Destination]:
    """Every ``host:port`` of the captured ``urls`` (a snapshot index's URLs, streamed: the runner reads
    them with :func:`ego2web_replay.snapshots.index_cache.stream_rows`; agents know no snapshot)."""
    origins: set[str] = set()
    for url in urls:
        origins.add(url[:url.find("/", url.find("//") + 2)] if url.count("/") >= 3 else url)
    found: set[Destination] = set()
    for origin in origins:
        try:
            found.add(parse_destination(origin))
        except AgentError:
            continue
    return sorted(found)


def site_destinations(start_url: str | None, allowed_domains: Sequence[str]) -> list[Destination]:
    """The task's sites (live): its start URL's ``host:port``, and each allowed domain on its own port
    (``host:port``), else on 80 and 443."""
    found: set[Destination] = set()
    names = [start_url] if start_url else []
    for domain in allowed_domains:
        name = domain.strip().lstrip("*").lstrip(".")
        if name and urlsplit("tcp://" + name).port is None:
            names += [f"http://{name}", f"https://{name}"]
        elif name:
            names.append(name)
    for name in names:
        try:
            found.add(parse_destination(name))
        except (AgentError, ValueError):
            continue
    return sorted(found)


@dataclass(frozen=True)
class OwnService:
    """A service of the agent's own, reached directly: where, and what it is."""

    destination: Destination
    what: str


@dataclass
class Routing:
    """What goes through the proxy (``proxied``: the destinations the snapshot holds, or the task's
    sites) and the exact own services that never do (``direct``)."""

    proxied: list[Destination] = field(default_factory=list)
    direct: list[OwnService] = field(default_factory=list)
    proxied_from: str = "snapshot"

    def no_proxy(self) -> str:
        """``NO_PROXY``: each own service as ``host:port``, nothing host-wide."""
        seen: list[str] = []
        for s in self.direct:
            entry = f"{s.destination.host}:{s.destination.port}"  # requests and urllib compare host:port unbracketed
            if entry not in seen:
                seen.append(entry)
        return ",".join(seen)

    def record(self) -> dict[str, Any]:
        """For the trajectory's ``extra["routing"]``: what bypassed the proxy, never silently."""
        return {"direct": [{"address": str(s.destination), "what": s.what} for s in self.direct],
                "proxied_from": self.proxied_from, "proxied": [str(d) for d in self.proxied]}


def plan_routing(proxied: Sequence[Destination], services: Sequence[OwnService], *,
                 proxied_from: str = "snapshot") -> Routing:
    """The routing of one episode; :class:`AgentError` when an own service is also a proxied destination
    (``proxied_from``: ``snapshot`` in frozen runs, ``task`` in live ones)."""
    where = "the snapshot holds" if proxied_from == "snapshot" else "the task's sites use"
    for s in services:
        clash = next((d for d in proxied if d.same_socket(s.destination)), None)
        if clash is not None:
            raise AgentError(f"the agent's {s.what} {s.destination} is also an address {where} ({clash}): "
                             "the service cannot bypass the proxy while the site goes through it; move the service to another port")
    return Routing(proxied=list(proxied), direct=list(services), proxied_from=proxied_from)


def proxied_destinations(task: Any, captured_urls: Iterable[str] | None = None) -> list[Destination]:
    """What goes through the proxy in an episode: every ``host:port`` of the URLs its snapshots hold
    (frozen: ``captured_urls``), or, without them, the task's sites (live)."""
    if captured_urls is not None:
        return snapshot_destinations(captured_urls)
    return site_destinations(task.start_url, task.allowed_domains)


def live_archive_origins(extra: dict[str, Any], archived_urls: Callable[[], Iterable[str]]) -> list[str]:
    """``http://host:port/`` of each destination a live episode's archive holds (``archived_urls`` is only
    called when the trajectory's routing names own services)."""
    routing = extra.get("routing")
    if not isinstance(routing, dict) or not routing.get("direct"):
        return []
    return [f"http://{d}/" for d in snapshot_destinations(archived_urls())]


def note_own_services(extra: dict[str, Any], urls: Iterable[str], what: str) -> None:
    """Requests (``METHOD URL`` or URLs) to the agent's own services that reached the proxy anyway (a client
    that ignores ``NO_PROXY``'s ``host:port`` entries, such as curl): named in ``extra["routing"]
    ["own_services_proxied"]`` with a note in ``extra["notes"]``, never silent."""
    routing = extra.get("routing")
    if not isinstance(routing, dict) or not routing.get("direct"):
        return
    own = [parse_destination(d["address"]) for d in routing["direct"]]
    reached = []
    for item in urls:
        try:
            dest = parse_destination(item.split(" ", 1)[-1])
        except AgentError:
            continue
        if any(dest.same_socket(o) for o in own):
            reached.append(item)
    if reached:
        routing["own_services_proxied"] = reached
        extra.setdefault("notes", []).append(
            f"{len(reached)} request(s) to the agent's own services {what} (its client ignores NO_PROXY "
            "host:port entries; see docs/agents.md, Routing)")
