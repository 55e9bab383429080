"""HAR 1.2 in and out: Playwright's ``record_har_path`` and Chrome DevTools' "Save all as HAR".

Import turns each entry into a ``response`` record and its ``request`` record
(``WARC-Concurrent-To``). A HAR holds bodies decoded (``content.text``, or
base64 with ``content.encoding: "base64"``), so the archived response drops
``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length`` and gets a
true length. Bodies left out of a HAR (``content.text`` absent while
``content.size`` says there were bytes) and entries without a response
(``status`` 0 or -1: aborted, blocked), websockets and non-http(s) URLs
(``data:``, ``blob:``) are not archived but counted in the snapshot's notes. ``_file`` (Playwright's ``record_har_content="attach"``) is
read from the HAR's folder. ``_resourceType: "document"`` entries with a 2xx
HTML answer become the snapshot's pages. Credentials are redacted as the
recorder redacts them (``keep_credentials`` turns it off).

Export writes HAR 1.2 with decoded bodies (UTF-8 text, else base64) and
headers that fit them, which ``route_from_har`` replays; each entry's
``_ego2web`` keeps the archived HTTP head and stored payload where they differ,
so importing the export gives back the same captures. Revisits are written as
their original's response (they come back as whole responses).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import iso_date_to_datetime

from .. import __version__
from ..errors import ArchiveError, SnapshotError
from ..limits import InputLimitError, human, max_record_bytes, read_json
from ..redaction import Redactor
from ..web import decode_body, get_header, reason_phrase
from .snapshot import Snapshot, SnapshotWriter

__all__ = ["import_har", "export_har", "looks_like_har"]

_BODY_FRAMING = {"content-encoding", "transfer-encoding", "content-length"}
_NO_BODY = (204, 304)


def looks_like_har(path: Path, head: bytes) -> bool:
    """A ``.har`` file, or a file whose first non-blank byte opens a JSON object."""
    return path.suffix.lower() == ".har" or head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"


class _Bad(Exception):
    pass


def _pairs(value: Any, where: str) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"{where} is not a list")
    out = []
    for h in value:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise _Bad(f"{where} has an item without a name")
        name = h["name"]
        if name.startswith(":"):  # HTTP/2 pseudo-headers: not part of an HTTP/1.1 head
            continue
        out.append((name, str(h.get("value", ""))))
    return out


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(f"{where} is not valid base64") from None


def _body(content: dict[str, Any], folder: Path, where: str) -> bytes | None:
    """The decoded body of a HAR ``content`` object; None when the HAR left it out."""
    text = content.get("text")
    if isinstance(text, str):
        return _b64(text, where) if content.get("encoding") == "base64" else text.encode("utf-8")
    name = content.get("_file")
    if isinstance(name, str) and name and PurePosixPath(name).name == name:
        path = folder / name
        if path.is_file():
            if path.stat().st_size > max_record_bytes():
                raise InputLimitError(f"{path}: over the record limit of {human(max_record_bytes())} "
                                      "(EGO2WEB_MAX_RECORD_BYTES)")
            return path.read_bytes()
    size = content.get("size")
    return b"" if not isinstance(size, int) or size <= 0 else None


def _date(entry: dict[str, Any]) -> datetime | None:
    when = entry.get("startedDateTime")
    if not isinstance(when, str):
        return None
    try:
        return datetime.fromisoformat(when.replace("Z", "+00:00")).astimezone(UTC).replace(tzinfo=None)
    except ValueError:
        try:
            return iso_date_to_datetime(when)
        except (ValueError, IndexError):
            return None


def _fit_length(headers: list[tuple[str, str]], body: bytes, method: str, status: int) -> list[tuple[str, str]]:
    """Headers for a decoded body: no encoding or chunking, a true Content-Length."""
    out = [(k, v) for k, v in headers if k.lower() not in _BODY_FRAMING]
    if method != "HEAD" and status not in _NO_BODY and status >= 200:
        out.append(("Content-Length", str(len(body))))
    return out


def _write_entry(writer: SnapshotWriter, entry: Any, n: int, folder: Path, red: Redactor) -> str:
    """Archive one entry; returns "ok", "no-response" or "no-body"."""
    where = f"entry {n}"
    if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict) \
            or not isinstance(entry.get("response"), dict):
        raise _Bad(f"{where} has no request or response object")
    req, resp = entry["request"], entry["response"]
    url, method = req.get("url"), req.get("method", "GET")
    if not isinstance(url, str) or not url or not isinstance(method, str):
        raise _Bad(f"{where} has no request.url or request.method")
    status = resp.get("status")
    if entry.get("_resourceType") == "websocket" or status == 101 or url.lower().startswith(("ws:", "wss:")):
        return "websocket"
    if not url.lower().startswith(("http://", "https://")):
        return "not-http"  # data:, blob:, chrome-extension: ... (DevTools lists them)
    if not isinstance(status, int) or status < 100:
        return "no-response"
    method = method.upper()
    ours = isinstance(entry.get("_ego2web"), dict)  # our export: heads as archived
    exact = entry["_ego2web"] if ours else {}
    content = resp.get("content") if isinstance(resp.get("content"), dict) else {}
    body = _body(content, folder, f"{where} response.content.text")
    if body is None:
        return "no-body"
    if isinstance(exact.get("payload"), str):
        body = _b64(exact["payload"], f"{where} _ego2web.payload")
    if isinstance(exact.get("headers"), list):
        resp_headers = _pairs(exact["headers"], f"{where} _ego2web.headers")
    elif ours:
        resp_headers = _pairs(resp.get("headers"), f"{where} response.headers")
    else:
        resp_headers = _fit_length(_pairs(resp.get("headers"), f"{where} response.headers"), body, method, status)
    post = req.get("postData") if isinstance(req.get("postData"), dict) else {}
    req_body = b""
    if isinstance(post.get("text"), str):
        req_body = _b64(post["text"], f"{where} postData.text") if post.get("encoding") == "base64" \
            else post["text"].encode("utf-8")
    req_headers = _pairs(req.get("headers"), f"{where} request.headers")
    if not ours:
        req_headers = [(k, v) for k, v in req_headers if k.lower() not in _BODY_FRAMING]
        if req_body:
            req_headers.append(("Content-Length", str(len(req_body))))
    if post.get("mimeType") and get_header(req_headers, "content-type") is None:
        req_headers.append(("Content-Type", str(post["mimeType"])))
    parts = urlsplit(url)
    if get_header(req_headers, "host") is None:
        req_headers.insert(0, ("Host", parts.netloc))
    if red.enabled:
        req_body = red.body(get_header(req_headers, "content-type"), req_body,
                            get_header(req_headers, "content-encoding"))
        url, req_headers, resp_headers = red.url(url), red.header_list(req_headers), red.header_list(resp_headers)
    reason = resp.get("statusText") if isinstance(resp.get("statusText"), str) else ""
    reason = reason or reason_phrase(status, fallback=False) or ""
    when = _date(entry)
    ip = entry.get("serverIPAddress")
    extra = [("WARC-IP-Address", ip.strip("[]"))] if isinstance(ip, str) and ip else []
    out = writer.writer
    http = StatusAndHeaders(f"{status} {reason}".strip(), resp_headers, protocol="HTTP/1.1")
    resp_id = out.write_record("response", url, payload=body, http_headers=http, warc_headers=extra,
                               date=when).record_id
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request_http = StatusAndHeaders(f"{target} HTTP/1.1", req_headers, protocol=method)
    out.write_record("request", url, payload=req_body, http_headers=request_http,
                     warc_headers=[("WARC-Concurrent-To", resp_id)], date=when)
    ctype = (get_header(resp_headers, "content-type") or content.get("mimeType") or "").lower()
    if not ours and entry.get("_resourceType") == "document" and 200 <= status < 300 and "html" in ctype:
        writer.add_page(url)
    return "ok"


def read_har(path: Path) -> dict[str, Any]:
    """The ``log`` of a HAR file, read within the JSON limits; a clear one-line error otherwise."""
    what = f"{path}"
    doc = read_json(path, what, ArchiveError, not_json="{what}: not a HAR file: not valid JSON ({detail})")
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise ArchiveError(f"{path}: not a HAR file: no log.entries list")
    return log


def import_har(path: Path, writer: SnapshotWriter, red: Redactor) -> int:
    """Write every entry of the HAR ``path`` into ``writer``; returns the captures written."""
    log = read_har(path)
    ours = log.get("_ego2web")
    if isinstance(ours, dict):  # our export: start URL and pages as the snapshot had them
        if isinstance(ours.get("start_url"), str) and writer.start_url is None:
            writer.start_url = ours["start_url"]
        writer.pages += [p for p in ours.get("pages") or [] if isinstance(p, str)]
        writer.add_note(f"exported snapshot {ours.get('snapshot', '?')}")
    entries = log["entries"]
    counts = dict.fromkeys(("ok", "no-response", "no-body", "not-http", "websocket"), 0)
    for n, entry in enumerate(entries):
        try:
            counts[_write_entry(writer, entry, n, path.parent, red)] += 1
        except _Bad as e:
            raise ArchiveError(f"{path}: not a valid HAR: {e}; nothing was imported") from None
    skipped = []
    if counts["no-response"]:
        skipped.append(f"{counts['no-response']} without a response (aborted or blocked)")
    if counts["no-body"]:
        skipped.append(f"{counts['no-body']} whose body the HAR left out (record it with content embedded)")
    if counts["not-http"]:
        skipped.append(f"{counts['not-http']} not http(s) (data:, blob: ...)")
    if counts["websocket"]:
        skipped.append(f"{counts['websocket']} websocket (HAR messages are not imported)")
    if skipped:
        writer.add_note(f"{path.name}: entries not archived: {'; '.join(skipped)}")
    return counts["ok"]


# -- export ------------------------------------------------------------------------------------------------

def _har_headers(headers: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in headers]


def _content(body: bytes, mime: str) -> dict[str, Any]:
    try:
        return {"size": len(body), "mimeType": mime, "text": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"size": len(body), "mimeType": mime, "text": base64.b64encode(body).decode("ascii"),
                "encoding": "base64"}


def _iso(date: str | None) -> str:
    if not date:
        return "1970-01-01T00:00:00.000Z"
    when = iso_date_to_datetime(date)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _entries(snap: Snapshot) -> tuple[list[dict[str, Any]], int]:
    """The HAR entries of ``snap`` and how many of its captures are no HTTP response (resources)."""
    requests = {}
    for record in snap.records():
        if record.rec_type == "request":
            for target in record.concurrent_to:
                requests[target] = record
    out, left_out = [], 0
    for e in sorted(snap.entries(), key=lambda e: (e.timestamp, e.offset)):
        if e.record_type not in ("response", "revisit"):
            left_out += 1
            continue
        own = snap.record(e)
        served = snap.resolve(e)
        if served.http_status is None:
            left_out += 1
            continue
        heads = own.http_headers if own.http_headers is not None else served.http_headers or []
        status = own.http_status if own.http_status is not None else served.http_status
        reason = (own.http_reason if own.http_status is not None else served.http_reason) or ""
        stored = served.payload
        body = decode_body(stored, get_header(heads, "content-encoding"))
        if body is None:
            body = stored
        fitted = _fit_length(heads, body, e.method, status) if body is not stored or own.chunked \
            or served.chunked else heads
        req = requests.get(own.record_id or "")
        req_heads = req.http_headers or [] if req is not None else []
        entry: dict[str, Any] = {
            "startedDateTime": _iso(own.date),
            "time": 0,
            "request": {
                "method": e.method, "url": e.url, "httpVersion": "HTTP/1.1", "cookies": [],
                "headers": _har_headers(req_heads), "queryString": [], "headersSize": -1,
                "bodySize": len(req.payload) if req is not None else 0,
            },
            "response": {
                "status": status, "statusText": reason, "httpVersion": "HTTP/1.1", "cookies": [],
                "headers": _har_headers(fitted), "redirectURL": get_header(heads, "location") or "",
                "content": _content(body, get_header(heads, "content-type") or "x-unknown"),
                "headersSize": -1, "bodySize": len(body),
            },
            "cache": {}, "timings": {"send": 0, "wait": 0, "receive": 0},
        }
        if req is not None and req.payload:
            ctype = get_header(req_heads, "content-type") or "application/octet-stream"
            post = _content(req.payload, ctype)
            entry["request"]["postData"] = {"mimeType": ctype, "text": post["text"],
                                            **({"encoding": "base64"} if "encoding" in post else {})}
        if own.ip:
            entry["serverIPAddress"] = own.ip
        exact: dict[str, Any] = {}
        if fitted is not heads:
            exact = {"headers": _har_headers(heads), "payload": base64.b64encode(served.stored_payload).decode("ascii")}
        entry["_ego2web"] = exact
        if e.url in snap.manifest.pages:
            entry["_resourceType"] = "document"
        out.append(entry)
    return out, left_out


def export_har(snap: Snapshot, out: Path) -> tuple[int, int]:
    """Write ``snap`` as HAR 1.2 to ``out`` (atomically); returns the entries written and the captures
    left out (records with no HTTP response: resources, websocket conversations)."""
    m = snap.manifest
    entries, left_out = _entries(snap)
    pages: list[dict[str, Any]] = []
    if m.start_url:
        pages.append({"startedDateTime": entries[0]["startedDateTime"] if entries else _iso(None),
                      "id": "page_0", "title": m.start_url, "pageTimings": {}})
        for entry in entries:
            entry["pageref"] = "page_0"
    doc = {"log": {"version": "1.2", "creator": {"name": "ego2web-replay", "version": __version__},
                   "pages": pages, "entries": entries,
                   "comment": f"ego2web-replay snapshot {m.task_id}/{m.snapshot_id}",
                   "_ego2web": {"snapshot": f"{m.task_id}/{m.snapshot_id}", "start_url": m.start_url,
                                "pages": list(m.pages)}}}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".har", dir=out.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, ensure_ascii=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise SnapshotError(f"{out}: cannot write the export ({e.strerror or e})") from None
    return len(entries), left_out
