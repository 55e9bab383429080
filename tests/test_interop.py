"""Interoperability through the real ``ego2web-replay serve``: every corpus WARC/WACZ replays byte for byte.

Each corpus file is imported (several files into one snapshot where revisits
need originals from another file), the snapshots are served by real ``serve``
subprocesses (a few, each serving many snapshots, with ``--no-freeze`` but one), and
every indexed response/revisit/resource reachable over HTTP(S) is requested
through the proxy in the order the replay index keeps them, so the
``sequence`` policy hands each request its own capture even where several
snapshots hold the same URL. The body must equal the archived payload
(``Snapshot.resolve(entry).payload``: de-chunked, content-encoding kept) and the
status the archived one.

Deliberately broken corpus records and what serve does with them:

* ``pywb/example-extra.warc``: the ``GETX`` capture's response starts with
  ``HTTPX/1.1 200 OK``; it has no HTTP head we can parse, so it is answered
  with 502 (``X-Ego2Web-Replay: error``) and counted as a miss. Its two
  revisits resolve to the plain GET capture (same method), which is served.
* ``cdxj-indexer/missing-http.warc.gz``: a response record with an empty
  block (no HTTP head, no payload): 502 as well.
* ``warcio/example-digest.warc``: request records only, nothing to serve;
  importing it yields an empty snapshot, and ``serve`` refuses it with a
  one-line error (checked in tests/test_serve.py).
* ``metadata://`` and ``urn:`` resource records (wget and wpull logs) have no
  URL a client can ask a proxy for; they are indexed but not requested.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ego2web_replay.models import ReplayStats
from ego2web_replay.replay.httputil import decode_body
from ego2web_replay.snapshots import Snapshot, import_warc, iter_records

pytestmark = pytest.mark.slow

CORPUS = Path("/work/shared/corpus/warc")
EXE = Path(sys.executable).with_name("ego2web-replay")
FREEZE = re.compile(rb"<script>\s*// ego2web-replay determinism freeze.*?</script>", re.S)
STATS_LINE = re.compile(r"replay stats: (\d+) requests: exact (\d+), canonical (\d+), fuzzy (\d+), miss (\d+)")

# One snapshot per group; files grouped where revisits need originals from another file.
GROUPS: dict[str, list[str]] = {
    "iana-dupes": ["pywb/iana.warc.gz", "pywb/dupes.warc.gz"],
    "agnostic": ["pywb/example-url-agnostic-orig.warc.gz", "pywb/example-url-agnostic-revisit.warc.gz"],
    "derived-zst": ["derived/derived_iana.warc.zst"],
    "derived-dict-zst": ["derived/derived_iana.dict.warc.zst"],
    "pywb-example": ["pywb/example.warc.gz"],
    "warcprox": ["pywb/example2.warc.gz"],
    "wget": ["pywb/example-wget-1-14.warc.gz"],
    "wpull": ["pywb/example-wpull.warc.gz"],
    "httpbin-resource": ["pywb/httpbin-resource.warc.gz"],
    "extra": ["pywb/example-extra.warc"],
    "missing-status-text": ["pywb/missing-status-text.warc"],
    "post": ["pywb/post-test.warc.gz"],
    "pywb-wacz": ["pywb/valid_example_1.wacz"],
    "chunked": ["warcio/example-iana.org-chunked.warc"],
    "webrecorder": ["warcio/example.warc.gz"],
    "webrecorder-resource": ["warcio/example-resource.warc.gz"],
    "collection": ["py-wacz/example-collection-with-lists.warc"],
    "wacz-2": ["py-wacz/valid_example_2.wacz"],
    "wacz-signed": ["py-wacz/valid_signed_example_1.wacz"],
    "cc": ["cdxj-indexer/cc.warc.gz"],
    "missing-http": ["cdxj-indexer/missing-http.warc.gz"],
    "post-more": ["cdxj-indexer/post-test-more.warc"],
    "gowarc": ["gowarc/test.warc.gz"],
    "jwarc-cc": ["jwarc/cc.warc.gz"],
}
# Only request records: nothing to serve (see the module docstring).
NOTHING_TO_SERVE = {"warcio/example-digest.warc"}
# Served with the determinism script; the others with --no-freeze.
FREEZE_GROUP = "webrecorder"


def cli_env(data_home: Path) -> dict[str, str]:
    """Environment for a CLI subprocess: the test data home (its CA) and this checkout's package."""
    here = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([here, os.environ["PYTHONPATH"]]) if os.environ.get("PYTHONPATH") else here
    return {**os.environ, "EGO2WEB_REPLAY_HOME": str(data_home), "PYTHONPATH": path}


