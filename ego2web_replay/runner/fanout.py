"""Fan-out at record time: fetch the same-site links the snapshot's documents show but it never captured.

A recorded path (the reference actions, then any explorers) captures the pages it opened; every page
it opened links pages it did not. ``record --fanout N`` closes that gap one click deep: for each
recorded task, the HTML documents the snapshot holds (status 200) are read for ``<a href>``,
``<area href>`` and ``<iframe src>`` links and for each GET form's default submission (its fields with
their default values), resolved against the page; a link is a **candidate** when it is http(s), on
the task's site (the task's ``allowed_domains``, else its start URL's host) and not yet held by the
snapshot (replay's canonical "same request"). Up to ``limit`` candidates (new paths first, then new
query strings of held paths, each in page order) are fetched through a fresh recording proxy of the
task (:class:`~ego2web_replay.recorder.session.LiveRecording`: the recording's guard, redaction and
upstream CA apply) as top-level document requests by a plain HTTP client. A redirect is captured as
it is and its on-site target is fetched next, within the same ``limit``, as the browser would follow
it. Then, up to ``assets`` of them, the subresources each fetched page's markup names and the
snapshot does not hold (:mod:`~ego2web_replay.runner.fanout_assets`: stylesheets and what they
import, scripts, images, icons) are fetched with the ``Sec-Fetch-Dest`` a browser sends, from the
task's site and from hosts the snapshot already holds captures of (a CDN the recorded path used),
never another host. What scripts fetch when they run is not known without running them: a miss there
is counted at replay as usual. With ``depth`` > 1 the fetched documents' links are candidates in
turn. The fan-out archive is then merged into the task's snapshot
(:func:`~ego2web_replay.snapshots.extend.extend_snapshot`, a new, newest snapshot); its ``fanout.json``
names the page each fetched link and subresource came from, so the merged snapshot's
``provenance.json`` says ``fanout from <page>`` for each of those captures.

With ``browser=True`` (``record --fanout N --fanout-browser``) the candidates are instead opened in a
sealed Chromium (:class:`~ego2web_replay.browser.BrowserSession`, the recording proxy its only route)
and each is waited on until load and network idle, bounded by ``page_timeout_s``: the documents, their
subresources and what their scripts request on load (fetch/XHR, dynamic imports) are all recorded,
redirects followed as the browser does. The same ``limit``, ``depth`` and site rules apply, and a
request to a host off the fan-out's allowed set (the task's site plus the hosts the snapshot already
holds, :func:`allowed_host`) is aborted in the browser, never recorded nor forwarded, and counted as
refused. Every request made while a candidate was open is attributed to that candidate's page; pages
opened, timed out and failed go into ``fanout.json`` and the result.
"""

from __future__ import annotations

import functools
import http.client
import json
import ssl
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

from ..models import Task
from ..proxy import ProjectCA
from ..recorder.session import LiveRecording, RecordOptions
from ..replay.canonical import entry_key
from ..snapshots.extend import FANOUT, ExtendResult, extend_snapshot
from ..snapshots.snapshot import Snapshot
from ..web import decode_body
from .fanout_assets import ACCEPT, css_assets, page_assets

__all__ = ["FanoutResult", "page_links", "fanout_candidates", "fan_out", "allowed_host"]

DEFAULT_LIMIT = 200
DEFAULT_ASSETS = 1000
_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@dataclass
class FanoutResult:
    """What the fan-out of one task fetched, and the snapshot it was merged into."""

    task_id: str
    candidates: int = 0
    fetched: dict[str, int] = field(default_factory=dict)
    """Fetched URL -> HTTP status."""
    failed: dict[str, str] = field(default_factory=dict)
    """URL -> why no response came (refused by the guard, unreachable, timed out)."""
    left_out: int = 0
    """Candidates past the limit, not fetched."""
    assets: dict[str, int] = field(default_factory=dict)
    """Fetched subresource URL -> HTTP status."""
    assets_failed: dict[str, str] = field(default_factory=dict)
    """Subresource URL -> why no response came."""
    assets_left_out: int = 0
    """Uncaptured subresources past the ``assets`` limit, not fetched."""
    opened: int = 0
    """--fanout-browser: candidate pages opened in Chromium."""
    timed_out: dict[str, str] = field(default_factory=dict)
    """--fanout-browser: page URL -> what did not finish within the page timeout."""
    requests: int = 0
    """--fanout-browser: requests the pages made that went to the recorder."""
    refused: dict[str, str] = field(default_factory=dict)
    """--fanout-browser: request URL -> the page that made it, aborted for its host being off the allowed set."""
    archive: Path | None = None
    extended: ExtendResult | None = None
    error: str | None = None


