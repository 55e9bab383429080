"""What the replay answers, whatever carries it: one implementation for both engines.

:class:`Responder` takes a request (method, URL, headers, body) and returns a
:class:`Reply`: the status, reason, the headers as they go on the wire and the
body to send, with its framing decided. The mitmproxy addon (:mod:`.addon`) and
the fast front end (:mod:`.front`) only carry requests in and replies out, so
matching, stats, the replay log, miss marking, the determinism script, credential
redaction and the archived bytes are the same on both.

For each request: match it (:mod:`.matching`), read the archived response
(revisits resolved to their originals), and serve the archived status, reason,
headers and wire body (content-encoding kept; hop-by-hop headers dropped; a
response archived chunked is served chunked), then apply what HTTP asks of a
cache: HEAD, conditional requests (304), CORS preflights; HTML gets the determinism
script inlined (on the served copy only). A ``Range`` request is answered from the
byte map of its URL's captures (:mod:`.ranges`): only recorded bytes, whatever was
served before, else a miss; a request without one never gets a recorded ``206``.
A miss is answered by policy: a synthetic status with ``X-Ego2Web-Replay: miss``
(default 404), or, for diagnosis only, ``live`` (the reply's ``tag`` is ``live``:
the mitmproxy engine forwards it upstream). A websocket handshake is answered from its
archived conversation (:mod:`.websocket`, given ``conversation``); one with none is refused
with a 403 and counted as ``websocket``. A capture of a streamed body carries a ``stream`` on
its reply, its pieces at their recorded pace (:mod:`.stream`); an answer from a truncated
capture (``WARC-Truncated``) is counted (``truncated``).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..guard import blocked_response
from ..models import ReplayLogEntry, ReplayStats
from ..validity import AGAIN, again_note, request_kind
from ..wire.conn import split_authority, split_url
from ..wire.reply import Reply
from .httputil import (
    Offset,
    accepts_coding,
    accepts_every_coding,
    clean_response_headers,
    conditional,
    date_offsets,
    decode_body,
    get_header,
    http_date,
    identity_response,
    miss_response,
    not_modified_response,
    preflight_response,
    reason_phrase,
    rewrite_jsonp,
    shift_dates,
    vary_differs,
    vary_names,
)
from .kept import KeptReplies
from .matching import IndexBase, MatchResult, ReplaySession
from .ranges import Representation, answer_range, build_map
from .stream import ReplayedStream, StreamMeta
from .websocket import answer_websocket

__all__ = ["Responder", "Reply", "REPLAY_HEADER", "MAX_LOG", "framed", "inject_allowed", "merge_stats"]

log = logging.getLogger(__name__)
REPLAY_HEADER = "X-Ego2Web-Replay"
MAX_LOG = 100_000
MAX_MAPS = 4096  # byte maps of ranged URLs kept (offsets only, no bytes)
PACE_MAX_S = 1.0  # past a series, the longest an answer asked again at once waits (see Responder._paced)
SERIES_COMPARED = 16  # a series asked past: its last captures compared, to tell a changing one (see _changing)
CACHE_BYTES = 256 * 1024 * 1024  # archived responses kept in memory once read
JOINED_BYTES = 32 * 1024 * 1024  # kept replies' head and body joined (one copy each), in all
Headers = list[tuple[str, str]]
Head = Sequence[tuple[str, str]]  # headers read, not changed: a list, or a cached (immutable) tuple
Frozen = tuple[tuple[str, str], ...]  # headers as the cache keeps them (see _remember)
Offsets = tuple[Offset | None, ...] | None  # where each header's date goes (httputil.date_offsets)


def _dedupe_header(headers: Headers, name: str) -> Headers:
    """``headers`` with only the first ``name`` header (case-insensitive) kept."""
    seen = False
    out = []
    for k, v in headers:
        if k.lower() == name:
            if seen:
                continue
            seen = True
        out.append((k, v))
    return out


def _set_header(headers: Head, name: str, value: str) -> Headers:
    n = name.lower()
    return [(k, v) for k, v in headers if k.lower() != n] + [(name, value)]


def _set_in_place(headers: Head, name: str, value: str) -> Headers:
    """``name: value`` where the first ``name`` stood (others dropped), else appended."""
    n, out, done = name.lower(), [], False
    for k, v in headers:
        if k.lower() == n:
            if not done:
                out.append((k, value))
                done = True
        else:
            out.append((k, v))
    return out if done else out + [(name, value)]


def framed(status: int, reason: str, headers: Head, body: bytes, method: str, tag: str = "replayed") -> Reply:
    """Decide the framing: chunked as archived, else an exact Content-Length; HEAD sends no body."""
    chunked = "chunked" in (get_header(headers, "transfer-encoding") or "").lower()
    if method == "HEAD":
        return Reply(status, reason, list(headers), b"", chunked, tag)
    if chunked:  # served chunked, as the live page got it
        out = [(k, v) for k, v in headers if k.lower() != "content-length"]
    elif status not in (204, 304) and not 100 <= status < 200:
        out = _set_in_place(headers, "Content-Length", str(len(body)))
    else:
        out = list(headers)
    return Reply(status, reason, out, body, chunked, tag)


def inject_allowed(headers: Sequence[tuple[str, str]]) -> bool:
    """Only HTML documents get the determinism script."""
    ctype = (get_header(headers, "content-type") or "").split(";")[0].strip().lower()
    return ctype in ("text/html", "application/xhtml+xml")


def _rename_jsonp(body: bytes, headers: Head, archived_url: str, request_url: str) -> tuple[bytes, Head]:
    """Serve a JSONP body under the callback name the page asked for now."""
    lowered = request_url.lower()
    if "callback=" not in lowered and "jsonp=" not in lowered and "cb=" not in lowered:
        return body, headers
    encoding = get_header(headers, "content-encoding")
    plain = decode_body(body, encoding) if encoding else body
    if plain is None:
        return body, headers
    renamed = rewrite_jsonp(plain, archived_url, request_url)
    if renamed == plain:
        return body, headers
    kept = [(k, v) for k, v in headers if k.lower() not in ("content-encoding", "content-length")]
    return renamed, kept + [("Content-Length", str(len(renamed)))]


_DCB, _DCZ = b"\xff\x44\x43\x42", b"\x5e\x2a\x4d\x18\x20\x00\x00\x00"  # RFC 9842 4.1, 4.2


def _answers(h: dict[str, str], status: int, headers: Head, body: bytes, url: str) -> bool:
    """Whether a capture picked for a request (a GET or HEAD without a ``Range`` it answers, ``h`` its
    headers by lower-case name) can answer it. Some answers were made for what the recording client
    held, and another client may hold nothing of it (a fresh browser context, the next episode on a
    replay kept open): a ``206`` is a part, not the whole; a ``304`` says "your cached copy is current"
    (RFC 9110 15.4.5), so it answers only validators it matches; a body compressed with a shared
    dictionary (``dcb``, ``dcz``: RFC 9842) decodes only with the dictionary its first bytes name, so
    it answers only a request whose ``Available-Dictionary`` names that one. And an answer whose
    ``Access-Control-Allow-Origin`` names one page answers only a cross-origin request (to ``url``)
    from that page (``Origin``): a page elsewhere (an agent off the recorded path) would have its read
    refused by the browser.
    Served to anyone else, each would leave the page without the resource while the log said it was
    an exact hit."""
    if status == 206:
        return False
    if status == 304:
        return conditional(h, 200, headers)
    origin = h.get("origin")
    if origin is not None:  # a CORS answer names the page it was for: a browser on another page refuses it
        allowed = get_header(headers, "access-control-allow-origin")
        origin = origin.strip()
        if allowed is not None and allowed.strip() not in ("*", origin) and not _same_origin(origin, url):
            return False
    if body[:4] == _DCB or body[:8] == _DCZ:
        coding = (get_header(headers, "content-encoding") or "").strip().lower()
        start = 4 if coding == "dcb" else 8 if coding == "dcz" else 0
        if start and (start == 4) == (body[:4] == _DCB):
            held = h.get("available-dictionary", "").strip()
            named = ":" + base64.b64encode(body[start:start + 32]).decode() + ":"
            return held == named
    return True


def _same_origin(origin: str, url: str) -> bool:
    """Whether a request to ``url`` comes from its own origin (no CORS check in the browser)."""
    scheme, authority, _ = split_url(url)
    scheme = scheme.lower()
    return origin.lower() == f"{scheme}://{split_authority(authority.lower(), scheme)[1]}"


def _varies_on_coding(rep: Representation) -> bool:
    """Whether a version's recorded answers were chosen by the client's Accept-Encoding (``Vary``): then
    a client that does not take its coding would have been sent other bytes."""
    for head in rep.heads:
        vary = ",".join(v for k, v in head[3] if k.lower() == "vary").lower()
        if {v.strip() for v in vary.split(",")} & {"accept-encoding", "*"}:
            return True
    return False


def _chunked_without_length(headers: Sequence[tuple[str, str]]) -> bool:
    """The archived response was sent chunked (no Content-Length): serve it chunked too."""
    te = (get_header(headers, "transfer-encoding") or "").lower()
    return "chunked" in te and get_header(headers, "content-length") is None


def _first_values(headers: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Request headers by lower-case name, first value of each."""
    out: dict[str, str] = {}
    for k, v in headers:
        out.setdefault(k.lower(), v)
    return out


