"""Request matching for hermetic replay: which archived response answers a request.

:class:`MatchIndex` holds the captures of a snapshot; :class:`ReplaySession`
keeps what one replay has served. The stages, in the words the docs use, are
:data:`MATCH_STAGES` (appended below).
"""

from __future__ import annotations

import gc
import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote_plus

from ..snapshots.volatility import path_group
from .canonical import BODY_PREFIX, CanonicalRequest, body_form, canonicalize, match_key, url_host
from .freshids import differing_names, display_name, fresh_key
from .gcfreeze import refreeze
from .rules import CompiledRules, MatchRules, default_rules

__all__ = [
    "Capture",
    "MatchResult",
    "IndexBase",
    "MatchIndex",
    "ReplaySession",
    "SequencePolicy",
    "MATCH_STAGES",
    "describe_key",
    "similarity",
    "match_key",
]

MATCH_STAGES = """\
How a request is matched, in plain words (the full rule, with examples, is
docs/matching.md). Replay never answers a request with a capture whose
content-bearing parameters differ: only volatile parts may differ.

1. **exact**: an archived request with the same method, the very same URL and
   the same body (in the index's POST form).
2. **canonical**: an archived request with the same match key
   (:func:`match_key`): the URL in canonical SURT form with its query sorted
   and the parameters volatile BY RULE dropped (cache-busters, session ids,
   tracking tags, epoch times under timestamp names, JSONP callback values), and the body read as
   fields with volatile fields (timestamps, nonces, request ids) ignored.
   Also **canonical**: the same key once the names LEARNED volatile for this
   path at record time are dropped too (``volatile.json`` of the snapshot: a
   name whose value changed between captures of the path while the response
   stayed the same).
   Also **canonical**: the same key once FRESH IDS are set aside, values
   shaped as random ids (UUIDs, long hex/base64 tokens, GA client ids, epoch
   times) under names that do not choose content (:mod:`.freshids`): the
   request must equal a capture in everything else, with fresh ids of the
   same shapes under the same names. The log names the parameters ignored.
3. **miss**: nothing else matches; the replay proxy answers with a synthetic
   miss. A different search term, id, page number, facet, sort order or JSON
   field is a miss.

Only when asked for (``fuzzy=True``, ``--fuzzy``; for diagnosis, counted
apart as ``fuzzy``) a request that would miss is answered by the **nearest
capture**: among archived requests with the same method, scheme, host and
path, the one whose query parameters and body fields are most alike (Jaccard
similarity over name=value pairs; a name on both sides with a different value
earns half credit), if that similarity reaches the host's threshold (0.5 by
default); ties go to the capture closest in recorded order to the capture
served last. Such an answer is another page's content.

When several captures share an exact or canonical key (a page polling the
same URL), the ``sequence`` policy serves them in recorded order, skipping
captures this replay already served by another stage, and then keeps serving
the last; ``first`` always serves the first and ``last`` the last.
A HEAD request with no archived HEAD is matched against the GET captures.
A Range request is answered from all the captures of its stage (their
recorded bytes, :mod:`.ranges`), never by this order.
"""

if __doc__:
    __doc__ += "\n" + MATCH_STAGES

SequencePolicy = Literal["sequence", "first", "last"]
Outcome = Literal["exact", "canonical", "fuzzy", "miss"]


class Capture(NamedTuple):
    """One archived request/response pair, as the matcher sees it.

    ``body`` is the archived REQUEST body in the index's POST form (the CDXJ
    ``requestBody``; :func:`~.canonical.body_form` turns a raw body into it);
    ``timestamp`` is the capture's 14-digit WARC time; ``ref`` is opaque to the
    matcher (the caller keeps its index entry there). A named tuple, so that
    100k captures are built in a fraction of a second.
    """

    url: str
    method: str = "GET"
    body: str | None = None
    timestamp: str = ""
    ref: Any = None

    @classmethod
    def of_request(cls, url: str, method: str = "GET", body: bytes | None = None,
                   content_type: str | None = None, timestamp: str = "", ref: Any = None) -> Capture:
        """A capture from a raw request body and its content type."""
        return cls(url, method, body_form(method, content_type, body), timestamp, ref)