_TEXT_INPUTS = ("text", "search", "")


class _Links(HTMLParser):
    """Links and GET forms' submissions of one HTML page, in page order: each form's default submission,
    then, per word of ``words``, one with that word typed into each of its text fields."""

    def __init__(self, base: str, words: Sequence[str] = ()) -> None:
        super().__init__(convert_charrefs=True)
        self.base, self.words = base, tuple(words)
        self.links: list[str] = []
        self._form: tuple[str, list[list[str]]] | None = None  # action, [name, value, "text" or ""]
        self._select: list[str] | None = None  # name, chosen value, first value, option text so far
        self._option: str | None = None  # an open <option>'s value attribute ("\0": none, its text is)
        self._option_selected = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "base" and a.get("href"):
            self.base = urljoin(self.base, a["href"])
        elif tag in ("a", "area") and a.get("href"):
            self.links.append(urljoin(self.base, a["href"]))
        elif tag == "iframe" and a.get("src"):
            self.links.append(urljoin(self.base, a["src"]))
        elif tag == "form":
            get = (a.get("method") or "get").lower() == "get"
            self._form = (urljoin(self.base, a.get("action") or self.base), []) if get else None
        elif tag == "option" and self._select is not None:
            self._close_option()
            self._option, self._option_selected = a.get("value", "\0"), "selected" in a
            self._select[3] = ""
        elif self._form is not None and a.get("name") and "disabled" not in a:
            self._field(tag, a)

    def _field(self, tag: str, a: dict[str, str]) -> None:
        assert self._form is not None
        kind = a.get("type", "text").lower()
        if tag == "input" and kind not in ("submit", "button", "image", "reset", "file") and (
                kind not in ("checkbox", "radio") or "checked" in a):
            self._form[1].append([a["name"], a.get("value", "on" if kind in ("checkbox", "radio") else ""),
                                  "text" if kind in _TEXT_INPUTS else ""])
        elif tag == "select":
            self._select = [a["name"], "\0", "\0", ""]
        elif tag == "textarea":
            self._form[1].append([a["name"], "", "text"])

    def handle_data(self, data: str) -> None:
        if self._select is not None and self._option is not None:
            self._select[3] += data

    def _close_option(self) -> None:
        if self._select is None or self._option is None:
            return
        value = self._select[3].strip() if self._option == "\0" else self._option
        if self._select[2] == "\0":
            self._select[2] = value
        if self._option_selected and self._select[1] == "\0":
            self._select[1] = value
        self._option = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "option":
            self._close_option()
        elif tag == "select" and self._select is not None:
            self._close_option()
            name, chosen, first, _ = self._select
            value = chosen if chosen != "\0" else first
            if self._form is not None and value != "\0":  # a select with no option submits nothing
                self._form[1].append([name, value, ""])
            self._select = None
        elif tag == "form" and self._form is not None:
            action, fields = self._form
            parts = urlsplit(action)
            texts = [i for i, f in enumerate(fields) if f[2]]
            for typed in [None, *((i, w) for w in self.words for i in texts)]:
                pairs = [(f[0], typed[1] if typed is not None and typed[0] == i else f[1]) for i, f in enumerate(fields)]
                self.links.append(urlunsplit((*parts[:3], urlencode(pairs), "")))
            self._form = None


def page_links(html: str, url: str, words: Sequence[str] = ()) -> list[str]:
    """The links of an HTML page (absolute, fragments dropped, each once, in page order), GET forms'
    default submissions included (a ``<select>`` with its selected option, else its first), and, per
    word of ``words``, each form submitted with that word in each of its text fields."""
    parser = _Links(url, words)
    try:
        parser.feed(html)
        parser.close()
    except (AssertionError, ValueError):  # markup the parser gives up on: the links found so far
        pass
    return list(dict.fromkeys(link.partition("#")[0] for link in parser.links if link.partition("#")[0]))


def _site(task: Task) -> tuple[str, ...]:
    hosts = tuple(d.lower().lstrip(".") for d in task.allowed_domains if d)
    return hosts or ((urlsplit(task.start_url).hostname or "").lower(),)