@dataclass
class Expected:
    """One request to send and what must come back."""

    method: str
    url: str
    body: bytes | None
    content_type: str | None
    status: int
    payload: bytes | None  # None: a 502 error body (unservable record)
    html: bool = False
    encoding: str | None = None


@dataclass
class Server:
    """One ``serve`` subprocess and the requests it must answer."""

    snapshots: list[Snapshot]
    freeze: bool
    port: int = 0
    proc: subprocess.Popen | None = None
    stats_file: Path | None = None
    requests: list[Expected] = field(default_factory=list)
    output: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request_bodies(snap: Snapshot) -> dict[str, tuple[bytes, str | None]]:
    """Request records by the id of the response they are concurrent to: body and content type."""
    out: dict[str, tuple[bytes, str | None]] = {}
    for record in iter_records(snap.archive_path):
        if record.rec_type == "request":
            for target in record.concurrent_to:
                out[target] = (record.payload, record.http_header("Content-Type"))
    return out


def _expectations(snap: Snapshot) -> list[Expected]:
    """Every requestable capture of ``snap``, in the order the replay index keeps them."""
    bodies = _request_bodies(snap)
    entries = [e for e in snap.entries() if e.record_type in ("response", "revisit", "resource")]
    entries.sort(key=lambda e: (e.timestamp, e.offset))
    out = []
    for entry in entries:
        if urlsplit(entry.url).scheme not in ("http", "https"):
            continue
        resolved = snap.resolve(entry)
        own = snap.record(entry)
        body, ctype = bodies.get(own.record_id or "", (b"", None))
        method = (entry.method or "GET").upper()
        if method in ("GET", "HEAD"):
            body, ctype = None, None
        if resolved.http_status is None and entry.record_type != "resource":
            out.append(Expected(method, entry.url, body, ctype, 502, None))
            continue
        status = resolved.http_status or 200
        ctype_resp = (resolved.http_header("Content-Type") if resolved.http_headers else resolved.content_type) or ""
        out.append(Expected(method, entry.url, body, ctype, status, resolved.payload,
                            html="html" in ctype_resp.lower(), encoding=resolved.http_header("Content-Encoding")))
    return out


def _sent_url(url: str) -> str:
    """The URL as a proxy sees it: no userinfo, an empty path sent as '/'."""
    p = urlsplit(url)
    netloc = (p.hostname or "") + (f":{p.port}" if p.port else "")
    return f"{p.scheme}://{netloc}{p.path or '/'}" + (f"?{p.query}" if p.query else "")


def _conflict(a: Snapshot, b: Snapshot) -> bool:
    """Whether a request for one of ``a``'s captures would match one of ``b``'s exactly instead."""
    sent = {(e.method, _sent_url(e.url)) for e in a.entries() if _sent_url(e.url) != e.url}
    return bool(sent & {(e.method, e.url) for e in b.entries()})


