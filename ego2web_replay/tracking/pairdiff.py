"""Pair diff: a live episode's own archive against the frozen snapshot, resource by resource.

Every live episode is recorded through the recording proxy, so its archive
holds exactly what the agent's pages used at the time of the run. For each
document, fetch/XHR response and image in that archive, :func:`diff_pair`
finds the same request in the frozen snapshot (the very same request, else
the same canonical match key, the one replay uses; never a "similar" one)
and classifies the pair with :func:`~ego2web_replay.tracking.changes.classify`.
A request the snapshot never saw is ``new``. Scripts, styles and fonts are
not compared. A request of the snapshot's that the live run's recording proxy
could not get answered by the origin (its manifest's ``upstream_failures``:
connection refused, timed out, no such host) and never captured either is
``unreachable``: the site could not be reached at the time of the run.

Resources are grouped into pages (a document and the subresources whose
``Referer`` is that document; a document that redirected belongs to the page
it redirected to, so a sign-in redirect is part of the sign-in page it led
to); the resources of the agent's *final* page come
first among the changes, then the more severe ones (blocked, gone, changed,
unreachable, new). The pair's ``status`` is its most severe status apart from
``new`` (a page the snapshot never had is no evidence of drift), or ``unknown``
when nothing could be compared. ``unreachable`` ranks below every observed
change: it explains a flip only when nothing that was reached had changed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, Field

from ..errors import SnapshotError
from ..models import UpstreamFailure
from ..snapshots import CdxjEntry, Snapshot, iter_records
from .changes import Change, ChangeStatus, FieldChange, Response, classify, normalize_text
from .pagefacts import page_facts

__all__ = ["ResourceDiff", "PairDiff", "SEVERITY", "ResourceStatus", "diff_pair", "pair_status"]

SEVERITY = {"unknown": -1, "unchanged": 0, "new": 1, "unreachable": 2, "changed": 3, "gone": 4, "blocked": 5}
ResourceStatus = ChangeStatus | Literal["unreachable"]
_FORM = "application/x-www-form-urlencoded"


class ResourceDiff(BaseModel):
    """One resource the agent's pages used, live against frozen."""

    url: str
    method: str = "GET"
    kind: str = Field(description="document, xhr or image.")
    status: ResourceStatus
    status_then: int | None = Field(default=None, description="HTTP status in the frozen snapshot.")
    status_now: int | None = Field(default=None, description="HTTP status in the live archive.")
    detail: str = ""
    removed: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    fields: list[FieldChange] = Field(default_factory=list)
    volatile_only: bool = False
    frozen_url: str | None = Field(default=None, description="URL of the frozen capture it was paired with.")
    page: str | None = Field(default=None, description="The document this resource belongs to.")
    final_page: bool = Field(default=False, description="Used by the agent's final page.")
    captured_at: datetime | None = Field(default=None, description="When the live archive captured it.")


class PairDiff(BaseModel):
    """What changed between a frozen snapshot and a live episode's archive."""

    version: int = 1
    task_id: str
    run_id: str | None = None
    live_snapshot: str
    live_snapshot_id: str
    frozen_snapshot: str
    frozen_snapshot_id: str
    live_at: datetime = Field(description="When the live episode's archive was recorded (UTC).")
    diffed_at: datetime
    final_url: str | None = None
    status: str = Field(description="Most severe status apart from 'new'; 'unknown' if nothing compared.")
    resources: list[ResourceDiff] = Field(default_factory=list)

    def changes(self) -> list[ResourceDiff]:
        """Resources that are not unchanged, the agent's final page first, then by severity."""
        items = [(i, r) for i, r in enumerate(self.resources) if r.status != "unchanged"]
        items.sort(key=lambda ir: (not ir[1].final_page, -SEVERITY[ir[1].status], ir[0]))
        return [r for _, r in items]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("unchanged", "changed", "gone", "new", "blocked", "unreachable"), 0)
        for r in self.resources:
            out[r.status] += 1
        return out


def pair_status(statuses: list[str]) -> str:
    """The most severe status apart from ``new``; ``unknown`` when there is none."""
    compared = [s for s in statuses if s != "new"]
    return max(compared, key=lambda s: SEVERITY[s]) if compared else "unknown"


