"""One way to retry a call that can fail for a moment: the agent's and the judge's model calls,
and opening the tracking database while another program holds its lock.

:func:`retry_call` calls again after a transient error (by default
:func:`is_transient_http`: timeouts, refused or broken connections, HTTP 408,
429 and 5xx from the ``openai`` client), waiting ``backoff_s`` and doubling the
wait each time up to ``backoff_max_s``, for at most ``retries`` more tries and/or
until ``timeout_s`` has passed; when the server says how long to wait (a
``Retry-After`` header, in seconds or as an HTTP date) that wait is used instead,
capped at ``retry_after_max_s``. Any other error propagates at once; when it
gives up, :class:`RetriesExhausted` carries the last error.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["RetriesExhausted", "retry_call", "is_transient_http", "backoff_delay", "retry_after"]


class RetriesExhausted(Exception):
    """Every try of a call failed with a transient error; ``last`` is the last one."""

    def __init__(self, last: Exception, attempts: int) -> None:
        super().__init__(f"failed after {attempts} attempts: {type(last).__name__}: {last}")
        self.last, self.attempts = last, attempts


def is_transient_http(error: Exception) -> bool:
    """An ``openai`` client error worth another try: a timeout, a refused or broken
    connection, or HTTP 408, 429 or 5xx."""
    import openai

    if isinstance(error, openai.APIConnectionError):  # timeouts included
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in (408, 429) or error.status_code >= 500
    return False


def backoff_delay(attempt: int, backoff_s: float, backoff_max_s: float) -> float:
    """The wait before try number ``attempt`` (0-based; the first try does not wait)."""
    return 0.0 if attempt <= 0 else min(backoff_max_s, backoff_s * 2 ** (attempt - 1))


def retry_after(error: Exception, cap: float) -> float | None:
    """The wait a ``Retry-After`` header on the error's HTTP response asks for (capped), or None."""
    from email.utils import parsedate_to_datetime

    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, min(cap, float(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, min(cap, when.timestamp() - time.time()))


def retry_call[T](call: Callable[[], T], *, retries: int | None = None, timeout_s: float | None = None,
                  backoff_s: float, backoff_max_s: float = 30.0,
                  transient: Callable[[Exception], bool] = is_transient_http,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic, retry_after_max_s: float = 120.0) -> T:
    """``call()``, tried again while it fails with a transient error: at most ``retries``
    more times, and no longer than ``timeout_s`` (give one or both)."""
    if retries is None and timeout_s is None:
        raise ValueError("retry_call needs retries, timeout_s or both")
    deadline = None if timeout_s is None else clock() + timeout_s
    attempt = 0
    while True:
        try:
            return call()
        except Exception as e:
            if not transient(e):
                raise
            attempt += 1
            if (retries is not None and attempt > retries) or (deadline is not None and clock() >= deadline):
                raise RetriesExhausted(e, attempt) from e
            asked = retry_after(e, retry_after_max_s)
            sleep(backoff_delay(attempt, backoff_s, backoff_max_s) if asked is None else asked)
