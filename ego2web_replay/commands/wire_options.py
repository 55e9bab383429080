"""The proxy wire's bounds and timeouts, declared once: ``serve``, ``record`` and ``run`` take exactly these.

The decorated command receives ``wire``: a :class:`~ego2web_replay.wire.budget.WireLimits`
(each option not given keeps its environment variable's value, else the default; see
docs/limits.md). They bound the fast engine; ``--engine mitmproxy`` keeps mitmproxy's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

__all__ = ["wire_options"]

_OPTIONS = [
    click.option("--max-connections", "wire_max_connections", type=click.IntRange(1), default=None, metavar="N",
                 help="Proxy: client connections at once (default 4096, under the descriptor limit); past it the "
                      "longest-silent idle one is closed, or the newcomer answered 503."),
    click.option("--body-budget", "wire_body_budget_mib", type=click.IntRange(1), default=None, metavar="MIB",
                 help="Proxy: MiB of request bodies held in memory at once, all connections together (default "
                      "512); the request that would pass it is answered 503."),
    click.option("--max-pipelined", "wire_max_pipelined", type=click.IntRange(1), default=None, metavar="N",
                 help="Proxy: HTTP/1.1 requests of one connection answered per turn (default 64)."),
    click.option("--max-streams", "wire_max_streams", type=click.IntRange(1), default=None, metavar="N",
                 help="Proxy: concurrent HTTP/2 streams per connection (default 100)."),
    click.option("--cert-cache", "wire_cert_cache", type=click.IntRange(1), default=None, metavar="N",
                 help="Proxy: leaf certificates kept, least recently used dropped (default 1000)."),
    click.option("--head-timeout", "wire_head_timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
                 metavar="S", help="Proxy: seconds to read a request head (and TLS) (default 30); then 408."),
    click.option("--idle-timeout", "wire_idle_timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
                 metavar="S", help="Proxy: seconds a kept-alive connection may wait for its next request (default 120)."),
    click.option("--body-timeout", "wire_body_timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
                 metavar="S", help="Proxy: seconds a request body may make no progress, or answers stay unread "
                                   "(default 60); then 408 or the connection is closed."),
]


def wire_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the wire options to a click command; it receives ``wire: WireLimits``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..wire.budget import WireLimits

        given = {k.removeprefix("wire_"): kwargs.pop(k) for k in list(kwargs) if k.startswith("wire_")}
        mib = given.pop("body_budget_mib")
        kwargs["wire"] = WireLimits.from_env(**given, body_budget=mib << 20 if mib else None)
        return command(*args, **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper
