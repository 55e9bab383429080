"""Grow a snapshot: merge the captures of other recordings or live-run archives of the same task.

``snapshot extend SNAPSHOT SOURCE...`` writes a NEW snapshot of the task (the
base is never modified) holding every capture of the base, then, source by
source, each capture whose request the merged snapshot does not hold yet
(by default the same method and SURT key; the CLI uses replay's canonical
match key), so replay always prefers the base's capture of a request. A capture
recorded more than ``window`` before or after the base's capture time is not
merged, so that the replay still shows one consistent moment of the site.
``provenance.json`` says where every capture came from: each source's snapshot and, for
a live-run archive, its origin (the run, the episode, the agent and its settings, e.g. an
explorer's seed); the manifest's notes name each source's origin and what it gave.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..atomic import atomic_write_text
from ..errors import SnapshotError
from .cdxj import CdxjEntry
from .reader import ArchiveRecord
from .snapshot import Snapshot, SnapshotWriter
from .warc import Compression
from .wsrecords import conversation_record

__all__ = [
    "ExtendResult", "SourceReport", "extend_snapshot", "find_sources", "live_origin", "parse_window", "surt_request_key", "PROVENANCE",
    "FANOUT", "fanout_origin",
]

PROVENANCE = "provenance.json"
FANOUT = "fanout.json"
"""In a fan-out archive (``record --fanout``): the page each fetched link was found on."""
_SERVABLE = ("response", "revisit", "resource")


@dataclass
class SourceReport:
    """What one source gave."""

    path: str
    snapshot_id: str
    source: str
    merged: int = 0
    already_held: int = 0
    outside_window: int = 0
    unresolved_revisits: int = 0
    origin: dict[str, object] | None = None
    """For a live-run archive: ``run_id``, ``episode``, ``repeat``, ``agent`` and ``agent_settings``."""

    def capture_label(self, url: str) -> str:
        """Who recorded this capture: ``fanout from <page>`` for a fan-out link, else :attr:`label`."""
        pages = (self.origin or {}).get("from")
        page = pages.get(url) if isinstance(pages, dict) else None
        return f"fanout from {page}" if page else self.label

    @property
    def label(self) -> str:
        """Who recorded it, in a few words: ``explorer seed=3, run r1 episode live`` or the snapshot id."""
        o = self.origin
        if not o:
            return f"{self.source} snapshot {self.snapshot_id}"
        if o.get("fanout"):
            return f"fanout snapshot {self.snapshot_id}"
        settings = o.get("agent_settings") or {}
        seed = f" seed={settings['seed']}" if isinstance(settings, dict) and settings.get("seed") is not None else ""
        return f"{o.get('agent')}{seed}, run {o.get('run_id')} episode {o.get('episode')}"


@dataclass
class ExtendResult:
    path: Path
    snapshot_id: str
    base_captures: int
    sources: list[SourceReport] = field(default_factory=list)

    @property
    def merged(self) -> int:
        return sum(s.merged for s in self.sources)


_MAX_WINDOW_S = 36_500 * 86400  # a hundred years: past any capture, and far inside what a timedelta holds


def parse_window(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``1d`` or a number of seconds; a clear error otherwise."""
    value = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    scale = units.get(value[-1:], None)
    number = value[:-1] if scale else value
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise SnapshotError(f"invalid --window {text!r}; use e.g. 90s, 30m, 2h or 1d") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise SnapshotError(f"invalid --window {text!r}: it must be a finite length of time, not negative")
    if seconds > _MAX_WINDOW_S:
        raise SnapshotError(f"invalid --window {text!r}: at most {_MAX_WINDOW_S // 86400} days")
    return timedelta(seconds=seconds)


def find_sources(paths: Sequence[Path], task_id: str) -> list[Path]:
    """Snapshot folders of ``task_id`` named directly or found inside run/episode folders."""
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / "manifest.json").is_file():
            found.append(p)
            continue
        if not p.exists():
            raise SnapshotError(f"{p}: no such snapshot, episode or run folder")
        inner = sorted({m.parent for m in p.rglob("manifest.json") if m.parent.parent.name == task_id})
        if not inner:
            raise SnapshotError(f"{p}: holds no snapshot of task {task_id!r} (live runs archive theirs under "
                                "episodes/<task>/live/snapshots/)")
        found.extend(inner)
    return found