def _fetch(port: int, ca_file: Path, exp: Expected) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(exp.url)
    host = parts.hostname or ""
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Content-Type": exp.content_type} if exp.content_type else {}
    headers["Accept-Encoding"] = "gzip, deflate, br, zstd"  # a browser's: each body as archived, coded or not
    if parts.scheme == "https":
        ctx = ssl.create_default_context(cafile=str(ca_file))
        conn: http.client.HTTPConnection = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=20)
        conn.set_tunnel(host, parts.port or 443)
        target = path
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        netloc = host + (f":{parts.port}" if parts.port else "")
        target = f"http://{netloc}{path}"
        headers["Host"] = netloc
    try:
        conn.request(exp.method, target, body=exp.body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


# A shell without job control starts background commands with SIGINT ignored (`nohup cmd &`, as CI
# may), and a child inherits that: serve would then sit out its --duration instead of stopping on the
# Ctrl-C this test sends. The serve processes are exec'd with SIGINT at its default, as in a terminal.
_SIGINT_DEFAULT = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.argv[1], sys.argv[1:])"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory, data_home, ca):
    """Import every corpus group, start the serve processes, send every request, stop them with SIGINT."""
    root = tmp_path_factory.mktemp("interop")
    grouped = {f for files in GROUPS.values() for f in files}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*")
               if p.is_file() and (".warc" in p.name or p.suffix == ".wacz")}
    assert on_disk == grouped | NOTHING_TO_SERVE, "every corpus file must be in a group"
    snaps = {name: import_warc([CORPUS / f for f in files], name, root / "snapshots", snapshot_id="s")
             for name, files in GROUPS.items()}
    # as few serve processes as possible: the freeze group alone; the others packed so that no
    # request for a capture whose URL a client cannot send as is ("http://example.com", userinfo)
    # lands on another snapshot's exact capture of the URL it is sent as
    servers = [Server([snaps[FREEZE_GROUP]], freeze=True)]
    for name, snap in snaps.items():
        if name == FREEZE_GROUP:
            continue
        for server in servers[1:]:
            if not any(_conflict(snap, other) or _conflict(other, snap) for other in server.snapshots):
                server.snapshots.append(snap)
                break
        else:
            servers.append(Server([snap], freeze=False))
    env = cli_env(data_home)
    for n, server in enumerate(servers):
        server.port = _free_port()
        server.stats_file = root / f"stats-{n}.json"
        for snap in server.snapshots:
            server.requests += _expectations(snap)
        cmd = [*_SIGINT_DEFAULT, str(EXE), "serve", *[str(s.path) for s in server.snapshots], "--port", str(server.port),
               "--duration", "900", "--stats", str(server.stats_file)] + ([] if server.freeze else ["--no-freeze"])
        server.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for server in servers:
            assert server.proc is not None and server.proc.stdout is not None
            lines = []
            for line in server.proc.stdout:
                lines.append(line)
                server.output += line
                if line.startswith("replay proxy"):
                    assert f"127.0.0.1:{server.port}" in line
                    break
            else:
                pytest.fail(f"serve did not start: {''.join(lines)}")
        results = {}
        for server in servers:
            results[id(server)] = [_fetch(server.port, ca.cert_path, exp) for exp in server.requests]
    finally:
        for server in servers:  # Ctrl-C, and SIGTERM for the freeze process: both print the stats
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM if server.freeze else signal.SIGINT)
        for server in servers:
            assert server.proc is not None
            assert server.proc.stdout is not None
            try:  # its few lines of stats fit the pipe: it ends without being read
                server.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # --duration is far off: the signal did not stop it
                server.proc.kill()
                pytest.fail(f"serve did not stop within 60 s of its {'SIGTERM' if server.freeze else 'SIGINT'}")
            finally:
                server.output += server.proc.stdout.read()  # what the startup loop left buffered, then the rest
    return [(server, results[id(server)]) for server in servers]


def test_every_group_is_served(servers):
    assert sum(len(s.snapshots) for s, _ in servers) == len(GROUPS)
    assert len(servers) <= 4, len(servers)
    assert any(s.freeze and any(e.html for e in s.requests) for s, _ in servers)
    assert sum(len(s.requests) for s, _ in servers) > 500


def test_every_capture_replays_byte_for_byte(servers):
    for server, results in servers:
        for exp, (status, headers, body) in zip(server.requests, results, strict=True):
            where = f"{exp.method} {exp.url}"
            assert status == exp.status, where
            if exp.payload is None:
                assert headers["x-ego2web-replay"] == "error", where
                continue
            assert "x-ego2web-replay" not in headers, where  # a hit is served as archived, no header added
            if server.freeze and exp.html and status == 200 and exp.method == "GET":
                # the script is inlined into the decoded page, served identity-encoded
                assert FREEZE.search(body) and "content-encoding" not in headers, where
                assert FREEZE.sub(b"", body) == decode_body(exp.payload, exp.encoding), where
                continue
            assert body == exp.payload, where
            if "transfer-encoding" in headers:  # archived chunked: served chunked, gaining no Content-Length
                assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers, where
            elif exp.method != "HEAD" and status not in (204, 304):
                assert int(headers["content-length"]) == len(body) or server.freeze, where