def _header(headers: list[tuple[str, str]] | None, name: str) -> str | None:
    return next((v for k, v in headers or [] if k.lower() == name), None)


def _request_headers(snap: Snapshot) -> dict[int, list[tuple[str, str]]]:
    """Request headers of each response record, by the response's offset."""
    by_id: dict[str, list[tuple[str, str]]] = {}
    offsets: dict[str, int] = {}
    for rec in iter_records(snap.archive_path):
        if rec.rec_type == "request":
            for rid in rec.concurrent_to:
                by_id[rid] = rec.http_headers or []
        elif rec.record_id:
            offsets[rec.record_id] = rec.offset
    return {off: by_id[rid] for rid, off in offsets.items() if rid in by_id}


def _kind(entry: CdxjEntry, request: list[tuple[str, str]] | None) -> str | None:
    dest = (_header(request, "sec-fetch-dest") or "").lower()
    if dest in ("document", "iframe", "frame"):
        return "document"
    if dest == "empty":
        return "xhr"
    if dest == "image":
        return "image"
    if dest:
        return None  # script, style, font, ...: not compared
    mime = (entry.mime or "").lower()
    if "html" in mime:
        return "document"
    if "json" in mime or (_header(request, "x-requested-with") or "").lower() == "xmlhttprequest":
        return "xhr"
    return "image" if mime.startswith("image/") else None


def _response(snap: Snapshot, entry: CdxjEntry) -> Response:
    from ..web import decode_body

    rec = snap.resolve(entry)
    headers = tuple(rec.http_headers or [])
    body = decode_body(rec.payload, _header(list(headers), "content-encoding"))
    return Response(url=entry.url, status=rec.http_status if rec.http_status is not None else entry.status,
                    headers=headers, body=rec.payload if body is None else body, mime=entry.mime or "")


def _key(entry: CdxjEntry, rules: object) -> str:
    from ..replay.canonical import match_key

    body = entry.request_body_query.encode("utf-8") if entry.request_body_query else None
    return match_key(entry.method, entry.url, body, _FORM if body else None, rules)  # type: ignore[arg-type]


