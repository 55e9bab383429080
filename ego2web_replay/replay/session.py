"""Replaying snapshots: the Python API and what ``serve`` runs.

::

    from ego2web_replay.replay import Replay

    with Replay(["snapshots/T1/20261130T071500Z"]) as replay:
        with replay.browser() as browser:          # Chromium wired to the replay
            page = browser.new_context().new_page()
            page.goto("https://shop.example/item/42")
        print(replay.stats().miss)

``Replay`` opens the snapshots, builds one match index over all of their
captures (in recorded order), starts the hermetic replay proxy on 127.0.0.1
(``replay_addons()``: upstream guard, replayer) and yields what a client
needs: ``proxy_url``, ``ca_file``, ``spki``, ``init_script`` (the determinism
script, for clients that add it themselves).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ArchiveError, ReplayError, SnapshotError
from ..guard import UpstreamGuard
from ..models import ReplayStats, save_model
from ..proxy import ProjectCA, ProxyServer, project_ca
from ..redaction import Redactor
from ..snapshots.index_cache import index_rows
from .addon import Replayer
from .matching import Capture, MatchIndex
from .rules import load_rules

__all__ = ["Replay", "replay_addons", "load_captures", "MISS_POLICIES"]

MISS_POLICIES = "a status code (404, 410, 502, 504 ...) or 'live'"


def load_captures(snapshots: Sequence[Any]) -> list[Capture]:
    """Captures of every indexed response/revisit/resource, snapshot by snapshot, in recorded order.

    The index is read in one pass into light tuples; an entry is parsed fully
    (:class:`~ego2web_replay.snapshots.cdxj.CdxjEntry`) only when it is served, so a
    100k-line index loads in well under a second. POST/PUT request bodies are taken
    from the index in the pywb form (``__wb_method=post&...``); incoming bodies are
    put in the same form before matching (see :func:`request_body_form`).
    """
    caps: list[Capture] = []
    form = "application/x-www-form-urlencoded"
    new = tuple.__new__  # Capture is a named tuple; building it this way is 3x faster for big indexes
    for n, snap in enumerate(snapshots):
        for ts, _offset, url, method, body_query, line in index_rows(Path(snap.index_path)):
            body = body_query.encode("utf-8") if body_query else None
            caps.append(new(Capture, (url, method, body, form if body else None, ts, (n, line))))
    return caps


def request_body_form(method: str, content_type: str | None, body: bytes) -> tuple[bytes | None, str | None]:
    """An incoming request body in the same form as the index keeps archived ones."""
    if not body or method.upper() in ("GET", "HEAD"):
        return None, None
    from ..snapshots.cdxj import request_body_query

    return request_body_query(content_type, body).encode("utf-8"), "application/x-www-form-urlencoded"


class _FormMatchIndex(MatchIndex):
    """A MatchIndex whose sessions see request bodies in the index's form."""

    def session(self, policy: Any = None) -> Any:
        inner = super().session(policy)
        outer_match = inner.match

        def match(method: str, url: str, body: bytes | None = None, content_type: str | None = None) -> Any:
            b, ct = request_body_form(method, content_type, body or b"")
            return outer_match(method, url, b, ct)

        inner.match = match  # type: ignore[method-assign]
        return inner


