"""Why did a task flip? The changes at the time of that live run, and where that knowledge comes from.

For a flip (a task that succeeded in one mode only) the evidence is taken in
this order:

1. ``live-archive``: the pair diff of the live episode's own archive against
   the snapshot the frozen episode replayed: stored by ``drift diff``, else
   computed from the episode and snapshot folders. It shows the site exactly
   as the agent saw it.
2. ``probe``: only when there is no live archive to diff, the drift probe of
   the task taken nearest to the live run, and only if it was taken within
   ``window`` of it (before or after). A probe that could fetch nothing gives
   ``unreachable`` when the site could not be reached, else ``unknown``; never
   ``unchanged``.
3. ``none``: no evidence; the status is ``unknown``.

Because a probe counts only within the window of a run, and the live archive
always wins over probes, a probe taken later never rewrites how an older run
is attributed. With repeats, a flip is explained by the repeat whose outcome it
is about (:attr:`~.compare.Flip.live_repeat`): its own archive, never another
repeat's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import duckdb
from pydantic import BaseModel, Field

from ..errors import Ego2WebError
from .changes import FieldChange
from .drift import unfetched_status
from .pairdiff import PairDiff, ResourceDiff, diff_pair

__all__ = ["DEFAULT_PROBE_WINDOW", "AttributionSource", "ChangedResource", "Attribution", "attribute",
           "attach_attributions"]

DEFAULT_PROBE_WINDOW = timedelta(hours=24)
AttributionSource = Literal["live-archive", "probe", "none"]
_PROBE_SEVERITY = {"unchanged": 0, "changed": 2, "gone": 3, "blocked": 4}


class ChangedResource(BaseModel):
    """One resource that differed at the time of the live run."""

    url: str
    status: str = Field(description="changed, gone, new, blocked or unreachable.")
    detail: str = ""
    kind: str | None = None
    status_then: int | None = None
    status_now: int | None = None
    final_page: bool = False
    removed: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    fields: list[FieldChange] = Field(default_factory=list)

    @classmethod
    def of(cls, r: ResourceDiff) -> ChangedResource:
        return cls(url=r.url, status=r.status, detail=r.detail, kind=r.kind, status_then=r.status_then,
                   status_now=r.status_now, final_page=r.final_page, removed=r.removed, added=r.added,
                   fields=r.fields)


class Attribution(BaseModel):
    """What changed for one flip, and the source of that knowledge."""

    source: AttributionSource
    status: str = Field(description="unchanged, changed, gone, blocked, unreachable or unknown.")
    at: datetime | None = Field(default=None, description="When the evidence was taken.")
    probe_id: str | None = None
    frozen_snapshot_id: str | None = None
    resources: list[ChangedResource] = Field(default_factory=list, description="Likeliest cause first.")
    note: str | None = None


def _aware(ts: datetime | None) -> datetime | None:
    return None if ts is None else (ts if ts.tzinfo else ts.replace(tzinfo=UTC))


def _episode(con: duckdb.DuckDBPyConnection, run_id: str, task_id: str, mode: str,
             repeat: int) -> tuple[Any, ...] | None:
    """The episode of that repeat (else the task's first in that mode, for a database without repeats)."""
    return con.execute("SELECT path, snapshot_id, started_at, finished_at FROM episodes "
                       "WHERE run_id = ? AND task_id = ? AND mode = ? "
                       "ORDER BY repeat_index <> ?, repeat_index LIMIT 1",
                       [run_id, task_id, mode, repeat]).fetchone()


def _from_files(con: duckdb.DuckDBPyConnection, live_path: str | None, frozen_path: str | None,
                task_id: str, live_run: str) -> PairDiff | None:
    from ..models import load_trajectory
    from .episode_diff import frozen_snapshot, live_archive

    if not live_path or not frozen_path:
        return None
    try:
        live_ep, frozen_ep = Path(live_path), Path(frozen_path)
        archive = live_archive(live_ep, load_trajectory(live_ep))
        ftraj = load_trajectory(frozen_ep)
        snap = frozen_snapshot(frozen_ep, ftraj)
        if snap is None and ftraj.snapshot_id:
            row = con.execute("SELECT path FROM snapshots WHERE task_id = ? AND snapshot_id = ?",
                              [task_id, ftraj.snapshot_id]).fetchone()
            snap = Path(row[0]) if row and row[0] and Path(row[0]).is_dir() else None
        if archive is None or snap is None:
            return None
        return diff_pair(archive, snap, final_url=load_trajectory(live_ep).final_url, task_id=task_id,
                         run_id=live_run)
    except Ego2WebError:
        return None


def _from_probe(con: duckdb.DuckDBPyConnection, task_id: str, start: datetime, end: datetime,
                window: timedelta) -> Attribution | None:
    rows = con.execute(
        "SELECT probe_id, min(probed_at) OVER (PARTITION BY probe_id) AS first_at, url, url_status, status_then, "
        "status_now, error, text_similarity FROM probes WHERE task_id = ? ORDER BY first_at, probe_id, url",
        [task_id]).fetchall()
    by_probe: dict[str, list[tuple[Any, ...]]] = {}
    for r in rows:
        by_probe.setdefault(r[0], []).append(r)
    best: tuple[timedelta, str] | None = None
    for probe_id, items in by_probe.items():
        at = _aware(items[0][1])
        assert at is not None
        gap = start - at if at < start else (at - end if at > end else timedelta(0))
        if gap <= window and (best is None or (gap, probe_id) < best):
            best = (gap, probe_id)
    if best is None:
        return None
    items = by_probe[best[1]]
    probed = [r for r in items if r[3] != "error"]
    changed = sorted((r for r in probed if r[3] != "unchanged"), key=lambda r: -_PROBE_SEVERITY.get(r[3], 1))
    status = (max((r[3] for r in probed), key=lambda s: _PROBE_SEVERITY.get(s, 1)) if probed
              else unfetched_status(r[6] for r in items))
    resources = [ChangedResource(url=r[2], status=r[3], status_then=r[4], status_now=r[5],
                                 detail=r[6] or (f"text similarity {r[7]:.2f}" if r[7] is not None else ""))
                 for r in changed]
    note = None if probed else (f"the probe could fetch none of the task's {len(items)} URL(s)"
                                + (": the site could not be reached" if status == "unreachable" else ""))
    return Attribution(source="probe", status=status, at=_aware(items[0][1]), probe_id=best[1], resources=resources,
                       note=note)


def attribute(con: duckdb.DuckDBPyConnection, task_id: str, live_run: str, frozen_run: str,
              window: timedelta = DEFAULT_PROBE_WINDOW, *, live_repeat: int = 0,
              frozen_repeat: int = 0) -> Attribution:
    """The attribution of one live/frozen pair (see the module docstring): the live episode of
    ``live_repeat`` against the frozen episode of ``frozen_repeat``. A stored pair diff counts
    only when it was made from that live episode's own archive."""
    from .pairdiff_store import load_pair_diff

    live = _episode(con, live_run, task_id, "live", live_repeat)
    frozen = _episode(con, frozen_run, task_id, "frozen", frozen_repeat)
    frozen_snapshot_id = frozen[1] if frozen else None
    diff = load_pair_diff(con, live_run, task_id, frozen_snapshot_id) if frozen_snapshot_id else None
    if diff is not None and live is not None and live[1] and diff.live_snapshot_id != live[1]:
        diff = None  # another repeat's archive: not what this live episode saw
    if diff is None:
        diff = _from_files(con, live[0] if live else None, frozen[0] if frozen else None, task_id, live_run)
    if diff is not None:
        return Attribution(source="live-archive", status=diff.status, at=_aware(diff.live_at),
                           frozen_snapshot_id=diff.frozen_snapshot_id,
                           resources=[ChangedResource.of(r) for r in diff.changes()])
    start = _aware(live[2]) if live is not None else None
    if live is not None and start is not None:
        end = _aware(live[3]) or start
        probe = _from_probe(con, task_id, start, end, window)
        if probe is not None:
            return probe
        note = f"no live archive, and no drift probe within {window} of the live run"
    else:
        note = "no live archive, and the live run has no start time"
    return Attribution(source="none", status="unknown", note=note)


def attach_attributions(db_path: Any, groups: list[Any], window: timedelta = DEFAULT_PROBE_WINDOW) -> None:
    """Fill in every flip of ``groups`` (compare's groups) with its attribution."""
    from .db import read_connection

    flips = [f for g in groups for f in g.flips]
    if not flips:
        return
    cache: dict[tuple[str, str, str, int, int], Attribution] = {}
    with read_connection(db_path) as con:
        for f in flips:
            key = (f.task_id, f.live_run, f.frozen_run, f.live_repeat, f.frozen_repeat)
            if key not in cache:
                cache[key] = attribute(con, *key[:3], window=window, live_repeat=key[3], frozen_repeat=key[4])
            a = cache[key]
            f.attribution = a
            f.drift_status = a.status
            f.probed_at = a.at if a.source == "probe" else None