def _captured(entry: CdxjEntry) -> datetime | None:
    try:
        return datetime.strptime(entry.timestamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _not_found_pages(snaps: list[Snapshot]) -> dict[str, list[str]]:
    """Normalised visible texts of each host's 404/410 HTML pages in these archives."""
    out: dict[str, list[str]] = defaultdict(list)
    for snap in snaps:
        for e in snap.entries():
            if e.status in (404, 410) and "html" in (e.mime or "").lower():
                try:
                    text = normalize_text(page_facts(_response(snap, e).text()).text)
                except Exception:  # noqa: BLE001 - an unreadable page is no reference
                    continue
                host = urlsplit(e.url).netloc
                if text and text not in out[host]:
                    out[host].append(text)
    return out


def diff_pair(live: Path, frozen: Path, *, final_url: str | None = None, task_id: str | None = None,
              run_id: str | None = None, not_found: dict[str, list[str]] | None = None) -> PairDiff:
    """Diff a live episode's archive (a snapshot folder) against a frozen snapshot folder.

    ``not_found`` adds known not-found page texts per host (``netloc``) to those
    found in the two archives.
    """
    from ..replay.rules import default_rules

    try:
        live_snap, frozen_snap = Snapshot.open(live), Snapshot.open(frozen)
    except SnapshotError as err:
        raise SnapshotError(f"cannot diff: {err}") from None
    rules = default_rules()
    exact: dict[tuple[str, str, str], list[CdxjEntry]] = defaultdict(list)
    canon: dict[str, list[CdxjEntry]] = defaultdict(list)
    for e in sorted(frozen_snap.entries(), key=lambda e: e.offset):
        exact[(e.method, e.url, e.request_body_query or "")].append(e)
        canon[_key(e, rules)].append(e)
    nf = _not_found_pages([frozen_snap, live_snap])
    for host, texts in (not_found or {}).items():
        nf[host].extend(texts)
    requests = _request_headers(live_snap)
    redirects: dict[str, str] = {}
    used: dict[int, int] = defaultdict(int)
    resources: list[ResourceDiff] = []
    last_doc: str | None = None
    for e in sorted(live_snap.entries(), key=lambda e: e.offset):
        req = requests.get(e.offset)
        kind = _kind(e, req)
        if kind is None:
            continue
        candidates = exact.get((e.method, e.url, e.request_body_query or "")) or canon.get(_key(e, rules)) or []
        old_entry = None
        if candidates:
            n = used[id(candidates)]
            used[id(candidates)] += 1
            old_entry = candidates[min(n, len(candidates) - 1)]
        new = _response(live_snap, e)
        old = _response(frozen_snap, old_entry) if old_entry else None
        change: Change = classify(old, new, not_found=nf.get(urlsplit(e.url).netloc, []))
        if kind == "document":
            last_doc = e.url
            location = new.header("location") if new.status in (301, 302, 303, 307, 308) else None
            if location:
                redirects[e.url] = urljoin(e.url, location)
        referer = _header(req, "referer")
        page = e.url if kind == "document" else (referer if referer and _is_doc(resources, referer) else last_doc)
        resources.append(ResourceDiff(
            url=e.url, method=e.method, kind=kind, status=change.status, status_then=old.status if old else None,
            status_now=new.status, detail=change.detail, removed=change.removed, added=change.added,
            fields=change.fields, volatile_only=change.volatile_only, frozen_url=old_entry.url if old_entry else None,
            page=page, captured_at=_captured(e)))
    captured = {(e.method, e.url) for e in live_snap.entries()}
    resources += _unreachable(live_snap.manifest.upstream_failures, captured, exact, canon, rules)
    final = final_url if final_url and _is_doc(resources, final_url) else last_doc
    for r in resources:
        if r.kind == "document" and r.url in redirects:
            r.page = _landing(r.url, redirects)
    for r in resources:
        r.final_page = final is not None and r.page == final
    m = live_snap.manifest
    return PairDiff(task_id=task_id or m.task_id, run_id=run_id, live_snapshot=str(live_snap.path),
                    live_snapshot_id=m.snapshot_id, frozen_snapshot=str(frozen_snap.path),
                    frozen_snapshot_id=frozen_snap.manifest.snapshot_id, live_at=m.created_at,
                    diffed_at=datetime.now(UTC), final_url=final, status=pair_status([r.status for r in resources]),
                    resources=resources)


def _unreachable(failures: list[UpstreamFailure], captured: set[tuple[str, str]],
                 exact: dict[tuple[str, str, str], list[CdxjEntry]], canon: dict[str, list[CdxjEntry]],
                 rules: object) -> list[ResourceDiff]:
    """The snapshot's documents, XHRs and images that the live run asked for and could not reach."""
    from ..replay.canonical import match_key

    out: list[ResourceDiff] = []
    seen: set[tuple[str, str]] = set()
    for f in failures:
        key = (f.method, f.url)
        if key in seen or key in captured:  # reached on another try: no evidence the site was down
            continue
        seen.add(key)
        candidates = (exact.get((f.method, f.url, ""))
                      or canon.get(match_key(f.method, f.url, None, None, rules)) or [])  # type: ignore[arg-type]
        kind = _kind(candidates[0], None) if candidates else None
        if kind is None:
            continue
        old = candidates[0]
        out.append(ResourceDiff(url=f.url, method=f.method, kind=kind, status="unreachable", status_then=old.status,
                                detail=f"could not be reached: {f.error}"[:300], frozen_url=old.url,
                                page=f.url if kind == "document" else None, captured_at=f.at))
    return out


def _landing(url: str, redirects: dict[str, str]) -> str:
    """Where a chain of redirects from ``url`` ends (at most 20 hops)."""
    for _ in range(20):
        if url not in redirects:
            break
        url = redirects[url]
    return url


def _is_doc(resources: list[ResourceDiff], url: str) -> bool:
    return any(r.kind == "document" and r.url == url for r in resources)


def dumps(diff: PairDiff) -> str:
    """The diff as compact JSON (what the database keeps)."""
    return json.dumps(diff.model_dump(mode="json"), separators=(",", ":"))
