"""Keep a loaded replay index out of the cyclic garbage collector's way.

A snapshot's match index is hundreds of thousands of long-lived objects (captures,
keys, position lists). CPython's full collections walk every tracked object, so with a
large index each one pauses serving for tens to hundreds of milliseconds, and the
pauses land in the replay's tail latency. After an index is built, :func:`hold`
moves everything alive into the collector's permanent generation (``gc.freeze()``):
it is still freed by reference counting, but collections no longer traverse it.
Tables built later (a host's canonical keys, on its first non-exact request) are
frozen too (:func:`refreeze`). When the last replay holding the freeze closes,
:func:`release` hands the objects back to the collector (``gc.unfreeze()``), so that
an index kept alive only by a reference cycle can still be collected.

``EGO2WEB_REPLAY_GC_FREEZE=0`` turns this off (for comparing; see BENCHMARKS.md).
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["enabled", "hold", "refreeze", "release", "holders"]

_lock = threading.Lock()
_holders = 0


def enabled() -> bool:
    """Whether freezing is on (``EGO2WEB_REPLAY_GC_FREEZE`` is not ``0``)."""
    return os.environ.get("EGO2WEB_REPLAY_GC_FREEZE", "1").strip() != "0"


def holders() -> int:
    """How many open replays hold the freeze now."""
    return _holders


def hold() -> bool:
    """Freeze everything alive now (call once an index is built); True when a hold was taken."""
    global _holders
    if not enabled():
        return False
    with _lock:
        _holders += 1
        gc.freeze()
    return True


def refreeze() -> None:
    """Freeze again (after more long-lived tables were built) while some replay holds the freeze."""
    with _lock:
        if _holders:
            gc.freeze()


def release() -> None:
    """Drop one hold; the last one unfreezes, so closed indexes can be collected."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            gc.unfreeze()
