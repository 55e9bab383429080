"""Answers a site chose by request fields (``Vary``: Accept, Accept-Language, Cookie) are replayed for the
request fields they were recorded for.

A real origin on 127.0.0.1 answers ``/data`` as HTML or JSON by ``Accept``, ``/account`` as a redirect to the
login page or the account by whether a session cookie is sent, ``/lang`` by ``Accept-Language``; the
recording proxy archives each variant with its request, the origin stops, and the replay serves each
request the capture recorded for fields like its own (a session cookie's value may differ: being logged in
is which cookies there are). A request no recorded variant was made for gets the one picked, logged
``vary: <fields>`` and counted ``variant``: another variant of the page, as a fuzzy answer is, so the
episode is not complete. On both replay engines.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.httputil import vary_differs, vary_names
from ego2web_replay.replay.session import Replay
from ego2web_replay.tasks import Task


class _Origin(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/data":
            json = "json" in (self.headers.get("Accept") or "")
            self._send(200, b'{"kcal": 120}' if json else b"<p>120 kcal</p>",
                       "application/json" if json else "text/html", "Accept")
        elif self.path == "/account":
            if "session=" in (self.headers.get("Cookie") or ""):
                self._send(200, b"balance: 42", "text/plain", "Cookie")
            else:
                self._send(302, b"", "text/plain", "Cookie", [("Location", "/login")])
        elif self.path == "/lang":
            german = (self.headers.get("Accept-Language") or "").startswith("de")
            self._send(200, b"Hallo Welt" if german else b"Hello world", "text/plain", "Accept-Language")
        else:
            self._send(404, b"no", "text/plain", None)

    def _send(self, status: int, body: bytes, ctype: str, vary: str | None,
              extra: list[tuple[str, str]] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if vary:
            self.send_header("Vary", f"{vary}, Accept-Encoding")
        for k, v in extra or []:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        return None


def _get(proxy: str, url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}), _NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


HTML, JSON = {"Accept": "text/html"}, {"Accept": "application/json"}


@pytest.fixture(scope="module")
def recorded(ca, tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    task = Task(id="vary", instruction="x", start_url=base + "/data")
    with LiveRecording(task, tmp_path_factory.mktemp("vary"), RecordOptions(guard="loopback"), ca=ca) as live:
        live_answers = [_get(live.proxy_url, base + "/data", HTML), _get(live.proxy_url, base + "/data", JSON),
                        _get(live.proxy_url, base + "/account", {}),
                        _get(live.proxy_url, base + "/account", {"Cookie": "session=abc; theme=dark"}),
                        _get(live.proxy_url, base + "/lang", {"Accept-Language": "de-DE"})]
    server.shutdown()
    server.server_close()
    assert live.ok, live.error
    assert live_answers == [(200, b"<p>120 kcal</p>"), (200, b'{"kcal": 120}'), (302, b""), (200, b"balance: 42"),
                            (200, b"Hallo Welt")]
    return live.snapshot_path, base


def test_vary_fields_are_read_and_compared_as_a_cache_would():
    head = [("Vary", "Accept, Accept-Encoding"), ("Vary", "cookie, *, Origin")]
    assert vary_names(head) == ("accept", "cookie")
    assert vary_differs(["accept"], [("Accept", "text/html")], [("accept", " TEXT/html ")]) == []
    assert vary_differs(["cookie"], [("Cookie", "session=abc; theme=dark")], [("Cookie", "theme=x;session=zzz")]) == []
    assert vary_differs(["cookie", "accept"], [("Cookie", "session=abc")], [("Accept", "x")]) == ["cookie", "accept"]
    # analytics cookies come and go with the pages' scripts: never what a site chose its answer by
    assert vary_differs(["cookie"], [("Cookie", "session=a")], [("Cookie", "_ga=GA1.1.1.2; session=b; _gid=x")]) == []



CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36"
PIXEL = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 Mobile Safari/537.36"
TAB = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36"
EDGE = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 "
        "Safari/537.36 Edg/{v}.0.0.0")
IPHONE = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
          "Version/17.5 Mobile/15E148 Safari/604.1")
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:{v}.0) Gecko/20100101 Firefox/{v}.0"


@pytest.mark.parametrize(("recorded", "asked", "differs"), [
    (CHROME.format(v=131), CHROME.format(v=141), False),  # next year's Chromium: the same answer
    (FIREFOX.format(v=128), FIREFOX.format(v=140), False),
    (CHROME.format(v=131), CHROME.format(v=131).replace("Chrome/", "HeadlessChrome/"), True),  # bot checks
    (CHROME.format(v=131), PIXEL.format(v=131), True),  # a phone gets the mobile page
    (PIXEL.format(v=131), TAB.format(v=131), True),
    (CHROME.format(v=131), FIREFOX.format(v=131), True),
    (CHROME.format(v=131), EDGE.format(v=131), True),  # and Windows, not Linux
    (IPHONE, IPHONE.replace("17_5", "18_1").replace("17.5", "18.1"), False),
    (CHROME.format(v=131), "curl/8.5.0", True),
    ("curl/8.5.0", "curl/8.11.1", False),
    ("curl/8.5.0", "Wget/1.21.4", True),
    (CHROME.format(v=131), "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", True),
    (PIXEL.format(v=131), PIXEL.format(v=131).replace("Mobile Safari/537.36", "Mobile Safari/537.36 (compatible; "
                                                       "Googlebot/2.1; +http://www.google.com/bot.html)"), True),
    (PIXEL.format(v=131), PIXEL.format(v=141).replace("; K)", "; CUBOT_X30)"), False),  # a phone, no crawler
    (CHROME.format(v=131), CHROME.format(v=131).replace("X11; Linux x86_64", "X11; CrOS x86_64 14541.0.0"), True),
])
def test_a_user_agent_is_compared_by_what_sites_tell_apart_not_its_version(recorded, asked, differs):
    got = vary_differs(["user-agent"], [("User-Agent", recorded)], [("User-Agent", asked)])
    assert got == (["user-agent"] if differs else [])
    assert vary_differs(["user-agent"], [("User-Agent", recorded)], []) == ["user-agent"]


@pytest.mark.parametrize("engine", ["fast", "mitmproxy"])
def test_each_request_gets_the_variant_recorded_for_its_fields(recorded, ca, engine):
    snap, base = recorded
    with Replay([snap], ca=ca, engine=engine) as replay:
        # in another order than recorded: each gets its own variant, never the first recorded
        assert _get(replay.proxy_url, base + "/data", JSON) == (200, b'{"kcal": 120}')
        status, page = _get(replay.proxy_url, base + "/data", HTML)
        assert status == 200 and page.endswith(b"<p>120 kcal</p>")  # (the determinism script inlined before it)
        assert _get(replay.proxy_url, base + "/data", JSON) == (200, b'{"kcal": 120}')
        assert _get(replay.proxy_url, base + "/account", {"Cookie": "session=other; theme=light"}) == \
            (200, b"balance: 42")
        assert _get(replay.proxy_url, base + "/account", {})[0] == 302
        stats = replay.stats()
    assert stats.variant == 0 and stats.validity == "complete"
    assert {e.outcome for e in stats.log} == {"exact"} and not any(e.volatile for e in stats.log)


def test_a_request_no_recorded_variant_was_made_for_is_counted_apart(recorded, ca):
    snap, base = recorded
    with Replay([snap], ca=ca) as replay:
        assert _get(replay.proxy_url, base + "/lang", {"Accept-Language": "de-DE"}) == (200, b"Hallo Welt")
        assert _get(replay.proxy_url, base + "/lang", {"Accept-Language": "en-US"}) == (200, b"Hallo Welt")
        stats = replay.stats()
    assert stats.variant == 1 and stats.validity == "off-snapshot"  # a page's content, another variant of it
    assert [e.volatile for e in stats.log] == [None, "vary: accept-language"]


class _Events(BaseHTTPRequestHandler):
    """Server-sent events: a stream of three events from where the client's ``Last-Event-ID`` says it stopped,
    and a 204 (what tells an EventSource to stop) after the sixth."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        last = int(self.headers.get("Last-Event-ID") or 0)
        if last >= 6:
            self.send_response(204)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # (HTTP/1.0: the stream ends when the connection closes)
        for n in range(last + 1, last + 4):
            self.wfile.write(f"id: {n}\ndata: event {n}\n\n".encode())
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


