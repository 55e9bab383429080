"""Running a coroutine to its end from a test, whatever loop the calling thread holds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

__all__ = ["run_coro"]


def run_coro[T](coro: Coroutine[Any, Any, T], timeout_s: float = 300.0) -> T:
    """``asyncio.run(coro)`` in a thread of its own, its result or exception handed back: the test
    session's Playwright (sync API) holds a running loop in the main thread, where ``asyncio.run``
    refuses to start."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(coro))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(e)

    worker = threading.Thread(target=run, name="run-coro", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"coroutine still running after {timeout_s:.0f} s")
    if failed:
        raise failed[0]
    return out[0]