def _find(servers, url_part: str, method: str = "GET"):
    for server, results in servers:
        for exp, got in zip(server.requests, results, strict=True):
            if url_part in exp.url and exp.method == method:
                yield exp, got


def test_the_hard_cases(servers):
    # chunked capture comes out de-chunked, as the whole HTML page
    ((exp, (status, _, body)),) = [x for x in _find(servers, "http://www.iana.org/")
                                   if x[0].url == "http://www.iana.org/" and b"<!doctype html>" in x[1][2]][:1]
    assert status == 200 and body.rstrip().endswith(b"</html>") and b"\r\n0\r\n" not in body
    # URL-agnostic revisit: served with the original's (other URL's) payload
    ((_, (status, _, body)),) = list(_find(servers, "test@example.com"))
    assert status == 200 and b"Example Domain" in body
    # same-URL revisits resolve: every dupes/iana revisit answered 200-ish from its original
    iana = [x for x in _find(servers, "www.iana.org/_css/2013.1/fonts/OpenSans-Bold.ttf")]
    assert len(iana) >= 2 and len({got[2] for _, got in iana}) == 1 and len(iana[0][1][2]) > 10000
    # POST captures: the same bodies (form, multipart, JSON, no content type) get their own responses
    posts = list(_find(servers, "httpbin.org/post", "POST"))
    assert len(posts) == 6 and all(got[0] == 200 for _, got in posts)
    assert len({got[2] for _, got in posts}) == 6
    assert any(b'"A": "1"' in got[2] or b'"A":"1"' in got[2] for _, got in posts)
    # missing status text: the 302 and its Location come back
    ((_, (status, headers, _)),) = list(_find(servers, "iana.org/bads"))
    assert status == 302 and headers["location"] == "http://www.iana.org/badst"
    # the odd method GETX is matched as its own capture; its HTTPX response is unservable (502)
    ((_, (status, headers, _)),) = list(_find(servers, "example.com?example=2", "GETX"))
    assert status == 502 and headers["x-ego2web-replay"] == "error"
    # a content-encoded HTTPS capture keeps its encoding
    ((_, (status, headers, body)),) = list(_find(servers, "apis.google.com/js/platform.js"))
    assert status == 200 and headers["content-encoding"] == "gzip" and body[:2] == b"\x1f\x8b"


def test_freeze_clock_is_the_capture_time_not_the_import_time(servers):
    (server,) = [s for s, _ in servers if s.freeze]
    # warcio/example.warc.gz was captured on 2017-03-06; its snapshot was imported today
    assert "capture time   2017-03-06 " in server.output and "(page clocks are frozen here)" in server.output
    for other, _ in servers:
        first = min(e.timestamp for e in other.snapshots[0].entries())
        assert f"capture time   {first[:4]}-{first[4:6]}-{first[6:8]} {first[8:10]}:" in other.output


def test_printed_and_written_stats(servers):
    for server, _ in servers:
        assert server.proc is not None and server.proc.returncode == 0, server.output
        assert "Traceback" not in server.output
        m = STATS_LINE.search(server.output)
        assert m, server.output
        total, exact, canonical, fuzzy, miss = map(int, m.groups())
        errors = sum(1 for exp in server.requests if exp.payload is None)
        assert total == len(server.requests) and miss == errors
        assert exact + canonical == total - errors and fuzzy == 0 and exact > canonical
        assert server.stats_file is not None
        stats = ReplayStats.model_validate_json(server.stats_file.read_text())
        assert (stats.total, stats.exact, stats.canonical, stats.miss) == (total, exact, canonical, miss)
        assert stats.live == 0 and len(stats.log) == total and f"stats written to {server.stats_file}" in server.output
        assert [(e.method, e.status) for e in stats.log] == [(x.method, x.status) for x in server.requests]
        assert len(stats.missed_urls) == errors
        assert sorted(stats.snapshots) == sorted(str(s.path) for s in server.snapshots)


def test_example_extra_revisits_resolve_to_the_get_capture(tmp_path):
    snap = import_warc(CORPUS / "pywb/example-extra.warc", "x", tmp_path)
    for entry in snap.entries():
        if entry.record_type == "revisit":
            original = snap.find_original(entry)
            assert original is not None and original.method == "GET"
