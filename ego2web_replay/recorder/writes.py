"""The recorder's WARC writes, off the event loop: one thread writes every record, in the order handed over.

Compressing and writing a record (a streamed body of a hundred megabytes takes a second or more) must
not stop the proxy from forwarding other exchanges, so the engines hand each archive write to
:class:`WriteQueue` and await its result (the browser still gets a body's end only once its record
is written: :mod:`.stream`). One thread does all the writes, so records reach the WARC file in the
order they were handed over and never interleave; it starts with the first write and stops when
the queue is drained (:meth:`WriteQueue.drain`), to start again with the next. A small write
(``inline``: the caller's choice, the engines' for records under :data:`INLINE_BYTES`) handed over
while nothing is queued is done at once in the caller's thread, the writer thread waiting meanwhile:
a hop to the thread and back, and the two threads taking turns on the GIL, cost more than such a
write (measured: 1 KiB exchanges all through the thread went at about half the rate).

What a queued write holds in memory (a body spooled in memory, a request body) counts against
``limit`` (:data:`PENDING_BYTES`): past it, :meth:`~WriteQueue.run` waits for earlier writes to
finish before handing over more, and one write is always let through, however large. A write that
raises is counted in ``errors``, logged, and its exception raised to the one who awaits it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["WriteQueue", "PENDING_BYTES", "INLINE_BYTES"]

log = logging.getLogger(__name__)

PENDING_BYTES = 32 << 20
INLINE_BYTES = 64 << 10
T = TypeVar("T")


@dataclass
class _Job:
    fn: Callable[[], Any]
    cost: int
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[Any]


def _call_in(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)`` in ``loop``'s thread; nothing when that loop has closed (the proxy stopped)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def _wake(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():  # its awaiter was cancelled: the write happened all the same
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class WriteQueue:
    """One writer thread for one archive (see the module docstring)."""

    def __init__(self, limit: int = PENDING_BYTES, name: str = "ego2web-warc-writer") -> None:
        self.limit, self.name = limit, name
        self.errors = 0
        self._cond = threading.Condition()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pending = 0  # the cost of the writes handed over and not yet done
        self._busy = 0  # writes handed over and not yet done
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._stop = False
        self._inline = False  # a write is being done in its caller's thread: the writer thread waits

    @property
    def pending_bytes(self) -> int:
        return self._pending

    async def run(self, fn: Callable[[], T], cost: int = 0, inline: bool = False) -> T:
        """``fn()`` on the writer thread, after the writes handed over before it; its result (or exception).
        ``inline``: in this thread at once when no write is queued (see the module docstring)."""
        loop = asyncio.get_running_loop()
        if inline:
            with self._cond:
                inline = not self._busy
                if inline:
                    self._busy += 1
                    self._inline = True
            if inline:
                try:
                    return fn()
                except BaseException as e:  # noqa: BLE001 - raised to the caller, counted and logged
                    self._failed(e)
                    raise
                finally:
                    with self._cond:
                        self._inline = False
                    self._done(0)
        while True:
            with self._cond:
                if not self._busy or self._pending + cost <= self.limit:
                    done: asyncio.Future[T] = loop.create_future()
                    self._pending += cost
                    self._busy += 1
                    self._jobs.append(_Job(fn, cost, loop, done))
                    if self._thread is None:
                        self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                        self._thread.start()
                    self._cond.notify_all()
                    break
                room: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, room))
            await room  # an earlier write finished: look again
        return await done

    async def drained(self) -> None:
        """Wait (in the loop) until every write handed over is done."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if not self._busy:
                    return
                room: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, room))
            await room

    def drain(self) -> None:
        """Wait until every write handed over is done, then stop the thread (the next write starts one)."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            thread, self._stop = self._thread, True
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._cond:
            self._stop = False

    def _work(self) -> None:
        while True:
            with self._cond:
                while (not self._jobs or self._inline) and not self._stop:
                    self._cond.wait()
                if not self._jobs:
                    self._thread = None
                    return
                job = self._jobs.popleft()
            try:
                value, ok = job.fn(), True
            except BaseException as e:  # noqa: BLE001 - raised to the awaiter, counted and logged here
                value, ok = e, False
                self._failed(e)
            _call_in(job.loop, _settle, job.done, ok, value)
            self._done(job.cost)

    def _failed(self, e: BaseException) -> None:
        self.errors += 1
        log.error("ego2web-replay: the archive writer failed: %s: %s", type(e).__name__, e)

    def _done(self, cost: int) -> None:
        """A write is over: its room is free, and whoever waits for room looks again."""
        with self._cond:
            self._pending -= cost
            self._busy -= 1
            waiters, self._waiters = self._waiters, []
            self._cond.notify_all()
        for loop, room in waiters:
            _call_in(loop, _wake, room)