@dataclass(frozen=True, slots=True)
class MatchResult:
    """How a request was matched: the stage, the capture served, its score and key.

    ``via`` says why a canonical match differs from its capture beyond the rules: ``learned``
    (names learned volatile for the path) or ``fresh-id`` (:mod:`.freshids`); ``ignored`` names the
    parameters whose values differed (``body:`` for body fields). ``position`` is the capture's
    position (recorded order) for an exact match, else None (what :meth:`ReplaySession.again` is given).
    ``series`` holds the positions of every capture of the key when the ``sequence`` policy went past
    them: the key was recorded more than once (a page polling the same URL), or is a write recorded once
    (:func:`_write`; a series of one), this replay asked for it more often, and the last capture is served
    again (empty otherwise; see :meth:`ReplaySession._pick`).
    """

    outcome: Outcome
    capture: Capture | None
    score: float | None
    key: str
    via: str | None = None
    ignored: tuple[str, ...] = ()
    position: int | None = None
    series: tuple[int, ...] = ()


def _exact_key(method: str, url: str, body: str | None) -> tuple[str, str, str]:
    return (method.upper(), url, body or "")


def _exact_key_text(key: tuple[str, str, str]) -> str:
    method, url, body = key
    text = f"{method} {url}"
    return f"{text} body=sha256:{hashlib.sha256(body.encode()).hexdigest()}" if body else text


#: how a fresh-id answer names a random id set aside under a name no fresh-id rule lists (``body:owner?``): it may
#: name a thing, so the answer is counted but the episode is at best degraded (see validity.classify)
UNLISTED = "?"


def _write(method: str, body: str | None) -> bool:
    """A request that changes the site: PUT, PATCH, DELETE, and a GraphQL mutation (a body whose ``query`` is
    a ``mutation``). Asked more often than recorded, even once recorded, the live site's next answer is not
    known (a second review posted gets a new id). Other POSTs are searches and forms as often as writes:
    taken as a page asked again."""
    if method in ("PUT", "PATCH", "DELETE"):
        return True
    if method != "POST" or not body or "query=" not in body:
        return False
    for item in body.split("&"):
        name, _, value = item.partition("=")
        if unquote_plus(name) == "query":
            return unquote_plus(value).lstrip().startswith("mutation")
    return False


def _not_content(group: str, names: Iterable[str], rules: MatchRules) -> frozenset[str]:
    """The learned names of a path group that may be set aside: never a content name (``term``, ``q``, ``id``
    ...): two searches that both found nothing got the same answer, yet the term chose it."""
    compiled = rules.for_host(url_host(group.partition(" ")[2]))  # (a group is "METHOD scheme://host/path")
    return frozenset(n for n in names if compiled.fresh_id_name(n.lower()))


def _learned_key(canon: CanonicalRequest, names: frozenset[str]) -> str:
    """The canonical key without the names learned volatile for the request's path."""
    kept = [f"{k}={v}" for k, v in canon.pairs if unquote_plus(k.removeprefix(BODY_PREFIX)) not in names]
    return canon.group + "?" + "&".join(kept)


