"""Compression Dictionary Transport (RFC 9842) in Chromium, recorded and replayed.

An HTTPS origin serves a script marked ``Use-As-Dictionary`` and, to a request whose
``Available-Dictionary`` names it, the next version of that script as ``dcz`` (Zstandard against the
first version as raw content). Chromium loads the page through the recorder: it keeps the dictionary,
names it, and runs the ``dcz`` script. Replayed with the origin stopped, a fresh context does the
same (the dictionary answer is replayed with its header, so the browser keeps it again). A second
page that loads only the new version, in a fresh context holding no dictionary, must not be handed
the ``dcz`` body it cannot decode: it is a counted miss, and the episode is not complete.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import ssl
import threading

from test_replay_conditional import _dcz as dcz_body

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.tasks import Task
from ego2web_replay.testing.tls import make_test_ca

V1 = b"document.documentElement.dataset.v1 = '1'; // the first version, kept as a dictionary\n" * 30
V2 = V1.replace(b"dataset.v1 = '1'", b"dataset.v2 = '2'").replace(b"the first", b"the second")
HELD = ":" + base64.b64encode(hashlib.sha256(V1).digest()).decode() + ":"
INDEX = b"""<!doctype html><title>dictionaries</title><script src="/static/app.v1.js"></script>
<script>window.addEventListener('load', () => setTimeout(() => {
  const s = document.createElement('script'); s.src = '/static/app.v2.js';
  s.onload = s.onerror = () => { document.documentElement.dataset.done = '1'; };
  document.head.appendChild(s);
}, 500));</script><body>index</body>"""
SECOND = b"""<!doctype html><title>second</title><script src="/static/app.v2.js"
  onload="document.documentElement.dataset.done='1'" onerror="document.documentElement.dataset.done='1'"></script><body>second</body>"""


class _Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answered: list[tuple[str, str]] = []  # (path, how): what the origin sent, in order

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        head: list[tuple[str, str]] = []
        how = "plain"
        if self.path in ("/", "/second.html"):
            body, ctype = (INDEX if self.path == "/" else SECOND), "text/html"
        elif self.path == "/static/app.v1.js":
            body, ctype = V1, "application/javascript"
            head = [("Use-As-Dictionary", 'match="/static/app.*.js"'), ("Cache-Control", "max-age=3600")]
        elif self.path == "/static/app.v2.js":
            ctype = "application/javascript"
            head = [("Vary", "Accept-Encoding, Available-Dictionary"), ("Cache-Control", "max-age=3600")]
            if "dcz" in self.headers.get("Accept-Encoding", "") and self.headers.get("Available-Dictionary") == HELD:
                body, how = dcz_body(V2, V1), "dcz"
                head.append(("Content-Encoding", "dcz"))
            else:
                body = V2
        else:
            self.send_error(404)
            return
        self.answered.append((self.path, how))
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in head:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _load(ctx, url: str) -> dict[str, str]:
    page = ctx.new_page()
    page.goto(url)
    page.wait_for_selector("html[data-done='1']", state="attached", timeout=20_000)
    got = page.evaluate("() => Object.assign({}, document.documentElement.dataset)")
    got.pop("done")
    page.close()
    return got


def test_a_dictionary_compressed_script_records_and_replays_in_chromium(chromium, ca, tmp_path):
    tls = make_test_ca(tmp_path / "ca")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    server.daemon_threads = True
    ctx_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx_tls.load_cert_chain(tls.server_cert, tls.server_key)
    server.socket = ctx_tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"https://127.0.0.1:{server.server_address[1]}"
    _Origin.answered = []
    try:
        task = Task(id="dictionaries", instruction="x", start_url=base + "/")
        with LiveRecording(task, tmp_path / "snaps", RecordOptions(guard="loopback", upstream_ca=tls.ca_cert),
                           ca=ca) as live:
            ctx = chromium.new_context(proxy_url=live.proxy_url)
            recorded = _load(ctx, base + "/")
            second = _load(ctx, base + "/second.html")  # the dictionary still held: dcz again
            ctx.close()
        assert live.ok, live.error
    finally:
        server.shutdown()
        server.server_close()
    assert ("/static/app.v2.js", "dcz") in _Origin.answered, _Origin.answered  # Chromium named its dictionary
    assert recorded == {"v1": "1", "v2": "2"} and second.get("v2") == "2"
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url)
        assert _load(ctx, base + "/") == {"v1": "1", "v2": "2"}  # the dictionary kept again, dcz decoded
        ctx.close()
        first = replay.stats()
        assert first.miss == 0, first.missed_urls
        fresh = chromium.new_context(proxy_url=replay.proxy_url)  # holds no dictionary
        assert "v2" not in _load(fresh, base + "/second.html")
        fresh.close()
    stats = replay.stats()
    assert f"GET {base}/static/app.v2.js" in stats.missed_urls  # counted, never a dcz body it cannot decode
    assert stats.validity != "complete"