def live_origin(snapshot_path: Path) -> dict[str, object] | None:
    """The run, episode and agent of a live-run archive (``<run>/episodes/<task>/<episode>/snapshots/<task>/<id>``);
    None for a snapshot that is not inside an episode folder."""
    from ..models import load_run, load_trajectory, parse_episode_folder

    path = Path(snapshot_path).resolve()
    if len(path.parents) < 6 or path.parents[4].name != "episodes":
        return None
    episode, run_dir = path.parents[2], path.parents[5]
    parsed = parse_episode_folder(episode.name)
    if parsed is None or not (episode / "trajectory.json").is_file():
        return None
    try:
        traj = load_trajectory(episode)
        agent = load_run(run_dir).agent_name if (run_dir / "run.json").is_file() else None
    except Exception:  # noqa: BLE001 - provenance is what can be known; an unreadable episode gives none
        return None
    return {"run_id": run_dir.name, "run_dir": str(run_dir), "episode": episode.name, "repeat": parsed[1],
            "agent": agent or traj.agent.plugin or traj.agent.name, "agent_settings": dict(traj.agent.settings or {})}


def fanout_origin(snapshot_path: Path) -> dict[str, object] | None:
    """A fan-out archive's origin (``fanout``, and ``from``: the page of each fetched link); None otherwise."""
    try:
        data = json.loads((Path(snapshot_path) / FANOUT).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    pages = data.get("from") if isinstance(data, dict) else None
    return {"fanout": True, "from": dict(pages)} if isinstance(pages, dict) else None


def _stamp(ts: str) -> datetime | None:
    try:
        return datetime.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _raw(record: ArchiveRecord) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in record.headers.items())
    return b"WARC/1.1\r\n" + head.encode("utf-8") + b"\r\n" + record.block + b"\r\n\r\n"


def _requests_by_target(snap: Snapshot) -> dict[str, ArchiveRecord]:
    """Request records keyed by the record id they are concurrent to."""
    out: dict[str, ArchiveRecord] = {}
    for record in snap.records():
        if record.rec_type == "request":
            for target in record.concurrent_to:
                out[target] = record
    return out


def _copy(writer: SnapshotWriter, snap: Snapshot, entry: CdxjEntry, requests: dict[str, ArchiveRecord]) -> None:
    record = snap.record(entry)
    rid = record.record_id or ""
    writer.writer.write_raw(_raw(record), record_type=record.rec_type, record_id=rid, url=record.url or "",
                            payload_digest=record.payload_digest)
    request = requests.get(rid)
    if request is not None:
        writer.writer.write_raw(_raw(request), record_type="request", record_id=request.record_id or "",
                                url=request.url or "", payload_digest=request.payload_digest)
    talk = conversation_record(snap, entry) if entry.status == 101 else None
    if talk is not None:  # a websocket's conversation goes with its handshake, right after it
        writer.writer.write_raw(_raw(talk), record_type="metadata", record_id=talk.record_id or "",
                                url=talk.url or "", payload_digest=None)


def surt_request_key(entry: CdxjEntry) -> str:
    """The default "same request" test: method and SURT key (sorted query and POST form included)."""
    return f"{entry.method.upper()} {entry.surt}"


