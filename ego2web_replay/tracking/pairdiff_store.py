"""Pair diffs in the tracking database (tables ``pair_diffs`` and ``resource_changes``).

A pair is keyed by (live run, task, frozen snapshot); storing it again
replaces it. ``pair_diffs.data`` keeps the whole :class:`PairDiff` as JSON, and
``resource_changes`` one row per resource that is not unchanged, for queries.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import duckdb

from .db import db_time, write_connection
from .pairdiff import PairDiff, dumps

__all__ = ["record_pair_diffs", "load_pair_diff"]


def record_pair_diffs(db_path: str | os.PathLike[str], diffs: Iterable[PairDiff]) -> int:
    """Store pair diffs in one transaction; returns how many."""
    items = [d for d in diffs if d.run_id]
    with write_connection(db_path) as con:
        for d in items:
            key = [d.run_id, d.task_id, d.frozen_snapshot_id]
            con.execute("DELETE FROM pair_diffs WHERE run_id = ? AND task_id = ? AND frozen_snapshot_id = ?", key)
            con.execute("DELETE FROM resource_changes WHERE run_id = ? AND task_id = ? AND frozen_snapshot_id = ?", key)
            counts = d.counts()
            con.execute("INSERT INTO pair_diffs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                d.run_id, d.task_id, d.live_snapshot_id, d.frozen_snapshot_id, db_time(d.live_at), db_time(d.diffed_at),
                d.status, len(d.resources), len(d.resources) - counts["unchanged"], dumps(d)])
            rows = [[d.run_id, d.task_id, d.frozen_snapshot_id, rank, r.url, r.method, r.kind, r.status, r.status_then,
                     r.status_now, r.detail, r.final_page,
                     json.dumps({"removed": r.removed, "added": r.added,
                                 "fields": [f.model_dump(mode="json") for f in r.fields]})]
                    for rank, r in enumerate(d.changes())]
            if rows:
                con.executemany("INSERT INTO resource_changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(items)


def load_pair_diff(con: duckdb.DuckDBPyConnection, run_id: str, task_id: str,
                   frozen_snapshot_id: str | None = None) -> PairDiff | None:
    """The stored pair diff of a live run's task (against ``frozen_snapshot_id`` when given), newest first."""
    sql = "SELECT data FROM pair_diffs WHERE run_id = ? AND task_id = ?"
    args = [run_id, task_id]
    if frozen_snapshot_id:
        sql += " AND frozen_snapshot_id = ?"
        args.append(frozen_snapshot_id)
    row = con.execute(sql + " ORDER BY diffed_at DESC LIMIT 1", args).fetchone()
    return PairDiff.model_validate_json(row[0]) if row else None
