"""Drift probes: re-visit a snapshot's recorded pages live and say what changed.

For each snapshot, the main documents (the manifest's pages and every archived
HTML response) and the JSON resources the task needed are fetched again
through the recording proxy, so the probe itself is archived as a snapshot
(``source="probe"``). Per URL: status then and now, whether the payload digest
is equal, and how similar the visible text is; each URL is classified by the
change classifier (:mod:`ego2web_replay.tracking.changes`: ``unchanged``,
``changed``, ``gone`` including soft 404s, recognised against the site's own
not-found page, fetched once per host at a URL that cannot exist, and
``blocked`` for CAPTCHA and access-denied interstitials), or is ``error`` when
it could not be fetched (unreachable, refused by the guard). A task is as bad
as its worst main document: blocked > gone > changed > unchanged, and is
``changed`` at least when one of its JSON resources is not unchanged (a change
seen only in a JSON response); a task none of whose pages could be fetched is
``unreachable`` when every fetch failed to reach the site (it is down), else
``unknown``, never ``unchanged``.
"""

from __future__ import annotations

import difflib
import hashlib
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import SnapshotError
from ..web import html_to_text

__all__ = ["snapshots_to_probe", "UrlProbe", "probe_snapshot", "visible_text", "task_status_of", "probe_snapshots"]

_SEVERITY = {"unchanged": 0, "changed": 1, "gone": 2, "blocked": 3}


def decode_body(body: bytes, headers: Sequence[tuple[str, str]]) -> bytes:
    """Undo Content-Encoding; a body that cannot be decoded is compared as stored."""
    from ..web import decode_body as undo

    enc = next((v for k, v in headers if k.lower() == "content-encoding"), None)
    decoded = undo(body, enc)
    return body if decoded is None else decoded


def visible_text(body: bytes, content_type: str | None) -> str:
    """The text a reader sees (HTML stripped of markup and scripts); other text as is."""
    text = body.decode("utf-8", errors="replace")
    if content_type and "html" in content_type.lower():
        return " ".join(html_to_text(text).split())
    return text


@dataclass
class UrlProbe:
    url: str
    status_then: int | None
    status_now: int | None
    digest_equal: bool | None
    text_similarity: float | None
    url_status: str
    main_document: bool
    error: str | None = None


def task_status_of(probes: Sequence[UrlProbe]) -> str:
    """Worst status among the fetched main documents (all fetched URLs when there are none), and at
    least ``changed`` when a JSON resource the pages used is not unchanged (the page still stands,
    its data moved); when nothing could be fetched, ``unreachable`` if the site could not be reached
    at all, else ``unknown``."""
    fetched = [p for p in probes if p.url_status in _SEVERITY]
    mains = [p for p in fetched if p.main_document] or fetched
    if not mains:
        from .drift import unfetched_status

        return unfetched_status(p.error for p in probes)
    worst = max((p.url_status for p in mains), key=lambda s: _SEVERITY[s])
    if _SEVERITY[worst] < _SEVERITY["changed"] and any(p.url_status != "unchanged" for p in fetched):
        return "changed"
    return worst


def _fetch(opener: urllib.request.OpenerDirector, url: str, timeout: float) -> tuple[int | None, list[tuple[str, str]], bytes, str | None]:
    req = urllib.request.Request(url, headers={"User-Agent": "ego2web-replay drift probe", "Accept-Encoding": "gzip"})
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, list(resp.headers.items()), resp.read(), None
    except urllib.error.HTTPError as e:
        return e.code, list(e.headers.items()), e.read(), None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return None, [], b"", f"unreachable: {reason}"


def _targets(snap: Any) -> list[tuple[Any, bool]]:
    pages = set(snap.manifest.pages)
    out: list[tuple[Any, bool]] = []
    seen: set[str] = set()
    from ..snapshots.served import served_entry

    for e in snap.entries():
        if e.record_type not in ("response", "revisit") or (e.method or "GET").upper() != "GET" or e.url in seen:
            continue
        e = served_entry(snap, e)  # a revisit probes as the response it replays
        mime = (e.mime or "").lower()
        main = e.url in pages or ("html" in mime and (e.status or 0) < 300)
        if main or "json" in mime:
            seen.add(e.url)
            out.append((e, main))
    return out


