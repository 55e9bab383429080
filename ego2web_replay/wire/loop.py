"""The event loop both fast proxies run on: uvloop's when it is installed, else asyncio's own.

uvloop (PyPI ``uvloop``, the ``fast`` extra) runs the same protocols with its transports in C
(libuv): the proxy's Python code is unchanged, the loop's own share of each request is smaller
(``benchmarks/bench_replay.py --wire``). ``EGO2WEB_REPLAY_UVLOOP=0`` keeps asyncio's loop even
when uvloop is installed (to compare, or to rule it out); without uvloop the standard loop is
used silently, as before. :func:`loop_name` says which one a proxy runs on.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

__all__ = ["new_loop", "loop_name", "ENV"]

ENV = "EGO2WEB_REPLAY_UVLOOP"


def _uvloop() -> Any:
    if os.environ.get(ENV, "").strip().lower() in ("0", "no", "false", "off"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's if installed and not turned off by ``EGO2WEB_REPLAY_UVLOOP=0``."""
    uv = _uvloop()
    return uv.new_event_loop() if uv is not None else asyncio.new_event_loop()


def loop_name() -> str:
    """``uvloop <version>`` or ``asyncio``: the loop :func:`new_loop` makes now."""
    uv = _uvloop()
    return f"uvloop {uv.__version__}" if uv is not None else "asyncio"