def test_an_event_stream_resumes_where_the_clients_last_event_id_says(ca, tmp_path):
    """``Last-Event-ID`` chooses a server-sent event stream's answer whether or not the server says ``Vary``:
    a reload (no id) gets the stream from its start, a resume the events after its id, and the 204 that
    ended the events only the client that had them all; an id never recorded is counted ``variant``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Events)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/events"
    sse = {"Accept": "text/event-stream"}
    task = Task(id="sse", instruction="x", start_url=url)
    try:
        with LiveRecording(task, tmp_path, RecordOptions(guard="loopback"), ca=ca) as live:
            recorded = [_get(live.proxy_url, url, {**sse, **({"Last-Event-ID": last} if last else {})})
                        for last in ("", "3", "6")]
    finally:
        server.shutdown()
        server.server_close()
    assert live.ok, live.error
    first = b"id: 1\ndata: event 1\n\nid: 2\ndata: event 2\n\nid: 3\ndata: event 3\n\n"
    assert recorded[0] == (200, first) and recorded[2] == (204, b"")
    with Replay([live.snapshot_path], ca=ca) as replay:
        # in another order than recorded (the sequence alone would give the first ask the first stream)
        assert _get(replay.proxy_url, url, {**sse, "Last-Event-ID": "6"}) == (204, b"")
        assert _get(replay.proxy_url, url, sse) == (200, first)
        assert _get(replay.proxy_url, url, {**sse, "Last-Event-ID": "3"}) == recorded[1]
        clean = replay.stats()
        _get(replay.proxy_url, url, {**sse, "Last-Event-ID": "2"})  # never asked while recording
        stats = replay.stats()
    assert clean.variant == 0 and clean.validity == "complete", [e.volatile for e in clean.log]
    assert stats.variant == 1 and stats.log[-1].volatile == "vary: last-event-id"