def _on_site(url: str, site: Sequence[str]) -> bool:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return parts.scheme in ("http", "https") and any(host == d or host.endswith("." + d) for d in site)


def _documents(snap: Snapshot) -> list[tuple[str, str]]:
    """(URL, HTML text) of the snapshot's 200 HTML documents, revisits resolved, each URL once."""
    out: dict[str, str] = {}
    for entry in snap.entries():
        if entry.method.upper() != "GET" or entry.url in out or entry.record_type not in ("response", "revisit"):
            continue
        if entry.record_type == "response" and ("html" not in (entry.mime or "") or entry.status != 200):
            continue
        try:
            record = snap.resolve(entry)
        except Exception:  # noqa: BLE001 - an unresolvable revisit gives no links
            continue
        headers = {k.lower(): v for k, v in (record.http_headers or [])}
        if record.http_status != 200 or "html" not in headers.get("content-type", ""):
            continue
        body = decode_body(record.payload, headers.get("content-encoding"))
        if body is not None:
            out[entry.url] = body.decode("utf-8", errors="replace")
    return list(out.items())


@functools.cache
def _default_key() -> Callable[[Any], str]:
    return entry_key()


def _key_of(url: str) -> str:
    """Replay's canonical key of a GET of ``url`` (the default rules, as ``fan_out`` merges with)."""
    return _default_key()(SimpleNamespace(method="GET", url=url, request_body_query=None))


