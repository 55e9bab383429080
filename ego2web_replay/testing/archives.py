"""Recording a list of requests through the real recording proxy, without a browser.

``record_requests`` starts a :class:`~ego2web_replay.recorder.session.LiveRecording`
(proxy, guard, recorder) and fetches each :class:`Fetch` through it with the
headers a browser would send (``Sec-Fetch-Dest``, ``Referer``), so tests of
drift and pair diffs read archives written the way live runs write them.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Fetch", "record_requests"]


@dataclass(frozen=True)
class Fetch:
    """One request: ``dest`` is the Sec-Fetch-Dest a browser would send (document, empty, image)."""

    url: str
    dest: str = "document"
    method: str = "GET"
    body: bytes | None = None
    content_type: str | None = None
    referer: str | None = None


def record_requests(task_id: str, fetches: Sequence[Fetch], root: Path, *, source: str = "record",
                    ca: object | None = None) -> Path:
    """Fetch ``fetches`` in order through a recording proxy into ``root/<task_id>/<id>/``; the snapshot path."""
    from ..models import Task
    from ..proxy import project_ca
    from ..recorder.session import LiveRecording, RecordOptions

    task = Task(id=task_id, instruction="record requests", start_url=fetches[0].url if fetches else "http://invalid/")
    live = LiveRecording(task, root, RecordOptions(guard="loopback", source=source, screenshots=False),
                         ca=ca or project_ca())  # type: ignore[arg-type]
    with live:
        ctx = ssl.create_default_context(cafile=str(live.ca.cert_path))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": live.proxy_url, "https": live.proxy_url}),
            urllib.request.HTTPSHandler(context=ctx))
        for f in fetches:
            headers = {"Sec-Fetch-Dest": f.dest, "User-Agent": "ego2web-replay test"}
            if f.referer:
                headers["Referer"] = f.referer
            if f.content_type:
                headers["Content-Type"] = f.content_type
            req = urllib.request.Request(f.url, data=f.body, method=f.method, headers=headers)
            try:
                with opener.open(req, timeout=10) as resp:
                    resp.read()
            except urllib.error.HTTPError as e:
                e.read()
        if fetches and live.writer is not None:
            live.writer.add_page(fetches[0].url)
    if not live.ok or live.snapshot_path is None:
        raise RuntimeError(f"recording {task_id} failed: {live.error}")
    return live.snapshot_path
