"""What a replay served: one log entry per request and the counts of each outcome."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from .base import FileModel

__all__ = ["MatchOutcome", "ReplayLogEntry", "ReplayStats", "StoreRequests"]

MatchOutcome = Literal["exact", "canonical", "fuzzy", "miss", "blocked", "websocket", "live", "shared"]


class ReplayLogEntry(BaseModel):
    """One request seen by the replay proxy and how it was answered."""

    method: str = Field(description="HTTP method of the request; ``WS`` for a message a client sent on a "
                        "replayed websocket (its url the handshake's).")
    url: str = Field(description="URL of the request.")
    outcome: MatchOutcome = Field(description="How it was answered (the matching stage, or why not matched).")
    status: int | None = Field(default=None, description="Status served to the client.")
    matched_url: str | None = Field(default=None, description="URL of the capture served, if any.")
    score: float | None = Field(default=None, description="Fuzzy similarity of the capture served.")
    kind: str | None = Field(default=None, description="What the request was for: document, content "
                             "(script, fetch/XHR) or subresource (see ego2web_replay.validity).")
    volatile: str | None = Field(default=None, description="For a canonical match whose capture differs beyond "
                                 "the rules: why and in which parameters, e.g. 'fresh-id: cid, body:requestId' "
                                 "(fresh random ids) or 'learned: tok' (learned volatile at record time).")
    range: str | None = Field(default=None, description="The request's Range header, if it had one: answered "
                              "only with recorded bytes of the URL, else a miss (docs/matching.md).")
    shared_from: str | None = Field(default=None, description="For a `shared` answer: the snapshot it came from "
                                    "('<task>/<snapshot id>'), another task's of the same snapshots root "
                                    "(--share-window; docs/matching.md, 'Shared captures').")
    shared_stage: str | None = Field(default=None, description="For a `shared` answer: the stage that matched it "
                                     "in its source snapshot (exact or canonical).")


class StoreRequests(BaseModel):
    """What an episode asked of object storage (a snapshot on ``s3://``): finding, opening and reading it."""

    gets: int = Field(default=0, description="Object bodies fetched, whole or by byte range (a warm cache: 0).")
    bytes: int = Field(default=0, description="Bytes those GETs brought.")
    lookups: int = Field(default=0, description="Metadata lookups of an object or bucket (HEAD), such as the "
                         "manifest's ETag check of a warm open.")
    listings: int = Field(default=0, description="Listings (finding the newest snapshot of a task).")


class ReplayStats(FileModel):
    """Counts of how every request of a replay session was answered (``replay_stats.json``)."""

    FORMAT_VERSION = 1

    version: int = Field(default=1, ge=1, description="Format version of the file.")
    snapshots: list[str] = Field(default_factory=list, description="Snapshot folders served.")
    exact: int = Field(default=0, description="Requests answered by an exact match.")
    canonical: int = Field(default=0, description="Requests answered by a canonical-key match.")
    learned: int = Field(default=0, description="Of the canonical matches: those that set aside names learned "
                         "volatile at record time.")
    fresh_id: int = Field(default=0, description="Of the canonical matches: those that set aside fresh random ids "
                          "(each log entry's `volatile` names the parameters).")
    fuzzy: int = Field(default=0, description="Requests answered by a fuzzy match.")
    shared: int = Field(default=0, description="Requests the episode's own snapshots missed, answered from another "
                        "task's snapshot of the same root recorded within the share window (--share-window).")
    shared_from: dict[str, int] = Field(default_factory=dict, description="The shared answers per source snapshot "
                                        "('<task>/<snapshot id>').")
    shared_sources: list[str] = Field(default_factory=list, description="The other tasks' snapshots this replay "
                                      "could answer from ('<task>/<snapshot id>', nearest first; --share-window); "
                                      "in a run, those pinned when it started.")
    miss: int = Field(default=0, description="Requests nothing matched (answered with the miss policy), and "
                      "websocket messages no recorded one answers.")
    blocked: int = Field(default=0, description="Browser background requests answered by the guard.")
    websocket: int = Field(default=0, description="Websocket handshakes refused (no recorded conversation).")
    live: int = Field(default=0, description="Misses forwarded to the live web (diagnosis only; not hermetic).")
    missed_urls: list[str] = Field(default_factory=list, description="URLs of the missed requests.")
    variant: int = Field(default=0, description="Answers recorded for other request fields than the request's "
                         "own, where the response said it was chosen by them (Vary: Accept, Accept-Language, "
                         "Cookie names ...) and no capture of the key was recorded for the request's "
                         "(each log entry's `volatile` says `vary: <fields>`).")
    again: int = Field(default=0, description="Answers past a recorded series whose answers changed: a request "
                       "recorded several times (a page polling a URL) or a websocket message sent more often "
                       "than while recording, answered with the last recorded answer again (each log entry's "
                       "`volatile` says `again: past N recorded`).")
    truncated: int = Field(default=0, description="Answers from a capture cut short while recording "
                           "(WARC-Truncated: a streamed body cut by a limit, its client or its origin).")
    truncated_urls: list[str] = Field(default_factory=list, description="'METHOD URL (reason)' of each answer "
                                      "from a truncated capture.")
    refused: dict[str, int] = Field(default_factory=dict, description="What the fast proxy's bounds refused or "
                                    "ended, by reason (connections, body-budget, timeout-head ...; docs/limits.md): "
                                    "answers that are not the snapshot's, not in the counts above.")
    store: StoreRequests | None = Field(default=None, description="For a snapshot on object storage: what the "
                                        "episode's process asked of the store while the episode ran (its "
                                        "worker's cache already warm: no GETs).")
    log: list[ReplayLogEntry] = Field(default_factory=list, description="Every request, in order.")
    config: dict[str, Any] | None = Field(default=None, description="The ReplayConfig the session ran with.")
    validity: Literal["complete", "degraded", "off-snapshot"] | None = Field(
        default=None, description="complete: no miss, no substitution, no truncated capture; degraded: misses "
        "on non-content subresources only, an answer from a truncated capture, or past a changing recorded "
        "series (again); off-snapshot: a document or content fetch missed or substituted.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        """Requests answered by the replay (guard-blocked background requests not included)."""
        return self.exact + self.canonical + self.fuzzy + self.shared + self.miss + self.websocket + self.live

    @property
    def hermetic(self) -> bool:
        """True when nothing went to the live web."""
        return self.live == 0