def probe_snapshot(snapshot: Path, *, proxy_url: str, ca_file: Path, timeout: float = 15.0,
                   progress: Callable[[str], None] | None = None) -> list[UrlProbe]:
    """Probe one snapshot's pages through an already running (recording) proxy."""
    from ..snapshots.snapshot import Snapshot
    from .changes import Response, classify

    snap = Snapshot.open(snapshot)
    ctx = ssl.create_default_context(cafile=str(ca_file))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url}),
                                         urllib.request.HTTPSHandler(context=ctx),
                                         _NoRedirect())
    results = []
    not_found: dict[str, list[str]] = {}
    for entry, main in _targets(snap):
        if progress:
            progress(entry.url)
        try:
            then = snap.resolve(entry)
            then_body = decode_body(then.payload, then.http_headers or [])
        except Exception as e:  # noqa: BLE001 - an unreadable capture is that URL's error only
            results.append(UrlProbe(entry.url, entry.status, None, None, None, "error", main, f"archive: {e}"))
            continue
        status, headers, body, err = _fetch(opener, entry.url, timeout)
        marker = next((v for k, v in headers if k.lower() == "x-ego2web-replay"), "")
        if marker.startswith("blocked"):
            err = f"not probed: the upstream guard refused this host ({marker})"
            results.append(UrlProbe(entry.url, entry.status, None, None, None, "error", main, err))
            continue
        server = next((v for k, v in headers if k.lower() == "server"), "")
        if marker.startswith("upstream-error"):  # the fast recorder's own answer: the origin could not be asked
            err = "unreachable: " + visible_text(body, "text/plain")[:200]
        elif status in (502, 504) and server.startswith("mitmproxy"):  # mitmproxy's own "cannot connect" page
            err = "unreachable: " + visible_text(body, "text/html")[:200]
        if err:
            results.append(UrlProbe(entry.url, entry.status, None, None, None, "error", main, err))
            continue
        now_body = decode_body(body, headers)
        same = hashlib.sha256(now_body).digest() == hashlib.sha256(then_body).digest()
        ctype = next((v for k, v in headers if k.lower() == "content-type"), entry.mime)
        t_then, t_now = visible_text(then_body, entry.mime), visible_text(now_body, ctype)
        sim = 1.0 if same else round(difflib.SequenceMatcher(None, t_then, t_now, autojunk=False).ratio(), 4)
        old = Response(entry.url, then.http_status or entry.status, tuple(then.http_headers or []), then_body,
                       entry.mime or "")
        new = Response(entry.url, status, tuple(headers), now_body, ctype or "")
        host = urlsplit(entry.url).netloc
        if host not in not_found:  # fetched once per host
            not_found[host] = _not_found_page(opener, entry.url, timeout)
        nf = not_found[host]
        change = classify(old, new, not_found=nf)
        results.append(UrlProbe(entry.url, entry.status, status, same, sim, change.status, main))
    return results


def _not_found_page(opener: urllib.request.OpenerDirector, url: str, timeout: float) -> list[str]:
    """The normalised visible text of the site's page for a URL that cannot exist (soft-404 reference)."""
    from .changes import normalize_text
    from .pagefacts import page_facts

    parts = urlsplit(url)
    status, headers, body, err = _fetch(opener, f"{parts.scheme}://{parts.netloc}/ego2web-replay-no-such-page-"
                                        f"{uuid.uuid4().hex[:12]}", timeout)
    if err or status is None:
        return []
    ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
    if "html" not in ctype.lower():
        return []
    return [normalize_text(page_facts(decode_body(body, headers).decode("utf-8", errors="replace")).text)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def probe_snapshots(snapshots: Sequence[Path], *, archive_root: Path, guard: str = "open",
                    upstream_ca: Path | None = None, timeout: float = 15.0,
                    on_task: Callable[[str, str, list[UrlProbe]], None] | None = None) -> tuple[str, list[Any]]:
    """Probe several snapshots and archive each probe.

    Returns the probe id and the :class:`~ego2web_replay.tracking.drift.ProbeResult` rows; storing
    them (:func:`~ego2web_replay.tracking.drift.record_probe`) is the caller's choice.
    """
    from ..models import Task
    from ..recorder.session import LiveRecording, RecordOptions
    from ..snapshots.snapshot import Snapshot
    from .drift import ProbeResult

    probe_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    rows: list[ProbeResult] = []
    for path in snapshots:
        try:
            snap = Snapshot.open(path)
        except SnapshotError as e:
            raise SnapshotError(f"cannot probe {path}: {e}") from None
        m = snap.manifest
        task = Task(id=m.task_id, instruction="drift probe", start_url=m.start_url or "http://invalid/")
        opts = RecordOptions(guard=guard, upstream_ca=upstream_ca, source="probe", screenshots=False)
        with LiveRecording(task, archive_root, opts) as live:
            probes = probe_snapshot(path, proxy_url=live.proxy_url, ca_file=live.ca.cert_path, timeout=timeout)
        status = task_status_of(probes)
        at = datetime.now(UTC)
        for p in probes:
            rows.append(ProbeResult(probe_id=probe_id, probed_at=at, task_id=m.task_id, snapshot_id=m.snapshot_id,
                                    url=p.url, status_then=p.status_then, status_now=p.status_now,
                                    digest_equal=p.digest_equal, text_similarity=p.text_similarity,
                                    url_status=p.url_status, task_status=status, error=p.error))  # type: ignore[arg-type]
        if on_task:
            on_task(m.task_id, status, probes)
    return probe_id, rows


def snapshots_to_probe(paths: Sequence[Path], task_ids: Sequence[str] = ()) -> list[Path]:
    """Snapshot folders named directly, plus the newest complete snapshot of each task under a root."""
    from ..snapshots.snapshot import list_snapshots

    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "manifest.json").is_file():
            out.append(p)
            continue
        if not p.is_dir():
            raise SnapshotError(f"{p}: not a snapshot folder or a snapshots root")
        newest: dict[str, Path] = {}
        for info in list_snapshots(p):
            if info.complete and info.task_id not in newest and (info.manifest is None or info.manifest.source in ("record", "import")):
                newest[info.task_id] = info.path
        out.extend(newest.values())
    if task_ids:
        wanted = set(task_ids)
        out = [p for p in out if p.parent.name in wanted]
    if not out:
        raise SnapshotError(f"no snapshots to probe in {', '.join(map(str, paths))}")
    return out