def _value_sets(pairs: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    sets: dict[str, set[str]] = {}
    for k, v in pairs:
        sets.setdefault(k, set()).add(v)
    return {k: frozenset(v) for k, v in sets.items()}


def _score(va: dict[str, frozenset[str]], vb: dict[str, frozenset[str]]) -> float:
    if len(va) > len(vb):
        va, vb = vb, va
    common = 0
    credit = 0.0
    for name, x in va.items():
        y = vb.get(name)
        if y is not None:
            common += 1
            credit += 1.0 if x == y else 0.5 + 0.5 * len(x & y) / len(x | y)
    names = len(va) + len(vb) - common
    return credit / names if names else 1.0


def similarity(a: Iterable[tuple[str, str]], b: Iterable[tuple[str, str]]) -> float:
    """Jaccard similarity of two sets of name=value pairs with partial credit.

    Every name on either side counts once in the denominator; a name on both
    sides earns 1 when its values agree and ``0.5 + 0.5 * jaccard(values)``
    (at least 0.5, below 1) when they differ. Two empty sets score 1.
    """
    return _score(_value_sets(a), _value_sets(b))


def describe_key(method: str, url: str, body: bytes | None = None, content_type: str | None = None,
                 rules: MatchRules | None = None) -> str:
    """A few lines explaining how this request is matched (for ``--explain`` output and docs)."""
    rules = rules or default_rules()
    form = body_form(method, content_type, body)
    canon = canonicalize(method, url, form, rules)
    raw_names = [part.partition("=")[0] for part in url.partition("?")[2].partition("#")[0].split("&") if part]
    kept = {unquote_plus(name) for name, _ in canon.pairs}
    dropped = [name for name in raw_names if unquote_plus(name) not in kept]
    lines = [
        f"exact key:     {_exact_key_text(_exact_key(method, url, form))}",
        f"canonical key: {canon.key}",
        "dropped:       " + (", ".join(dropped) or "(nothing)") + " (volatile query parameters)",
        f"path group:    {canon.group}",
        "fields:        " + (", ".join(f"{k.replace(BODY_PREFIX, 'body:')}={v}" for k, v in canon.pairs) or "(none)"),
    ]
    fresh = fresh_key(canon, rules.for_host(url_host(url)))
    lines.append("fresh ids:     " + (", ".join(display_name(n) for n in fresh.names) if fresh else "(none)")
                 + " (set aside when nothing else differs)")
    return "\n".join(lines)


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic GC while building big tables (it only creates acyclic objects)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(slots=True)
class _Entry:
    position: int
    capture: Capture
    pairs: list[tuple[str, str]]
    _values: dict[str, frozenset[str]] | None = None

    @property
    def values(self) -> dict[str, frozenset[str]]:
        """Values per name, computed on first fuzzy use (a benign race: same result)."""
        if self._values is None:
            self._values = _value_sets(self.pairs)
        return self._values


@dataclass(slots=True)
class _HostTables:
    canonical: dict[str, list[int]]
    groups: dict[str, list[_Entry]]
    learned: dict[str, list[int]]
    fresh: dict[str, list[int]]


class IndexBase(ABC):
    """What a :class:`ReplaySession` asks of an index of captures: positions (recorded order) by
    exact key, by canonical key, by learned key, the fuzzy group of a path, and the capture at a
    position. :class:`MatchIndex` keeps them in memory; :class:`~.mapped.MappedMatchIndex` reads them
    from a sorted, memory-mapped file. Both give the same answers (``tests/test_mapped_index.py``)."""

    rules: MatchRules
    policy: SequencePolicy
    fuzzy: bool
    fuzzy_threshold: float | None
    learned: dict[str, frozenset[str]]
    methods: frozenset[str]
    _default: ReplaySession

    def _configure(self, rules: MatchRules | None, policy: SequencePolicy, fuzzy_threshold: float | None,
                   fuzzy: bool, learned: Mapping[str, frozenset[str]] | None) -> None:
        """Set the settings every index has (the arguments of :class:`MatchIndex` after ``captures``)."""
        self.rules = rules or default_rules()
        self.policy = policy
        self.fuzzy = fuzzy
        self.fuzzy_threshold = fuzzy_threshold
        self.learned = {g: ns for g, n in (learned or {}).items() if (ns := _not_content(g, n, self.rules))}

    @abstractmethod
    def __len__(self) -> int:
        """The number of captures."""

    @abstractmethod
    def capture(self, position: int) -> Capture:
        """The capture at ``position`` (recorded order)."""

    @abstractmethod
    def exact_positions(self, key: tuple[str, str, str]) -> Sequence[int] | None:
        """Positions of the captures with this (method, URL, body) key, ascending."""

    @abstractmethod
    def canonical_positions(self, host: str, key: str) -> list[int] | None:
        """Positions of ``host``'s captures with this canonical key, ascending."""

    @abstractmethod
    def learned_positions(self, host: str, group: str, key: str) -> list[int] | None:
        """Positions of ``host``'s captures whose key without their learned-volatile names is ``key``
        (a request's, of fuzzy group ``group``), ascending."""

    @abstractmethod
    def fresh_positions(self, host: str, group: str, key: str) -> list[int] | None:
        """Positions of ``host``'s captures whose fresh key (:func:`~.freshids.fresh_key`) is ``key``
        (a request's, of fuzzy group ``group``), ascending."""

    @abstractmethod
    def group_entries(self, host: str, group: str) -> list[_Entry] | None:
        """``host``'s captures in fuzzy group ``group`` (method, scheme, host, path), recorded order."""

    def session(self, policy: SequencePolicy | None = None) -> ReplaySession:
        """A fresh replay session over this index (its own sequencing state)."""
        return ReplaySession(self, policy or self.policy)

    def match(self, method: str, url: str, body: bytes | None = None, content_type: str | None = None) -> MatchResult:
        """Match a request (raw body) in the index's default session (see :class:`ReplaySession`)."""
        return self._default.match(method, url, body, content_type)

    def reset(self) -> None:
        """Forget what the default session has served (start a new replay)."""
        self._default.reset()

    def threshold_for(self, host: str) -> float:
        """The fuzzy threshold for ``host`` (the index's override, else the rules')."""
        if self.fuzzy_threshold is not None:
            return self.fuzzy_threshold
        return self.rules.for_host(host).fuzzy_threshold


class MatchIndex(IndexBase):
    """A lookup of captures by exact key, canonical key and fuzzy group.

    Captures are taken in recorded order (the order given). Building indexes
    exact keys and hosts only; a host's canonical keys and fuzzy groups are
    computed the first time a request to that host is not an exact match
    (:meth:`prepare` computes them all up front). :meth:`match` uses the
    index's own default :class:`ReplaySession`; :meth:`session` makes another.
    ``learned`` maps a path group (:func:`~ego2web_replay.snapshots.volatility.path_group`)
    to the names learned volatile there; ``fuzzy`` turns on the opt-in nearest-capture stage.
    """

    def __init__(
        self,
        captures: Iterable[Capture],
        rules: MatchRules | None = None,
        policy: SequencePolicy = "sequence",
        fuzzy_threshold: float | None = None,
        *,
        fuzzy: bool = False,
        learned: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.captures: list[Capture] = list(captures)
        self._configure(rules, policy, fuzzy_threshold, fuzzy, learned)
        self.exact: dict[tuple[str, str, str], list[int]] = {}
        self._by_host: dict[str, list[int]] = {}
        self._tables: dict[str, _HostTables] = {}
        self._build_lock = threading.Lock()
        methods: set[str] = set()
        with _no_gc():
            self._index_exact(methods)
        self.methods = frozenset(methods)
        self._default = ReplaySession(self, policy)

    def _index_exact(self, methods: set[str]) -> None:
        exact, by_host = self.exact, self._by_host
        for position, capture in enumerate(self.captures):
            method = capture.method.upper()
            methods.add(method)
            key = (method, capture.url, capture.body or "")
            hit = exact.get(key)
            if hit is None:
                exact[key] = [position]
            else:
                hit.append(position)
            host = url_host(capture.url)
            bucket = by_host.get(host)
            if bucket is None:
                by_host[host] = [position]
            else:
                bucket.append(position)

    def __len__(self) -> int:
        return len(self.captures)

    def hosts(self) -> list[str]:
        """The hosts that have captures."""
        return sorted(self._by_host)

    def tables(self, host: str) -> _HostTables:
        """Canonical keys and fuzzy groups of one host's captures (built once, thread-safe)."""
        tables = self._tables.get(host)
        if tables is not None:
            return tables
        with self._build_lock:
            tables = self._tables.get(host)
            if tables is None:
                canonical: dict[str, list[int]] = {}
                groups: dict[str, list[_Entry]] = {}
                learned: dict[str, list[int]] = {}
                fresh: dict[str, list[int]] = {}
                rules, volatile, compiled = self.rules, self.learned, self.rules.for_host(host)
                with _no_gc():
                    for position in self._by_host.get(host, ()):
                        c = self.captures[position]
                        canon = canonicalize(c.method, c.url, c.body, rules)
                        canonical.setdefault(canon.key, []).append(position)
                        groups.setdefault(canon.group, []).append(_Entry(position, c, canon.pairs))
                        add_secondary_keys(learned, fresh, position, c, canon, volatile, compiled)
                tables = _HostTables(canonical, groups, learned, fresh)
                self._tables[host] = tables
                refreeze()  # long-lived from now on: keep them out of full collections too
        return tables

    def prepare(self) -> None:
        """Compute every host's canonical keys and fuzzy groups now."""
        for host in self._by_host:
            self.tables(host)

    def capture(self, position: int) -> Capture:
        return self.captures[position]

    def exact_positions(self, key: tuple[str, str, str]) -> Sequence[int] | None:
        return self.exact.get(key)

    def canonical_positions(self, host: str, key: str) -> list[int] | None:
        return self.tables(host).canonical.get(key)

    def learned_positions(self, host: str, group: str, key: str) -> list[int] | None:
        return self.tables(host).learned.get(key)

    def fresh_positions(self, host: str, group: str, key: str) -> list[int] | None:
        return self.tables(host).fresh.get(key)

    def group_entries(self, host: str, group: str) -> list[_Entry] | None:
        return self.tables(host).groups.get(group)


class ReplaySession:
    """Sequencing state of one replay over a :class:`MatchIndex`; thread-safe."""

    def __init__(self, index: IndexBase, policy: SequencePolicy = "sequence") -> None:
        if policy not in ("sequence", "first", "last"):
            raise ValueError(f"unknown sequence policy {policy!r}; use sequence, first or last")
        self.index = index
        self.policy: SequencePolicy = policy
        self._cursor: dict[tuple[str, Any], int] = {}
        self._used: set[int] = set()
        self._last_position = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget everything served so far."""
        with self._lock:
            self._cursor.clear()
            self._used.clear()
            self._last_position = 0

    def _pick(self, stage: str, key: Any, positions: Sequence[int], want: int = -1,
              peek: bool = False, write: bool = False) -> tuple[int, bool]:
        """The capture to serve among ``positions`` (recorded order), and whether serving it goes past the
        recorded series; call with the lock held.

        ``sequence`` serves the first capture of the key this session has not
        served yet (whichever stage served it), and the last once all were: past the series, when the
        key was recorded more than once (with a single capture, asking again is a page visited again), or
        is a ``write`` (:func:`_write`).
        With ``want`` (a position), only that one: -1, and nothing changed, when another would be served.
        With ``peek``, the one it would serve, nothing changed.
        """
        cursor = -1
        past = False
        if self.policy == "first":
            position = positions[0]
        elif self.policy == "last":
            position = positions[-1]
        else:
            cursor = self._cursor.get((stage, key), 0)
            last = len(positions) - 1
            while cursor < last and positions[cursor] in self._used:
                cursor += 1
            position = positions[cursor]
            past = (cursor == last > 0 or write) and position in self._used
        if want >= 0 and position != want:
            return -1, past
        if peek:
            return position, past
        if cursor >= 0:
            self._cursor[(stage, key)] = cursor
        self._used.add(position)
        self._last_position = position
        return position, past

    def again(self, method: str, url: str, position: int) -> bool:
        """Serve the capture at ``position`` again to a request of ``method`` and ``url`` with no body that
        it matched exactly, if that capture is the one :meth:`match` would pick for it now, with the same
        effect on what this session has served, and not past its recorded series; else change nothing and
        say False (the request is then matched as any other)."""
        key = _exact_key(method, url, None)
        positions = self.index.exact_positions(key)
        if not positions:
            return False
        with self._lock:
            picked, past = self._pick("exact", key, positions, position, peek=True)
            if picked < 0 or past:
                return False
            return self._pick("exact", key, positions, position)[0] >= 0

    def match(self, method: str, url: str, body: bytes | None = None, content_type: str | None = None) -> MatchResult:
        """Match one request: exact, then canonical (rules, then learned names), then, only when
        the index has ``fuzzy`` on, the nearest capture; else a miss. ``body`` is the raw body."""
        method = method.upper()
        result = self._match(method, url, body_form(method, content_type, body))
        if result.outcome == "miss" and method == "HEAD" and "HEAD" not in self.index.methods:
            # what the next GET would get, and nothing taken from the GETs' turn: a HEAD asks about a
            # resource, it is not one of the page's loads of it
            fallback = self._match("GET", url, None, peek=True)
            if fallback.outcome != "miss":
                return fallback
        return result

    def candidates(self, method: str, url: str, body: bytes | None = None,
                   content_type: str | None = None) -> tuple[Outcome, Sequence[int]] | None:
        """Every capture the first matching stage holds for this request (recorded order) and the
        stage, without picking one: what a ``Range`` request is answered from (its bytes never depend
        on what was served before). None when no stage holds any (fuzzy is not consulted)."""
        found = self.stage_of(method, url, body, content_type)
        return None if found is None else (("exact" if found[0] == "exact" else "canonical"), found[2])

    def stage_of(self, method: str, url: str, body: bytes | None = None,
                 content_type: str | None = None) -> tuple[str, Any, Sequence[int], Any, Any] | None:
        """The first stage holding captures of this request, as :meth:`_stage` says it (a HEAD with no
        archived HEAD asks the GET captures), without picking one; None when none does. Its
        :meth:`result` for the capture served says how it was matched."""
        method = method.upper()
        found = self._stage(method, url, body_form(method, content_type, body))
        if found[2] is None and method == "HEAD" and "HEAD" not in self.index.methods:
            found = self._stage("GET", url, None)
        stage, key, positions, text, aside = found
        return None if positions is None else (stage, key, positions, text, aside)

    def result(self, stage: str, text: Any, aside: Any, capture: Capture, position: int | None = None,
               series: tuple[int, ...] = ()) -> MatchResult:
        """How a request was matched by ``stage`` (of :meth:`_stage`) to ``capture``: the outcome, and
        for the learned and fresh-id stages what was set aside; ``series``: the key's positions when the
        capture was served past them (:attr:`MatchResult.series`)."""
        index = self.index
        if stage == "exact":
            return MatchResult("exact", capture, 1.0, _exact_key_text(text), position=position, series=series)
        if stage == "learned":
            canon, names = aside
            return MatchResult("canonical", capture, 1.0, text, "learned",
                               tuple(_differing(names, canon, capture, index)), series=series)
        if stage == "fresh":
            canon, fresh = aside
            theirs = canonicalize(capture.method, capture.url, capture.body, index.rules).pairs
            unsure = set(differing_names(fresh.unlisted, canon.pairs, theirs)) if fresh.unlisted else set()
            return MatchResult("canonical", capture, 1.0, text, "fresh-id",
                               tuple(n + UNLISTED if n in unsure else n
                                     for n in differing_names(fresh.names, canon.pairs, theirs)), series=series)
        return MatchResult("canonical", capture, 1.0, text, series=series)

    def _stage(self, method: str, url: str, body: str | None) -> tuple[str, Any, Sequence[int] | None, Any, Any]:
        """The first stage holding captures of the request: ``(stage, cursor key, positions, key text,
        what the stage sets aside)``; positions None when none does, the key text then being the
        request's canonical form. Learned and fresh-id stages have cursors of their own: their keys
        can read like a canonical key of other captures."""
        index = self.index
        exact = _exact_key(method, url, body)
        positions = index.exact_positions(exact)
        if positions:
            return "exact", exact, positions, exact, None
        canon: CanonicalRequest = canonicalize(method, url, body, index.rules)
        host = url_host(url)
        found = index.canonical_positions(host, canon.key)
        if found:
            return "canonical", canon.key, found, canon.key, None
        names = index.learned.get(path_group(method, url)) if index.learned else None
        if names:
            learned_key = _learned_key(canon, names)
            found = index.learned_positions(host, canon.group, learned_key)
            if found:
                return ("learned", learned_key, found,
                        f"{learned_key} (learned volatile: {', '.join(sorted(names))})", (canon, names))
        fresh = fresh_key(canon, index.rules.for_host(host))
        if fresh is not None:
            found = index.fresh_positions(host, canon.group, fresh.key)
            if found:
                return "fresh", fresh.key, found, fresh.key, (canon, fresh)
        return "miss", None, None, canon, None

    def _match(self, method: str, url: str, body: str | None, peek: bool = False) -> MatchResult:
        """The match of one request (``peek``: the capture the sequence would serve now, nothing changed)."""
        index = self.index
        stage, key, positions, text, aside = self._stage(method, url, body)
        if positions is not None:
            with self._lock:
                position, past = self._pick(stage, key, positions, peek=peek, write=_write(method, body))
            return self.result(stage, text, aside, index.capture(position), position, tuple(positions) if past else ())
        canon = text
        host = url_host(url)
        entries = index.group_entries(host, canon.group) if index.fuzzy else None
        if entries:
            threshold = index.threshold_for(host)
            mine = _value_sets(canon.pairs)
            scored = [(_score(mine, e.values), e) for e in entries]
            best_score = max(score for score, _ in scored)
            if best_score >= threshold:
                tied = [e for score, e in scored if score == best_score]
                with self._lock:
                    anchor = self._last_position
                    best = min(tied, key=lambda e: (abs(e.position - anchor), e.position))
                    if not peek:
                        self._used.add(best.position)
                        self._last_position = best.position
                return MatchResult("fuzzy", best.capture, round(best_score, 6), canon.group)
        return MatchResult("miss", None, None, canon.key)


def add_secondary_keys(learned: dict[str, list[int]], fresh: dict[str, list[int]], position: int, c: Capture,
                       canon: CanonicalRequest, volatile: Mapping[str, frozenset[str]], compiled: CompiledRules) -> None:
    """File a capture under its learned key (when its path has learned names) and its fresh key
    (when it carries fresh ids); the in-memory and the mapped index share this."""
    names = volatile.get(path_group(c.method, c.url)) if volatile else None
    if names:
        learned.setdefault(_learned_key(canon, names), []).append(position)
    fk = fresh_key(canon, compiled)
    if fk is not None:
        fresh.setdefault(fk.key, []).append(position)


def _differing(names: frozenset[str], canon: CanonicalRequest, capture: Capture, index: IndexBase) -> list[str]:
    """The learned names whose values differ between a request and the capture it was matched to."""
    theirs = canonicalize(capture.method, capture.url, capture.body, index.rules).pairs
    chosen = [k for k, _ in canon.pairs + theirs if unquote_plus(k.removeprefix(BODY_PREFIX)) in names]
    return differing_names(dict.fromkeys(chosen), canon.pairs, theirs)
