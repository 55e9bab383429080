"""A local page whose script sends fresh ids with every load, as analytics and tracing clients do.

``/`` loads a script that fetches ``/api/items?q=hat`` with a GA-style ``cid``,
a ``crypto.randomUUID()`` request id, a random hex ``trace`` and ``Date.now()``,
and POSTs a JSON event with a new ``messageId`` and ``anonymousId`` (UUIDs) and
a ``sentAt`` time; it renders both answers (``#items``, ``#ack``) and sets
``body[data-ready]``. No two loads send the same request, so replay can only
answer them from one recording by setting the fresh ids aside
(:mod:`ego2web_replay.replay.freshids`). ``requests`` lists what the site got.

With ``amplitude_js`` (the browser bundle of the npm package
``@amplitude/analytics-browser``, ``lib/scripts/amplitude-min.js``; see
:func:`npm_file`), ``/amplitude`` loads that real analytics client, pointed at
this site's ``/2/httpapi``, and tracks one event: the client makes up a device
id, an insert id and a session id itself. The page shows the site's answer.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..httpd import LoopbackHTTPServer

__all__ = ["FreshIdSite", "ITEMS", "npm_file"]

ITEMS = {"hat": ["Red hat", "Blue hat"], "shoe": ["Boot"]}

_PAGE = b"""<!doctype html><html><head><title>fresh ids</title></head><body>
<h1>Shop</h1><ul id="items"></ul><p id="ack"></p>
<script>
const hex = n => Array.from(crypto.getRandomValues(new Uint8Array(n)), b => b.toString(16).padStart(2, "0")).join("");
const cid = (100000000 + crypto.getRandomValues(new Uint32Array(1))[0] % 9e8) + "." + Math.floor(Date.now() / 1000);
const q = new URLSearchParams(location.search).get("q") || "hat";
async function main() {
  const url = `/api/items?q=${q}&cid=${cid}&rid=${crypto.randomUUID()}&trace=${hex(16)}&_t=${Date.now()}`;
  const items = await (await fetch(url)).json();
  document.getElementById("items").innerHTML = items.items.map(i => `<li>${i}</li>`).join("");
  const event = {event: "view", page: location.pathname, messageId: crypto.randomUUID(),
                 anonymousId: crypto.randomUUID(), sentAt: Date.now(), context: {span: hex(8)}};
  const ack = await (await fetch("/api/event", {method: "POST", headers: {"Content-Type": "application/json"},
                                                 body: JSON.stringify(event)})).json();
  document.getElementById("ack").textContent = ack.ack;
  document.body.dataset.ready = "1";
}
main();
</script></body></html>"""


_AMPLITUDE_PAGE = b"""<!doctype html><html><head><title>analytics</title>
<script src="/static/amplitude-min.js"></script></head><body><h1>Shop</h1><p id="ack"></p>
<script>
amplitude.init("0123456789abcdef0123456789abcdef", {serverUrl: location.origin + "/2/httpapi",
  flushQueueSize: 1, flushIntervalMillis: 0, autocapture: false, fetchRemoteConfig: false, logLevel: 0});
amplitude.track("viewed hats", {category: "hats"}).promise.then(r => {
  document.getElementById("ack").textContent = r.code + " " + r.message;
  document.body.dataset.ready = "1";
});
</script></body></html>"""


def npm_file(spec: str, member: str, cache: Path) -> bytes | None:
    """``member`` (e.g. ``lib/scripts/amplitude-min.js``) of the npm package ``spec`` (``name@version``),
    read from its tarball in ``cache``, which ``scripts/setup.sh`` fills with ``npm pack`` (tests send
    nothing past loopback, so they never fetch it themselves); None when it is not there."""
    import tarfile

    name, _, version = spec.rpartition("@")
    tarball = cache / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tarball.is_file():
        return None
    with tarfile.open(tarball) as tar:
        found = tar.extractfile("package/" + member)
        return found.read() if found is not None else None


class FreshIdSite(LoopbackHTTPServer):
    """The page above on ``127.0.0.1`` (plain HTTP); ``requests`` holds ``(method, target, body)``."""

    thread_name = "freshid-site"

    def __init__(self, amplitude_js: bytes | None = None) -> None:
        super().__init__()
        self.requests: list[tuple[str, str, bytes]] = []
        self.amplitude_js = amplitude_js

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                site.requests.append(("GET", self.path, b""))
                parts = urlsplit(self.path)
                if parts.path == "/":
                    self._send(200, _PAGE, "text/html; charset=utf-8")
                elif parts.path == "/amplitude" and site.amplitude_js is not None:
                    self._send(200, _AMPLITUDE_PAGE, "text/html; charset=utf-8")
                elif parts.path == "/static/amplitude-min.js" and site.amplitude_js is not None:
                    self._send(200, site.amplitude_js, "text/javascript")
                elif parts.path == "/api/items":
                    q = parse_qs(parts.query).get("q", [""])[0]
                    self._send(200, json.dumps({"items": ITEMS.get(q, [])}).encode(), "application/json")
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                site.requests.append(("POST", self.path, body))
                if urlsplit(self.path).path == "/2/httpapi":  # Amplitude's HTTP API answer
                    count = len(json.loads(body or b"{}").get("events", []))
                    self._send(200, json.dumps({"code": 200, "events_ingested": count, "payload_size_bytes": len(body),
                                                "server_upload_time": 1712345678901}).encode(), "application/json")
                    return
                if urlsplit(self.path).path != "/api/event":
                    self._send(404, b"not found", "text/plain")
                    return
                event = json.loads(body or b"{}").get("event", "")
                self._send(200, json.dumps({"ack": f"{event} recorded"}).encode(), "application/json")

        return Handler
