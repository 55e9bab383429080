"""Checks a command makes before its costly work: is the model endpoint there, is there a display.

A dead ``--base-url`` would otherwise show only after whole episodes (or the
first judge call's retries) have run, and under the endpoint's library's
words rather than the URL's. :func:`check_endpoint` asks the endpoint once
for ``GET {base}/models``: any HTTP answer, an error status included (not
every server has the route), means it is there; a refused connection, a name
that does not resolve, a TLS failure or no answer in time means it is not.
That request is not a model call: it sends no prompt, costs no tokens and is
not cached or counted.

Both raise :class:`PreflightError` (exit status 2) before anything is written.
"""

from __future__ import annotations

import os
import sys

from ..errors import Ego2WebError

__all__ = ["PreflightError", "check_display", "check_endpoint", "endpoint_url"]

#: Seconds the endpoint has to answer ``GET /models``.
PROBE_TIMEOUT_S = 10.0


class PreflightError(Ego2WebError):
    """A command cannot do its work in this environment (a dead endpoint, no display); nothing was done."""

    exit_code = 2


def endpoint_url(base_url: str | None) -> str | None:
    """The endpoint a model client will use: ``base_url`` or ``$OPENAI_BASE_URL`` (None: the hosted default)."""
    return base_url or os.environ.get("OPENAI_BASE_URL") or None


def check_endpoint(base_url: str, what: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`PreflightError` naming ``base_url`` when nothing answers HTTP there."""
    import urllib.error  # here, not at the top: `--help` imports every command module
    import urllib.request
    probe = base_url.rstrip("/") + "/models"
    headers = {"Accept": "application/json"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        request = urllib.request.Request(probe, headers=headers, method="GET")
    except ValueError:
        raise PreflightError(f"{what} endpoint {base_url!r} is not an http(s) URL") from None
    if request.type not in ("http", "https"):
        raise PreflightError(f"{what} endpoint {base_url!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read(1 << 16)
    except urllib.error.HTTPError as e:  # it answered: a server without /models, or one that wants a key
        e.close()
    except urllib.error.URLError as e:
        raise PreflightError(f"{what} endpoint {base_url} is unreachable ({_reason(e.reason)}); "
                             "start it or fix --base-url / OPENAI_BASE_URL") from None
    except TimeoutError:
        raise PreflightError(f"{what} endpoint {base_url} did not answer GET /models within {timeout_s:g} s; "
                             "start it or fix --base-url / OPENAI_BASE_URL") from None
    except (OSError, ValueError) as e:  # a reset, a malformed reply line
        raise PreflightError(f"{what} endpoint {base_url} is unreachable ({_reason(e)}); "
                             "start it or fix --base-url / OPENAI_BASE_URL") from None


def _reason(reason: object) -> str:
    import socket

    if isinstance(reason, socket.gaierror):
        return "its host name does not resolve"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    text = str(getattr(reason, "strerror", None) or reason)
    return text or type(reason).__name__


def check_display(what: str) -> None:
    """Raise :class:`PreflightError` when no graphical display is available for a headed browser."""
    if not sys.platform.startswith("linux"):  # macOS and Windows windows need no display variable
        return
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise PreflightError(f"{what} needs a display for its browser window and neither DISPLAY nor "
                             "WAYLAND_DISPLAY is set; run it in a desktop session (or under xvfb-run)")