def _capture_time(snapshot: Any, captures: Sequence[Capture]) -> dt.datetime:
    """When the first snapshot's pages were captured: the recording's start, or for an imported
    WARC (whose manifest dates the import) its earliest capture."""
    if snapshot.manifest.source == "import" and captures:
        first = min(c.timestamp for c in captures)
        try:
            return dt.datetime.strptime(first[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
        except ValueError:
            pass
    return snapshot.manifest.created_at


def snapshots_redactor(snapshots: Sequence[Any]) -> Redactor | None:
    """The credential redaction to apply to incoming requests: the recording's (the union of the
    snapshots' extra names), or None when no snapshot was recorded with redaction."""
    found = [r for r in (Redactor.from_settings(s.manifest.settings) for s in snapshots) if r is not None]
    if not found:
        return None
    return Redactor.make(headers=[h for r in found for h in r.extra_headers],
                         params=[p for r in found for p in r.params])


def replay_addons(replayer: Replayer) -> list[Any]:
    """The replay proxy, in order: guard (browser background hosts), then the replayer."""
    return [UpstreamGuard(), replayer]


class Replay:
    """A running hermetic replay of one or more snapshots (see the module docstring)."""

    def __init__(self, snapshots: Sequence[str | Path], *, host: str = "127.0.0.1", port: int = 0,
                 ca: ProjectCA | None = None, miss: str = "404", policy: str = "sequence", freeze: bool = True,
                 seed: int | None = None, rules_files: Sequence[Path] = (),
                 fuzzy_threshold: float | None = None, guard_mode: str = "open") -> None:
        if not snapshots:
            raise ReplayError("give at least one snapshot folder to replay")
        if miss != "live":
            try:
                code = int(miss)
            except ValueError:
                raise ReplayError(f"unknown miss policy {miss!r}; use {MISS_POLICIES}") from None
            if not 100 <= code <= 599:
                raise ReplayError(f"miss status {code} is not an HTTP status")
        self.paths = [Path(p) for p in snapshots]
        self.host, self.port, self.miss, self.policy, self.freeze = host, port, miss, policy, freeze
        self.seed = seed
        self.rules_files = list(rules_files)
        self.fuzzy_threshold = fuzzy_threshold
        self.guard_mode = guard_mode
        self.ca = ca
        self.snapshots: list[Any] = []
        self.proxy: ProxyServer | None = None
        self.replayer: Replayer | None = None
        self.capture_time: dt.datetime | None = None
        self.init_script: str = ""
        self.load_seconds = 0.0
        self.captures = 0

    # -- what a client needs -------------------------------------------------
    @property
    def proxy_url(self) -> str:
        if self.proxy is None:
            raise ReplayError("the replay is not running")
        return self.proxy.url

    @property
    def ca_file(self) -> Path:
        assert self.ca is not None
        return self.ca.cert_path

    @property
    def spki(self) -> str:
        assert self.ca is not None
        return self.ca.spki

    def stats(self) -> ReplayStats:
        if self.replayer is None:
            return ReplayStats(snapshots=[str(p) for p in self.paths])
        return self.replayer.snapshot_stats()

    def write_stats(self, path: Path) -> None:
        save_model(path, self.stats())

    @contextmanager
    def browser(self, **kwargs: Any) -> Iterator[Any]:
        """A Chromium session through this replay; contexts get the determinism script."""
        from ..browser import BrowserSession

        session = BrowserSession(proxy_url=self.proxy_url, spki=self.spki, **kwargs).start()
        original = session.new_context

        def new_context(**kw: Any) -> Any:
            scripts = list(kw.pop("init_scripts", ())) + ([self.init_script] if self.init_script else [])
            return original(init_scripts=scripts, **kw)

        session.new_context = new_context  # type: ignore[method-assign]
        try:
            yield session
        finally:
            session.close()

    # -- lifecycle ---------------------------------------------------------------
    def open(self) -> None:
        from ..snapshots.snapshot import Snapshot

        t0 = time.perf_counter()
        for p in self.paths:
            if not p.exists():
                raise SnapshotError(f"snapshot {p} not found")
            self.snapshots.append(Snapshot.open(p))
        captures = load_captures(self.snapshots)
        if not captures:
            raise SnapshotError(f"nothing to replay: {', '.join(map(str, self.paths))} hold no responses")
        rules = load_rules(self.rules_files) if self.rules_files else None
        index = _FormMatchIndex(captures, rules=rules, policy=self.policy,  # type: ignore[arg-type]
                                fuzzy_threshold=self.fuzzy_threshold)
        self.captures = len(captures)
        self.capture_time = _capture_time(self.snapshots[0], [c for c in captures if c.ref[0] == 0])
        if self.freeze:
            from .freeze import freeze_script

            seed = self.seed if self.seed is not None else int(
                hashlib.sha256(self.paths[0].name.encode()).hexdigest()[:8], 16)
            self.init_script = freeze_script(self.capture_time, seed)
        self.replayer = Replayer(index, self._resolve, miss=self.miss,
                                 freeze_script=self.init_script or None, policy=self.policy,
                                 snapshots=[str(p) for p in self.paths], redactor=snapshots_redactor(self.snapshots))
        self.load_seconds = time.perf_counter() - t0

    def _resolve(self, ref: tuple[int, str]) -> tuple[int, str, list[tuple[str, str]], bytes]:
        from ..snapshots.cdxj import CdxjEntry

        n, line = ref
        entry = CdxjEntry.from_line(line)
        record = self.snapshots[n].resolve(entry)
        if record.http_status is None:
            if record.rec_type != "resource":  # e.g. an 'HTTPX/1.1' status line or an empty block
                raise ArchiveError(f"the archived {record.rec_type} record of {entry.url} has no readable "
                                   "HTTP status line")
            # a resource record: no HTTP head of its own
            ctype = record.content_type or entry.mime or "application/octet-stream"
            return 200, "OK", [("Content-Type", ctype)], record.payload
        return record.http_status, record.http_reason or "", list(record.http_headers or []), record.payload

    def start(self) -> Replay:
        self.ca = self.ca or project_ca()
        if self.replayer is None:
            self.open()
        assert self.replayer is not None
        # The guard only answers browser background hosts here: every other request is the
        # replayer's, and the replayer refuses every upstream connection (unless miss=live).
        self.proxy = ProxyServer(replay_addons(self.replayer), host=self.host, port=self.port, ca=self.ca,
                                 options={"guard_mode": self.guard_mode})
        self.proxy.start()
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None

    def __enter__(self) -> Replay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