def _cache_key(kind: str, ref: Any) -> tuple[Any, ...]:
    """``(kind, *ref)``: flat, so untracked by the collector even when ``ref`` is a tuple held by a frozen index."""
    return (kind, *ref) if isinstance(ref, tuple) else (kind, ref)


def _second() -> int:
    """The current second, as :meth:`Responder._dated` counts it."""
    return int(datetime.now(UTC).timestamp())


def _plain(status: int, text: str, marker: str, method: str) -> Reply:
    body = text.encode()
    headers = [("Content-Type", "text/plain"), (REPLAY_HEADER, marker), ("Cache-Control", "no-store"),
               ("Content-Length", str(len(body)))]
    return framed(status, reason_phrase(status), headers, body, method)


class Responder:
    """Answers requests from ``index`` (built by :mod:`.session`); keeps the stats and the replay log.

    ``resolve(ref)`` returns ``(status, reason, headers, body)`` of the archived
    response for a capture's ``ref``; ``conversation(ref)`` the websocket conversation of a ``101``
    capture (its messages, and whether it was cut short), or None (no such record; without it
    every handshake is refused).
    ``miss`` is a status code as text or ``live``.
    Thread-safe: the counters, log and cache are guarded by one lock.
    """

    def __init__(self, index: IndexBase, resolve: Any, *, miss: str = "404", freeze_script: str | None = None,
                 policy: str = "sequence", snapshots: Sequence[str] = (), redactor: Any = None,
                 conversation: Any = None, shared: Any = None) -> None:
        self.index = index
        self.shared = shared  # a SharedMatcher (.shared): other tasks' snapshots, asked on an own miss
        self.conversation = conversation  # ref -> a 101 capture's websocket Conversation, or None
        self.redactor = redactor  # the snapshots' credential redaction, applied to requests before matching
        self.session: ReplaySession = index.session(policy)  # type: ignore[arg-type]
        self.resolve = resolve
        self.miss = miss
        self.freeze_script = freeze_script
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}
        self._cached_bytes = 0
        self._stable: dict[int, Any] = {}  # id of a cached head -> its cache entry (keeps it alive)
        self._shifted: dict[int, tuple[Head, int, Frozen, Offsets]] = {}  # head -> (it, second, shifted, offsets)
        self._stamps: tuple[int, dict[timedelta, str]] = (0, {})  # HTTP dates of one second, by offset
        self._counts = ReplayStats(snapshots=list(snapshots))  # counts and missed URLs; the log is kept apart
        self._outcomes: dict[str, int] = {}  # requests logged, by outcome (see _log)
        self._columns: tuple[list[Any], ...] = tuple([] for _ in range(11))  # the replay log, by field (see _log)
        self._maps: dict[tuple[int, ...], tuple[Any, list[Representation]]] = {}  # byte maps, by their captures
        self._streams: dict[Any, StreamMeta] = {}  # captures of streamed bodies, by cache key (replay/stream.py)
        self._asked: dict[Any, Head] = {}  # the recorded request's head of captures chosen by Vary, by cache key
        self._kept = KeptReplies(self, self.session, self._log, _second, max_replies=MAX_MAPS, joined_bytes=JOINED_BYTES)
        self._kinds: dict[tuple[Any, ...], str] = {}  # request_kind of recent requests (see _kind)
        self._answered: dict[int, float] = {}  # past a series: when its last answer went (see _paced)
        self._plays: dict[Any, int] = {}  # connections each websocket conversation was played to (see websocket.py)

    # -- bookkeeping -------------------------------------------------------
    def _log(self, method: str, url: str, outcome: str, status: int | None, matched: str | None = None,
             score: float | None = None, kind: str | None = None, volatile: str | None = None,
             rng: str | None = None, shared: tuple[str, str] | None = None) -> None:
        # The log is kept by field: eleven lists of strings, numbers and None, so a request adds no
        # object the collector tracks (a tuple per entry did: each young collection walked the last
        # few thousand, a third of a millisecond, and log entries as models made every full
        # collection walk the whole log, pauses of 100+ ms under load).
        with self._lock:
            s = self._counts
            counted = self._outcomes  # added to the counts' model when read (a model's setattr is slow)
            counted[outcome] = counted.get(outcome, 0) + 1
            if outcome in ("miss", "live") and len(s.missed_urls) < MAX_LOG:
                s.missed_urls.append(f"{method} {url}" if rng is None else f"{method} {url} (Range: {rng})")
            if shared is not None:
                s.shared_from[shared[0]] = s.shared_from.get(shared[0], 0) + 1
            elif volatile is not None:  # (learned and fresh_id count the own snapshots' canonical answers)
                if volatile.startswith("fresh-id"):
                    s.fresh_id += 1
                elif volatile.startswith("learned"):  # (not a bare "vary:" or "again:" note)
                    s.learned += 1
            if volatile is not None and "vary:" in volatile:  # a variant chosen for other request fields
                s.variant += 1
            if volatile is not None and AGAIN in volatile:  # past a recorded series whose answers changed
                s.again += 1
            (methods, urls, outcomes, statuses, matched_urls, scores, kinds, volatiles, ranges, sources,
             stages) = self._columns
            if len(methods) < MAX_LOG:
                methods.append(method)
                urls.append(url)
                outcomes.append(outcome)
                statuses.append(status)
                matched_urls.append(matched)
                scores.append(score)
                kinds.append(kind)
                volatiles.append(volatile)
                ranges.append(rng)
                sources.append(shared[0] if shared else None)
                stages.append(shared[1] if shared else None)

    def count_blocked(self) -> None:
        """A background request the guard answered (not in the log; counted apart)."""
        with self._lock:
            self._counts.blocked += 1

    def played_again(self, ref: Any) -> int:
        """How many connections a recorded websocket conversation has been played to, this one counted."""
        with self._lock:
            n = self._plays[ref] = self._plays.get(ref, 0) + 1
            return n

    def count_truncated(self, method: str, url: str, why: str) -> None:
        """An answer from a capture the recorder cut short (``WARC-Truncated``): counted, with its URL."""
        with self._lock:
            self._counts.truncated += 1
            if len(self._counts.truncated_urls) < MAX_LOG:
                self._counts.truncated_urls.append(f"{method} {url} ({why})")

    @property
    def stats(self) -> ReplayStats:
        """The counts and the log so far (a copy)."""
        return self.snapshot_stats()

    def snapshot_stats(self) -> ReplayStats:
        """The counts and the log so far, as a new :class:`ReplayStats`."""
        with self._lock:
            stats = self._counts.model_copy(deep=True)
            for outcome, n in self._outcomes.items():
                setattr(stats, outcome, getattr(stats, outcome) + n)
            rows = list(zip(*self._columns, strict=True))
        stats.log = [ReplayLogEntry(method=m, url=u, outcome=o, status=st, matched_url=mu,  # type: ignore[arg-type]
                                    score=sc, kind=k, volatile=v, range=r, shared_from=sf, shared_stage=ss)
                     for m, u, o, st, mu, sc, k, v, r, sf, ss in rows]
        return stats

    # -- answers -------------------------------------------------------------
    def blocked(self, host: str, why: str, method: str) -> Reply:
        """The guard's answer to a host the proxy never contacts (counted as blocked)."""
        self.count_blocked()
        status, headers, body = blocked_response(host, why)
        return framed(status, reason_phrase(status), headers, body, method, tag="blocked")

    def answer(self, method: str, url: str, req_headers: Sequence[tuple[str, str]], body: bytes) -> Reply:
        """The reply to one request (``url`` absolute, as the client meant it)."""
        h = _first_values(req_headers)  # looked up a dozen times below
        headers: Head  # a cached head is a tuple (see _remember); framed() hands on a list
        kind = self._kind(url, h)
        if not method.isupper():  # methods are case-sensitive (RFC 9110 9.1): "get" is no GET, and none was recorded
            return self._missed(method, url, kind, None)
        if (h.get("upgrade") or "").lower() == "websocket":
            reply = answer_websocket(self, method, url, h, kind) if self.conversation is not None else None
            if reply is None:
                self._log(method, url, "websocket", 403, kind=kind)
                return _plain(403, "ego2web-replay: no recorded websocket answers this\n", "websocket-refused",
                              method)
            return reply
        ctype = h.get("content-type")
        if self.redactor is not None:  # the archive holds redacted requests: compare like with like
            url = self.redactor.url(url)
            body = self.redactor.body(ctype, body, h.get("content-encoding"))
        rng = h.get("range") if method in ("GET", "HEAD") else None
        if rng is not None:
            ranged = self._ranged(method, url, h, body, kind, rng)
            if ranged is not None:
                return ranged
        result = self.session.match(method, url, body or None, ctype)
        source: str | None = None
        if result.capture is None and self.shared is not None and rng is None and method != "OPTIONS":
            found = self.shared.match(method, url, body or None, ctype)  # the own snapshots missed it
            if found is not None:
                result, source = found
        if result.capture is None and method == "OPTIONS":
            status, reason, headers, rbody = preflight_response(h)
            self._log(method, url, "canonical", status, matched=None, kind=kind)
            return framed(status, reason, headers, rbody, method)
        if result.capture is None:
            return self._missed(method, url, kind, rng)
        ref = result.capture.ref
        ae = h.get("accept-encoding")
        coded = accepts_every_coding(ae)  # else a coded body may be served decoded (_acceptable)
        plain = source is None and method == "GET" and result.outcome == "exact" and rng is None and not result.series \
            and "if-none-match" not in h and "if-modified-since" not in h and "available-dictionary" not in h \
            and "origin" not in h
        second = _second()
        # a reply kept for a client that takes every coding serves any such client; one kept for another
        # client, only clients with its Accept-Encoding
        kept_key = _cache_key("w" if coded else "w:" + (ae or ""), ref) if plain else ()
        if plain:
            hit = self._kept.hit(method, url, result, kind, kept_key, second)
            if hit is not None:
                return hit
        try:
            status, reason, headers, rbody = self._prepared(ref)
            if not _answers(h, status, headers, rbody, url):  # an answer for another client: see _answers
                ref = self._whole(method, url, body, ctype, ref, h)
                if ref is None:
                    return self._missed(method, url, kind, rng)
                status, reason, headers, rbody = self._prepared(ref)
        except Exception as e:  # noqa: BLE001 - a bad record fails this request only
            return self._unreadable(method, url, kind, result.capture.url, e)
        varied: list[str] = []
        if self._asked and _cache_key("r", ref) in self._asked:  # an answer chosen by request fields (Vary)
            ref, (status, reason, headers, rbody), varied = self._variant(
                method, url, body, ctype, ref, h, req_headers, (status, reason, headers, rbody))
        if conditional(h, status, headers):
            status, reason, headers, rbody = not_modified_response(headers)
        elif self.freeze_script and status == 200 and method in ("GET", "HEAD") and inject_allowed(headers):
            rbody, headers = self._injected(ref, rbody, headers)
        elif status == 200 and result.outcome != "exact" and result.capture.url != url:
            rbody, headers = _rename_jsonp(rbody, headers, result.capture.url, url)
        if not coded and status == 200:
            rbody, headers = self._acceptable(ref, rbody, headers, ae)
        again = None
        if result.series and source is None:  # past its recorded series: a write asked again, or answers that changed
            if len(result.series) == 1:
                again = again_note(1, "a write")
            elif self._changing(result.series, h, req_headers, url):
                again = again_note(len(result.series))
        reply = self._served(method, url, result, status, reason, headers, rbody, kind, rng, ref, source, varied,
                             again)
        if result.series and source is None:
            return self._paced(reply, method, result.series)
        if plain and ref is result.capture.ref and reply.stream is None and not reply.chunked:
            return self._keep_plain(ref, second, reply, url, kind, result, kept_key)
        return reply

    def _paced(self, reply: Reply, method: str, series: Sequence[int]) -> Reply:
        """An answer past a recorded series (its last capture again) asked again sooner than the series' recorded
        rhythm (the mean interval between its captures, at most :data:`PACE_MAX_S`) after the answer before:
        its body waits for the rest of that interval. A page that asks again as soon as it is answered (a
        long-poll: Engine.IO's, a chat's) asks at most once a second, not hundreds of times; a page loaded
        again later waits for nothing."""
        if reply.stream is not None or reply.chunked or method == "HEAD" or not reply.body or len(series) < 2:
            return reply
        from .freeze import parse_warc_timestamp  # (here as freeze's other use is: a rare path)

        try:
            first = parse_warc_timestamp(self.index.capture(series[0]).timestamp).timestamp()
            last = parse_warc_timestamp(self.index.capture(series[-1]).timestamp).timestamp()
        except ValueError:  # (a capture without a 14-digit time: nothing known of its rhythm)
            return reply
        gap = min(max(last - first, 0.0) / (len(series) - 1), PACE_MAX_S)
        now = time.monotonic()
        with self._lock:
            before = self._answered.get(series[-1])
            wait = 0.0 if before is None else max(0.0, before + gap - now)
            if len(self._answered) >= MAX_MAPS:
                self._answered.clear()
            self._answered[series[-1]] = now + wait
        if wait < 0.01:
            return reply
        return reply._replace(stream=ReplayedStream(reply.body, StreamMeta(None, ((0, int(wait * 1000)),))))

    def _changing(self, series: Sequence[int], h: dict[str, str], req_headers: Sequence[tuple[str, str]],
                  url: str) -> bool:
        """Whether the recorded answers of a series (the captures of one key, a page polling it) that could
        answer this request differ in status or body: asked past them, the live site's next answer is then
        not known (the last one is served again, logged and counted ``again``). The last
        :data:`SERIES_COMPARED` are compared, leaving out those recorded for other request fields (``Vary``)
        or for another client (a ``304``, a CORS answer for another page: :func:`_answers`)."""
        answers: set[tuple[int, bytes]] = set()
        try:
            for position in series[-SERIES_COMPARED:]:
                ref = self.index.capture(position).ref
                status, _, headers, body = self._prepared(ref)
                if status == 304:  # "what you hold is current": a revalidation, never a change of answer
                    continue
                asked = self._asked.get(_cache_key("r", ref)) if self._asked else None
                if asked is not None and vary_differs(vary_names(headers, status), asked, req_headers):
                    continue  # the answer to a request with other fields
                if _answers(h, status, headers, body, url):
                    answers.add((status, body))
        except Exception:  # noqa: BLE001 - a capture that cannot be read: the answers are not known to agree
            return True
        return len(answers) > 1

    def _keep_plain(self, ref: Any, second: int, reply: Reply, url: str, kind: str, result: MatchResult,
                    kept_key: tuple[Any, ...]) -> Reply:
        """Keep a plain GET's ``reply`` for the rest of ``second`` (:mod:`.kept`), if its dates were moved to
        that second (not the next) and its capture is an ordinary one: read whole into the cache, not a
        recorded stream, not a recorded 206."""
        key = _cache_key("r", ref)
        if second != _second() or key not in self._cache or (self._streams and key in self._streams) \
                or reply.status == 206 or key in self._asked:  # (one chosen by Vary is checked each time)
            return reply
        return self._kept.keep(kept_key, second, reply, url, kind, result)

    def _kind(self, url: str, h: dict[str, str]) -> str:
        """:func:`~ego2web_replay.validity.request_kind` of the request, remembered for the same URL and
        headers (a page load asks for the same few hundred URLs again and again)."""
        key = (url, h.get("sec-fetch-dest"), h.get("accept"), h.get("sec-fetch-mode"))
        kind = self._kinds.get(key)
        if kind is None:
            if len(self._kinds) >= MAX_MAPS:
                self._kinds.clear()
            kind = self._kinds[key] = request_kind(key[1], key[2], url, key[3])
        return kind

    def _served(self, method: str, url: str, result: MatchResult, status: int, reason: str, headers: Head,
                body: bytes, kind: str, rng: str | None, ref: Any = None, source: str | None = None,
                varied: Sequence[str] = (), again: str | None = None) -> Reply:
        """Log a hit and frame it (dates moved to now; a nearest-capture answer says so); the capture
        ``ref`` of a recorded stream is served at its recorded pace. ``source``: the snapshot of another
        task that answered (logged as ``shared``); ``varied``: the ``Vary`` fields the request differs on
        from the one the answer was recorded for (logged ``vary: ...``, counted ``variant``); ``again``: the
        note of an answer past a changing recorded series (counted ``again``)."""
        assert result.capture is not None
        headers = self._dated(headers)
        if result.outcome == "fuzzy":  # another page's content: say so (diagnosis only); hits gain no header
            headers = _set_header(headers, REPLAY_HEADER, result.outcome)
        volatile = f"{result.via}: {', '.join(result.ignored)}" if result.via else None
        if varied:
            volatile = (f"{volatile}; " if volatile else "") + f"vary: {', '.join(varied)}"
        if again:
            volatile = (f"{volatile}; " if volatile else "") + again
        self._log(method, url, "shared" if source else result.outcome, status, matched=result.capture.url,
                  score=result.score, kind=kind, volatile=volatile, rng=rng,
                  shared=(source, result.outcome) if source else None)
        reply = framed(status, reason, headers, body, method)
        meta = self._streams.get(_cache_key("r", ref)) if self._streams and ref is not None else None
        return reply if meta is None else self._streamed(reply, meta, method, url)

    def _streamed(self, reply: Reply, meta: StreamMeta, method: str, url: str) -> Reply:
        """A capture of a streamed body: served at its recorded pace; one cut short is counted."""
        if meta.truncated is not None:
            self.count_truncated(method, url, meta.truncated)
        if reply.status != 200 or method == "HEAD" or not reply.body or not meta.pieces:
            return reply  # (a truncated record of another recorder, with no timing: served whole, as it was)
        return reply._replace(stream=ReplayedStream(reply.body, meta))

    def _missed(self, method: str, url: str, kind: str, rng: str | None) -> Reply:
        """The miss policy's answer (a synthetic status, or ``live`` for the mitmproxy engine to forward)."""
        if self.miss == "live":
            self._log(method, url, "live", None, kind=kind, rng=rng)
            return Reply(0, "", [], b"", False, "live")
        try:
            code = int(self.miss)
        except ValueError:
            code = 404
        status, reason, headers, rbody = miss_response(url, method, code)
        self._log(method, url, "miss", status, kind=kind, rng=rng)
        return framed(status, reason, headers, rbody, method)

    def _unreadable(self, method: str, url: str, kind: str, matched: str, e: Exception) -> Reply:
        log.error("ego2web-replay: cannot read the capture for %s: %s", url, e)
        self._log(method, url, "miss", 502, matched=matched, kind=kind)
        return _plain(502, f"ego2web-replay: archived record unreadable: {e}\n", "error", method)

    # -- byte ranges (see .ranges) ---------------------------------------------
    def _ranged(self, method: str, url: str, h: dict[str, str], body: bytes, kind: str, rng: str) -> Reply | None:
        """The answer to a ``Range`` request from its URL's byte map; None to answer it as a whole request
        (no capture holds bytes of it, its ``Range`` cannot be read, or ``If-Range`` names another version)."""
        found = self.session.stage_of(method, url, body or None, h.get("content-type"))
        if found is None:
            return None
        stage, _key, positions, text, aside = found
        try:
            first, reps = self._byte_map(positions)
            if not reps:  # a redirect, a 404 ...: not bytes of a body; answered as it was recorded
                return None
            ae = h.get("accept-encoding")
            if not accepts_every_coding(ae):  # bytes of a coding the client cannot decode are not its bytes
                reps = [r for r in reps if not r.coding or accepts_coding(ae, r.coding) or not _varies_on_coding(r)]
                if not reps:
                    return self._missed(method, url, kind, rng)
            got = answer_range(reps, rng, h.get("if-range"), self._prepared)
        except Exception as e:  # noqa: BLE001 - a bad record fails this request only
            return self._unreadable(method, url, kind, self.index.capture(positions[0]).url, e)
        if got.kind == "whole":
            return None
        if got.kind == "miss":
            return self._missed(method, url, kind, rng)
        status, reason, headers, rbody = got.status, got.reason, got.headers, got.body
        if ("if-none-match" in h or "if-modified-since" in h) and got.rep is not None and got.rep.heads \
                and conditional(h, 200, got.rep.heads[0][3]):
            status, reason, headers, rbody = not_modified_response(got.rep.heads[0][3])
        result = self.session.result(stage, text, aside, first)  # learned names, fresh ids: logged as set aside
        return self._served(method, url, result, status, reason, headers, rbody, kind, rng)

    def _byte_map(self, positions: Sequence[int]) -> tuple[Any, list[Representation]]:
        """The first of these captures and their byte map, built on the first ``Range`` request for them
        and kept (offsets, not bytes)."""
        key = tuple(positions)
        hit = self._maps.get(key)
        if hit is None:
            captures = [self.index.capture(p) for p in positions]

            def parts() -> Iterator[tuple[Any, int, Head, bytes]]:
                for c in captures:
                    status, _reason, headers, body = self._prepared(c.ref)
                    yield c.ref, status, headers, body

            hit = (captures[0], build_map(parts(), self._cut_short))
            with self._lock:
                if len(self._maps) >= MAX_MAPS:
                    self._maps.clear()
                self._maps[key] = hit
        return hit

    def _cut_short(self, ref: Any) -> bool:
        """Whether a capture read by :meth:`_prepared` was cut short by its recorder (``WARC-Truncated``)."""
        meta = self._streams.get(_cache_key("r", ref)) if self._streams else None
        return meta is not None and meta.truncated is not None

    def _whole(self, method: str, url: str, body: bytes, ctype: str | None, picked: Any,
               h: dict[str, str]) -> Any:
        """For a request the sequence answered with a capture that cannot answer it (:func:`_answers`):
        the first capture of the same key recorded after it that can (else the last such before it), or
        None."""
        found = self.session.candidates(method, url, body or None, ctype)
        refs = [self.index.capture(p).ref for p in found[1]] if found else [picked]
        at = refs.index(picked) if picked in refs else 0
        for ref in refs[at + 1:] + refs[:at][::-1]:
            status, _, headers, rbody = self._prepared(ref)
            if _answers(h, status, headers, rbody, url):
                return ref
        return None

    def _variant(self, method: str, url: str, body: bytes, ctype: str | None, ref: Any, h: dict[str, str],
                 req_headers: Sequence[tuple[str, str]], got: tuple[int, str, Head, bytes],
                 ) -> tuple[Any, tuple[int, str, Head, bytes], list[str]]:
        """For a capture whose answer was chosen by request fields (``Vary``: Accept, Accept-Language,
        Cookie ...): if the request differs from the recorded one on them, the first capture of the same
        key recorded for fields like this request's; else the capture as picked, with the fields it differs
        on (the answer is then another variant than the live site would have sent: logged and counted)."""
        differs = vary_differs(vary_names(got[2], got[0]), self._asked[_cache_key("r", ref)], req_headers)
        if not differs:
            return ref, got, []
        found = self.session.candidates(method, url, body or None, ctype)
        for position in found[1] if found else ():
            other = self.index.capture(position).ref
            if other == ref:
                continue
            theirs = self._prepared(other)
            asked = self._asked.get(_cache_key("r", other))
            if asked is not None and not vary_differs(vary_names(theirs[2], theirs[0]), asked, req_headers) \
                    and _answers(h, theirs[0], theirs[2], theirs[3], url):
                return other, theirs, []
        return ref, got, differs

    def _dated(self, headers: Head) -> Head:
        """:func:`~.httputil.shift_dates` to now; the result is kept for the second for cached heads.

        A cached head's dates are parsed once (:func:`~.httputil.date_offsets`); each second after,
        moving them is a lookup of the stamps of that second, so the moment every cached head goes
        stale at once (each new second) costs no more than any other.
        """
        now = datetime.now(UTC)
        second = int(now.timestamp())
        hit = self._shifted.get(id(headers))
        if hit is not None and hit[0] is headers:
            if hit[1] == second:
                return hit[2]
            offsets = hit[3]
        elif id(headers) in self._stable:  # a cached head: the same tuple comes back next time
            offsets = date_offsets(headers)
        else:
            return shift_dates(list(headers), now.replace(microsecond=0))
        if offsets is None:
            dated: Frozen = tuple(headers)
        else:
            # the headers without a date are the cached pairs themselves: a second's new head
            # makes new objects only for its dates (fewer to collect, and no young collections' worth)
            dated = tuple(pair if off is None
                          else (pair[0], off[0] + self._stamp(second, off[1]) + off[2]) if isinstance(off, tuple)
                          else (pair[0], self._stamp(second, off))  # (a tuple: a cookie's Expires)
                          for pair, off in zip(headers, offsets, strict=True))
        self._shifted[id(headers)] = (headers, second, dated, offsets)
        return dated

    def _stamp(self, second: int, offset: timedelta) -> str:
        """The HTTP date ``offset`` from the start of ``second`` (made once a second per offset)."""
        stamps = self._stamps
        if stamps[0] != second:
            stamps = self._stamps = (second, {})
        text = stamps[1].get(offset)
        if text is None:
            text = stamps[1][offset] = http_date(datetime.fromtimestamp(second, UTC) + offset)
        return text

    # -- archived responses, read once ----------------------------------------
    # The cache holds tuples of strings, bytes and numbers only (headers as tuples of pairs, not
    # lists; flat keys): the collector stops tracking such tuples once it has seen them (nested ones
    # from the inside out, over a collection or two), so a cache of many thousands of responses adds
    # nothing to the full collections taken while serving (with lists, three tracked objects per
    # response: a full collection walked them all, 150 ms for 50,000 cached responses).
    def _remember(self, key: Any, value: Any, size: int) -> None:
        with self._lock:
            if self._cached_bytes + size > CACHE_BYTES:
                self._forget()
            self._stable[id(value[2] if key[0] == "r" else value[1])] = value
            self._cache[key] = value
            self._cached_bytes += size

    def _forget(self) -> None:
        """Let every kept answer go (the lock held): each is read again when next asked for."""
        self._cache.clear()
        self._stable.clear()
        self._shifted.clear()
        self._kept.clear()  # their bodies are the cache's: let them go with it
        self._asked.clear()  # (read again with each answer)
        self._cached_bytes = 0

    def _prepared(self, ref: Any) -> tuple[int, str, Head, bytes]:
        """The archived response for a capture, headers cleaned; kept in memory (bounded)."""
        key = _cache_key("r", ref)
        hit = self._cache.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        got = self.resolve(ref)  # (status, reason, headers, body), and perhaps a StreamMeta
        status, reason, headers, body = got[:4]
        if len(got) > 4 and got[4] is not None:
            if len(self._streams) >= MAX_LOG:
                self._streams.clear()
            self._streams[key] = got[4]
        if len(got) > 5 and got[5] is not None:
            if len(self._asked) >= MAX_LOG:  # let go with the answers they belong to: each read, and compared,
                with self._lock:  # again when next picked
                    self._forget()
            self._asked[key] = tuple(got[5])
        if _chunked_without_length(headers):  # sent chunked live: its Transfer-Encoding stays where it was
            cleaned = [(k, "chunked") if k.lower() == "transfer-encoding" else (k, v)
                       for k, v in clean_response_headers(headers, keep=("transfer-encoding",))]
            cleaned = _dedupe_header(cleaned, "transfer-encoding")
        else:
            cleaned = clean_response_headers(headers)
        value = (status, reason or reason_phrase(status), tuple(cleaned), body)
        self._remember(key, value, len(body))
        return value

    def _acceptable(self, ref: Any, body: bytes, headers: Head, accept_encoding: str | None) -> tuple[bytes, Head]:
        """The body in a coding the request takes, as an HTTP cache would serve it (RFC 9111 4.1): a
        response whose ``Vary`` names Accept-Encoding was chosen for the recording client's codings, so
        a client that does not take its coding (curl without ``--compressed``, urllib,
        python-requests without brotli) gets it decoded (:func:`~.httputil.identity_response`), as the
        server would have sent it; one without that ``Vary`` is the same answer for every client and is
        served as archived, as is one marked ``no-transform``, a recorded stream served at its pace (its
        pieces are offsets in the coded bytes) and a body that does not decode."""
        coding = get_header(headers, "content-encoding")
        if not coding or accepts_coding(accept_encoding, coding) \
                or (self._streams and _cache_key("r", ref) in self._streams):
            return body, headers
        vary = {v.strip().lower() for v in ",".join(v for k, v in headers if k.lower() == "vary").split(",")}
        if not vary & {"accept-encoding", "*"} \
                or "no-transform" in (get_header(headers, "cache-control") or "").lower():
            return body, headers
        key = _cache_key("d", ref)
        prepared = self._cache.get(_cache_key("r", ref))
        cacheable = prepared is not None and prepared[2] is headers  # the archived head, not one rewritten
        if cacheable:
            hit = self._cache.get(key)
            if hit is not None:
                return hit  # type: ignore[no-any-return]
        decoded = identity_response(headers, body)
        if decoded is None:
            return body, headers
        value = (decoded[1], tuple(decoded[0]))
        if cacheable:
            self._remember(key, value, len(value[0]))
        return value

    def _injected(self, ref: Any, body: bytes, headers: Head) -> tuple[bytes, Head]:
        key = _cache_key("i", ref)
        hit = self._cache.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        from .freeze import inject_into_html

        page, injected = inject_into_html(body, list(headers), self.freeze_script or "")
        if _chunked_without_length(headers):  # the rewritten page is still served chunked, as it was live
            injected = [(k, v) for k, v in injected if k.lower() != "content-length"] + [("Transfer-Encoding", "chunked")]
        value = (page, tuple(injected))
        self._remember(key, value, len(page))
        return value


_COUNTS = ("exact", "canonical", "learned", "fresh_id", "fuzzy", "shared", "miss", "blocked", "websocket", "live",
           "truncated", "variant", "again")


def merge_stats(parts: Sequence[ReplayStats]) -> ReplayStats:
    """Stats of several workers serving the same snapshots, added up (logs concatenated, capped)."""
    merged = ReplayStats(snapshots=list(parts[0].snapshots) if parts else [])
    for part in parts:
        for name in _COUNTS:
            setattr(merged, name, getattr(merged, name) + getattr(part, name))
        merged.missed_urls.extend(part.missed_urls[: MAX_LOG - len(merged.missed_urls)])
        merged.truncated_urls.extend(part.truncated_urls[: MAX_LOG - len(merged.truncated_urls)])
        for reason, n in part.refused.items():
            merged.refused[reason] = merged.refused.get(reason, 0) + n
        for source, n in part.shared_from.items():
            merged.shared_from[source] = merged.shared_from.get(source, 0) + n
        merged.log.extend(part.log[: MAX_LOG - len(merged.log)])
    return merged