def fanout_candidates(snap: Snapshot, task: Task, pages: Sequence[tuple[str, str]] | None = None,
                      held: set[str] | None = None, words: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(link, page it is on) of the same-site links of ``pages`` (default: the snapshot's documents) that
    the snapshot does not hold: new paths first, then new query strings of held paths."""
    key = _default_key()
    held = held if held is not None else {key(e) for e in snap.entries()}
    held_paths = {urlsplit(e.url)._replace(query="", fragment="").geturl() for e in snap.entries()}
    site = _site(task)
    found: dict[str, str] = {}
    for page, html in (pages if pages is not None else _documents(snap)):
        for link in page_links(html, page, words):
            if link in found or not _on_site(link, site):
                continue
            if _key_of(link) not in held:
                found[link] = page
    return sorted(found.items(), key=lambda lp: urlsplit(lp[0])._replace(query="").geturl() in held_paths)


class _Fetcher:
    """GET requests through the recording proxy (absolute-form for http, CONNECT for https), each as a
    browser would send it for its ``Sec-Fetch-Dest``."""

    def __init__(self, proxy_url: str, ca: ProjectCA, timeout_s: float) -> None:
        p = urlsplit(proxy_url)
        self.host, self.port, self.timeout = p.hostname or "127.0.0.1", p.port or 80, timeout_s
        self.tls = ssl.create_default_context(cafile=str(ca.cert_path))

    def get(self, url: str, dest: str = "document", referer: str | None = None) -> tuple[int, str, bytes, str]:
        """Status, content type, body (decoded) and ``Location`` of ``url``."""
        parts = urlsplit(url)
        headers = {"Accept": _ACCEPT if dest == "document" else ACCEPT.get(dest, "*/*"), "Sec-Fetch-Dest": dest,
                   "Sec-Fetch-Mode": "navigate" if dest == "document" else "no-cors",
                   "Accept-Encoding": "gzip, deflate", "User-Agent": "ego2web-replay fanout"}
        if referer:
            headers["Referer"] = referer
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.tls)
            conn.set_tunnel(parts.hostname or "", parts.port or 443)
            target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            target = urlunsplit((*parts[:3], parts.query, ""))
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
            body = response.read()
            return (response.status, response.getheader("Content-Type") or "",
                    decode_body(body, response.getheader("Content-Encoding")) or b"",
                    response.getheader("Location") or "")
        finally:
            conn.close()


def _held_hosts(snap: Snapshot) -> set[str]:
    return {(urlsplit(e.url).hostname or "").lower() for e in snap.entries()}


def allowed_host(url: str, site: Sequence[str], hosts: set[str]) -> bool:
    """Whether the fan-out may request ``url``: http(s) on the task's site or on a host the snapshot holds."""
    return _on_site(url, site) or (urlsplit(url).scheme in ("http", "https")
                                   and (urlsplit(url).hostname or "").lower() in hosts)


def fan_out(task: Task, snapshot: Path, out: Path, opts: RecordOptions, *, ca: ProjectCA, limit: int = DEFAULT_LIMIT,
            depth: int = 1, window: timedelta | None = timedelta(hours=1), timeout_s: float = 20.0,
            root: Path | None = None, words: Sequence[str] = (), assets: int = DEFAULT_ASSETS,
            browser: bool = False, page_timeout_s: float = 15.0) -> FanoutResult:
    """Fetch up to ``limit`` same-site links of ``snapshot``'s documents it does not hold (``depth`` clicks
    deep, redirects followed on the site) and up to ``assets`` of the subresources the fetched pages name,
    through a recording proxy into ``out``, and merge them into a new snapshot beside ``snapshot`` (or
    under ``root``); GET forms are also submitted with each of ``words`` in each text field. ``browser``:
    the candidates are opened in a sealed Chromium instead, each for at most ``page_timeout_s``."""
    result = FanoutResult(task.id)
    snap = Snapshot.open(Path(snapshot))
    key = _default_key()
    held = {key(e) for e in snap.entries()}
    queue = fanout_candidates(snap, task, held=held, words=words)
    result.candidates = len(queue)
    origins: dict[str, str] = {}
    live = LiveRecording(task, out, RecordOptions(**{**vars(opts), "source": "record", "screenshots": False}), ca=ca)
    with live:
        if browser:
            _browse(live, snap, task, queue, held, origins, result, limit=limit, depth=depth, words=words,
                    timeout_s=page_timeout_s)
        else:
            _fetch(live, snap, task, queue, held, origins, result, limit=limit, depth=depth, words=words,
                   assets=assets, timeout_s=timeout_s)
        assert live.writer is not None
        (live.writer.path / FANOUT).write_text(json.dumps(
            {"version": 2, "from": origins, "fetched": result.fetched, "failed": result.failed,
             "assets": result.assets, "assets_failed": result.assets_failed,
             **({"browser": {"opened": result.opened, "timed_out": result.timed_out, "requests": result.requests,
                             "refused": result.refused}} if browser else {}),
             "at": datetime.now(UTC).isoformat()}, indent=2) + "\n", "utf-8")
        live.writer.extra_files.append(FANOUT)
    result.archive = live.snapshot_path
    if not live.ok:
        result.error = live.error
        return result
    if result.fetched or result.assets:
        result.extended = extend_snapshot(snap.path, [live.snapshot_path] if live.snapshot_path else [],
                                          window=window, root=root, request_key=key)
    return result


def _claimed(pending: deque[tuple[str, str]], origins: dict[str, str], held: set[str], limit: int,
             result: FanoutResult) -> Iterator[tuple[str, str]]:
    """Take (link, the page it came from) off ``pending`` (which may grow while this runs) and yield each
    one not already taken (a redirect's target may have been a candidate too) within ``limit``, noted
    as taken; those past the limit are counted as left out."""
    while pending:
        link, page = pending.popleft()
        if link in origins:
            continue
        if len(origins) >= limit:
            result.left_out += 1
            continue
        origins[link] = page
        held.add(_key_of(link))
        yield link, page


def _browse(live: LiveRecording, snap: Snapshot, task: Task, queue: list[tuple[str, str]], held: set[str],
            origins: dict[str, str], result: FanoutResult, *, limit: int, depth: int, words: Sequence[str],
            timeout_s: float) -> None:
    """Open the candidates in a sealed Chromium through the recording proxy, each until load and network
    idle (at most ``timeout_s``); what each page requests is attributed to it, off-list hosts aborted."""
    from ..browser import BrowserSession

    site, hosts = _site(task), _held_hosts(snap)
    with BrowserSession(proxy_url=live.proxy_url, spki=live.ca.spki) as session:
        for level in range(max(1, depth)):
            next_pages: list[tuple[str, str]] = []
            for link, page_from in _claimed(deque(queue), origins, held, limit, result):
                html = _open_page(session, live, link, page_from, site, hosts, origins, held, result, timeout_s)
                if html is not None:
                    next_pages.append((link, html))
            if level + 1 < depth:
                queue = fanout_candidates(snap, task, next_pages, held, words)
                result.candidates += len(queue)


def _open_page(session: Any, live: LiveRecording, link: str, page_from: str, site: Sequence[str], hosts: set[str],
               origins: dict[str, str], held: set[str], result: FanoutResult, timeout_s: float) -> str | None:
    """Open ``link`` in a fresh context; its HTML when it loaded as a 200 document."""
    context = session.new_context()
    seen: list[str] = []

    def route(r: Any) -> None:
        url = r.request.url.partition("#")[0]
        if not allowed_host(url, site, hosts):
            result.refused.setdefault(url, link)
            r.abort("blockedbyclient")
            return
        seen.append(url)
        r.continue_()

    context.route("**/*", route)
    try:
        page = context.new_page()
        result.opened += 1
        try:
            response = page.goto(link, wait_until="load", timeout=timeout_s * 1000)
        except Exception as e:  # noqa: BLE001 - a page that fails or times out is counted
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            (result.timed_out if "Timeout" in type(e).__name__ or "Timeout" in text else result.failed)[link] = text
            response = None
        else:
            try:
                page.wait_for_load_state("networkidle", timeout=timeout_s * 1000)
            except Exception as e:  # noqa: BLE001
                result.timed_out[link] = str(e).splitlines()[0] if str(e) else type(e).__name__
        if response is not None:
            result.fetched[link] = response.status
            live.writer.add_page(link)
        for url in seen:
            if url != link:
                origins.setdefault(url, link)
                held.add(_key_of(url))
        result.requests += len(seen)
        if response is not None and response.status == 200 and "html" in (response.header_value("content-type") or ""):
            try:
                return str(page.content())
            except Exception:  # noqa: BLE001 - navigated away or closed: no links from it
                return None
        return None
    finally:
        context.close()


def _fetch(live: LiveRecording, snap: Snapshot, task: Task, queue: list[tuple[str, str]], held: set[str],
           origins: dict[str, str], result: FanoutResult, *, limit: int, depth: int, words: Sequence[str],
           assets: int, timeout_s: float) -> None:
    """The plain fan-out: the candidates and their markup's subresources fetched by an HTTP client."""
    site = _site(task)
    fetcher = _Fetcher(live.proxy_url, live.ca, timeout_s)
    pages: list[tuple[str, str]] = []
    for level in range(max(1, depth)):
        next_pages: list[tuple[str, str]] = []
        pending = deque(queue)
        for link, page in _claimed(pending, origins, held, limit, result):
            try:
                status, ctype, body, location = fetcher.get(link)
            except (OSError, http.client.HTTPException) as e:
                result.failed[link] = str(e) or type(e).__name__
                continue
            result.fetched[link] = status
            live.writer.add_page(link)
            target = urljoin(link, location).partition("#")[0] if 300 <= status < 400 and location else ""
            if target and _on_site(target, site) and _key_of(target) not in held:
                result.candidates += 1
                pending.appendleft((target, page))  # the browser follows it at once
            if status == 200 and "html" in ctype.lower():
                next_pages.append((link, body.decode("utf-8", errors="replace")))
        pages += next_pages
        if level + 1 < depth:
            queue = fanout_candidates(snap, task, next_pages, held, words)
            result.candidates += len(queue)
    if assets > 0:
        _fetch_assets(fetcher, pages, held, site, _held_hosts(snap), assets, origins, result)


def _fetch_assets(fetcher: _Fetcher, pages: list[tuple[str, str]], held: set[str], site: Sequence[str],
                  hosts: set[str], limit: int, origins: dict[str, str], result: FanoutResult) -> None:
    """Fetch the uncaptured subresources of ``pages`` (stylesheets' own references after them) from the
    task's site or the hosts the snapshot holds, up to ``limit``."""
    pending = deque((url, dest, page) for page, html in pages for url, dest in page_assets(html, page))
    while pending:
        url, dest, page = pending.popleft()
        if not (_on_site(url, site) or (urlsplit(url).hostname or "").lower() in hosts) or _key_of(url) in held:
            continue
        if len(result.assets) + len(result.assets_failed) >= limit:
            result.assets_left_out += 1
            continue
        held.add(_key_of(url))
        origins[url] = page
        try:
            status, ctype, body, _ = fetcher.get(url, dest, referer=page)
        except (OSError, http.client.HTTPException) as e:
            result.assets_failed[url] = str(e) or type(e).__name__
            continue
        result.assets[url] = status
        if dest == "style" and status == 200:
            pending.extend((ref, d, page) for ref, d in css_assets(body.decode("utf-8", errors="replace"), url))