def extend_snapshot(base_path: Path, sources: Sequence[Path], *, window: timedelta | None = None,
                    root: Path | None = None, request_key: Callable[[CdxjEntry], str] = surt_request_key
                    ) -> ExtendResult:
    """Write a new snapshot of the base's task: the base plus the sources' new captures within ``window``.

    ``request_key`` says when two captures answer the same request (the CLI passes replay's canonical
    match key, so a capture differing only by a cache-buster is not merged beside the base's).
    """
    base = Snapshot.open(Path(base_path))
    task_id = base.manifest.task_id
    moment = base.manifest.created_at
    snaps = [Snapshot.open(p) for p in find_sources(sources, task_id)]
    for s in snaps:
        if s.manifest.task_id != task_id:
            raise SnapshotError(f"{s.path}: a snapshot of task {s.manifest.task_id!r}, not of {task_id!r}")
        if s.path.resolve() == base.path.resolve():
            raise SnapshotError(f"{s.path}: is the base snapshot itself")
    target_root = Path(root) if root is not None else base.path.parent.parent
    writer = SnapshotWriter(target_root, task_id, compression=_compression(base), source="extend",
                            start_url=base.manifest.start_url,
                            settings={**base.manifest.settings, "extended_from": base.manifest.snapshot_id},
                            clock=lambda: moment.astimezone(UTC).replace(tzinfo=None))
    # revisits copied from a deduplicated snapshot keep resolving through its shared stores
    stores = {(s.path / rel).resolve() for s in [base, *snaps] for rel in s.manifest.shared}
    writer.shared = sorted(os.path.relpath(store, writer.path.resolve()) for store in stores)
    try:
        result, provenance = _merge(writer, base, snaps, window, moment, request_key)
        for page in base.manifest.pages:
            writer.add_page(page)
        atomic_write_text(writer.path / PROVENANCE, json.dumps(provenance, indent=2) + "\n")
        writer.extra_files.append(PROVENANCE)
        writer.add_note(f"extended from {base.manifest.snapshot_id} with {result.merged} captures of "
                        f"{sum(1 for s in result.sources if s.merged)} source(s)")
        for src in result.sources:
            writer.add_note(f"source {src.snapshot_id} ({src.label}): merged {src.merged}, already held "
                            f"{src.already_held}, outside the window {src.outside_window}")
        writer.finalize()
    except BaseException:
        writer.writer.close()
        raise
    result.path, result.snapshot_id = writer.path, writer.snapshot_id
    return result


def _compression(snap: Snapshot) -> Compression:
    name = snap.archive_path.name
    return "zst" if name.endswith(".zst") else "gz" if name.endswith(".gz") else "none"


def _merge(writer: SnapshotWriter, base: Snapshot, snaps: list[Snapshot], window: timedelta | None,
           moment: datetime, key: Callable[[CdxjEntry], str]) -> tuple[ExtendResult, dict[str, object]]:
    held: set[str] = set()
    digests: set[str] = set()
    captures: list[dict[str, object]] = []
    base_entries = [e for e in base.entries() if e.record_type in _SERVABLE]
    requests = _requests_by_target(base)
    for entry in sorted(base_entries, key=lambda e: (e.timestamp, e.offset)):
        _copy(writer, base, entry, requests)
        held.add(key(entry))
        digests.add(entry.digest)
        captures.append({"url": entry.url, "method": entry.method, "timestamp": entry.timestamp, "from": "base"})
    result = ExtendResult(Path(), "", len(base_entries))
    for snap in snaps:
        report = SourceReport(str(snap.path), snap.manifest.snapshot_id, snap.manifest.source,
                              origin=live_origin(snap.path) or fanout_origin(snap.path))
        requests = _requests_by_target(snap)
        for entry in sorted((e for e in snap.entries() if e.record_type in _SERVABLE),
                            key=lambda e: (e.timestamp, e.offset)):
            when = _stamp(entry.timestamp)
            if window is not None and (when is None or abs(when - moment) > window):
                report.outside_window += 1
                continue
            if key(entry) in held:
                report.already_held += 1
                continue
            if entry.record_type == "revisit" and entry.digest not in digests:
                report.unresolved_revisits += 1
                continue
            _copy(writer, snap, entry, requests)
            held.add(key(entry))
            digests.add(entry.digest)
            report.merged += 1
            captures.append({"url": entry.url, "method": entry.method, "timestamp": entry.timestamp,
                             "from": snap.manifest.snapshot_id, "source_path": str(snap.path),
                             "by": report.capture_label(entry.url)})
        result.sources.append(report)
    provenance: dict[str, object] = {
        "version": 1, "base": {"path": str(base.path), "snapshot_id": base.manifest.snapshot_id,
                               "captured_at": moment.isoformat()},
        "window_s": window.total_seconds() if window is not None else None,
        "sources": [{**vars(s), "label": s.label} for s in result.sources], "captures": captures}
    return result, provenance
