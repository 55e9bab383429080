"""Drift probes in the database: recording probe results and reading them back as time series.

A *probe* (one ``probe_id``) re-visits a snapshot's recorded pages live and
yields one :class:`ProbeResult` per URL. "Changed since capture" means a URL
whose status is ``changed``, ``gone`` or ``blocked``; URLs whose probe failed
(``error``) are left out of the fractions and counted apart.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime
from typing import Literal
from urllib.parse import urlsplit

import duckdb
from pydantic import BaseModel, Field, model_validator

from .db import db_time, read_connection, write_connection

__all__ = [
    "UrlStatus",
    "CHANGED_STATUSES",
    "ProbeResult",
    "TaskProbe",
    "DriftPoint",
    "DriftSeries",
    "record_probe",
    "latest_task_status",
    "drift_timeseries",
    "unfetched_status",
]

UrlStatus = Literal["unchanged", "changed", "gone", "blocked", "error"]
Scope = Literal["overall", "site", "task"]
CHANGED_STATUSES = ("changed", "gone", "blocked")
_SEVERITY = {"unchanged": 0, "changed": 1, "gone": 2, "blocked": 3}


class ProbeResult(BaseModel):
    """One URL of one task, probed live at one time (a row of the ``probes`` table)."""

    probe_id: str = Field(description="Id of the probe run; all URLs probed together share it.")
    probed_at: datetime
    task_id: str
    snapshot_id: str | None = None
    url: str
    host: str | None = Field(default=None, description="Site; derived from the URL when not given.")
    status_then: int | None = Field(default=None, description="HTTP status at capture.")
    status_now: int | None = Field(default=None, description="HTTP status now.")
    digest_equal: bool | None = Field(default=None, description="Payload digest unchanged.")
    text_similarity: float | None = Field(default=None, ge=0, le=1, description="Visible-text similarity 0..1.")
    url_status: UrlStatus
    task_status: str | None = Field(default=None, description="The task's feasibility at this probe.")
    error: str | None = None

    @model_validator(mode="after")
    def _host(self) -> ProbeResult:
        if not self.host:
            self.host = urlsplit(self.url).hostname or ""
        return self


class TaskProbe(BaseModel):
    """The latest probe status of one task."""

    task_id: str
    probe_id: str
    probed_at: datetime
    status: str


class DriftPoint(BaseModel):
    """What fraction of a scope's URLs had changed since capture at one probe."""

    scope: Scope
    key: str = Field(description="'all', a host, or a task id.")
    probe_id: str
    probed_at: datetime
    urls: int
    changed: int
    gone: int
    blocked: int
    errors: int
    fraction_changed: float | None = Field(description="(changed+gone+blocked) / (urls-errors); None if none probed.")
    task_status: str | None = None


class DriftSeries(BaseModel):
    """Every probe ever made, as time series per task, per site and overall."""

    probes: int
    points: list[DriftPoint]

    def series(self, scope: str) -> dict[str, list[DriftPoint]]:
        """Points of one scope grouped by key, each in time order."""
        out: dict[str, list[DriftPoint]] = {}
        for p in self.points:
            if p.scope == scope:
                out.setdefault(p.key, []).append(p)
        return out


def unfetched_status(errors: Iterable[str | None]) -> str:
    """The status of a task none of whose URLs could be fetched: ``unreachable`` when every failure
    says the site could not be reached (connection refused, DNS, timeout), else ``unknown`` (a URL
    the guard did not let the probe ask, or an unreadable capture, is no evidence either way)."""
    errs = list(errors)
    return "unreachable" if errs and all((e or "").startswith("unreachable") for e in errs) else "unknown"


def _task_status(statuses: Iterable[str]) -> str:
    """A task's status from its URLs': the most severe probed one (blocked > gone > changed >
    unchanged), ignoring failed probes; ``unknown`` when every probe failed."""
    probed = [s for s in statuses if s != "error"]
    return max(probed, key=lambda s: _SEVERITY.get(s, 0)) if probed else "unknown"


def record_probe(db_path: str | os.PathLike[str], rows: Iterable[ProbeResult]) -> int:
    """Store probe results in one transaction; re-recording a (probe, task, URL) replaces it."""
    items = list(rows)
    with write_connection(db_path) as con:
        for r in items:
            con.execute("DELETE FROM probes WHERE probe_id = ? AND task_id = ? AND url = ?",
                        [r.probe_id, r.task_id, r.url])
        if items:
            con.executemany(
                "INSERT INTO probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[r.probe_id, db_time(r.probed_at), r.task_id, r.snapshot_id, r.url, r.host, r.status_then,
                  r.status_now, r.digest_equal, r.text_similarity, r.url_status, r.task_status, r.error]
                 for r in items],
            )
    return len(items)


def _probe_rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute(
        """SELECT probe_id, min(probed_at) OVER (PARTITION BY probe_id) AS first_at, task_id, host, url_status, task_status
           FROM probes ORDER BY first_at, probe_id, task_id, url"""
    ).fetchall()


def latest_task_status(con: duckdb.DuckDBPyConnection) -> dict[str, TaskProbe]:
    """Each probed task's status at its latest probe."""
    by_probe: dict[tuple[str, str], TaskProbe] = {}
    urls: dict[tuple[str, str], list[str]] = {}
    for probe_id, at, task_id, _host, url_status, task_status in _probe_rows(con):
        key = (task_id, probe_id)
        urls.setdefault(key, []).append(url_status)
        if key not in by_probe or task_status:
            by_probe[key] = TaskProbe(task_id=task_id, probe_id=probe_id, probed_at=at,
                                      status=task_status or "")
    latest: dict[str, TaskProbe] = {}
    for key, tp in by_probe.items():
        if not tp.status:
            tp.status = _task_status(urls[key])
        cur = latest.get(tp.task_id)
        if cur is None or (tp.probed_at, tp.probe_id) > (cur.probed_at, cur.probe_id):
            latest[tp.task_id] = tp
    return latest


def drift_timeseries(db_path: str | os.PathLike[str]) -> DriftSeries:
    """Fraction of URLs changed since capture, per probe, for every task, every site and overall."""
    with read_connection(db_path) as con:
        rows = _probe_rows(con)
    groups: dict[tuple[Scope, str, str], dict] = {}
    for probe_id, at, task_id, host, url_status, task_status in rows:
        scopes: tuple[tuple[Scope, str], ...] = (("overall", "all"), ("site", host or ""), ("task", task_id))
        for scope, key in scopes:
            g = groups.setdefault((scope, key, probe_id), {"at": at, "statuses": [], "task_status": None})
            g["statuses"].append(url_status)
            if scope == "task" and task_status:
                g["task_status"] = task_status
    points = []
    for (scope, key, probe_id), g in groups.items():
        st: list[str] = g["statuses"]
        errors = st.count("error")
        changed = sum(st.count(s) for s in CHANGED_STATUSES)
        denom = len(st) - errors
        points.append(DriftPoint(
            scope=scope, key=key, probe_id=probe_id, probed_at=g["at"], urls=len(st), changed=st.count("changed"),
            gone=st.count("gone"), blocked=st.count("blocked"), errors=errors,
            fraction_changed=changed / denom if denom else None,
            task_status=(g["task_status"] or _task_status(st)) if scope == "task" else None,
        ))
    order = {"overall": 0, "site": 1, "task": 2}
    points.sort(key=lambda p: (order[p.scope], p.key, p.probed_at, p.probe_id))
    return DriftSeries(probes=len({r[0] for r in rows}), points=points)
