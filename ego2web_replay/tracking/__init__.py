"""Tracking: the DuckDB database of snapshots, runs, episodes, verdicts and drift probes,
live-versus-frozen comparison, drift reports and the static HTML report.

Writers (``record_*``, :func:`record_probe`) are one transaction each, idempotent, and
safe to call from several processes at once (see :mod:`.db` for the locking strategy).
"""

from __future__ import annotations

from .compare import Comparison, compare
from .db import read_connection, write_connection
from .drift import DriftSeries, ProbeResult, drift_timeseries, latest_task_status, record_probe
from .ingest import (
    IngestSummary,
    ingest,
    record_episode,
    record_run,
    record_snapshot,
    record_verdict,
)
from .report import ReportSummary, build_report
from .schema import CURRENT_VERSION, MIGRATIONS

__all__ = [
    "CURRENT_VERSION",
    "MIGRATIONS",
    "Comparison",
    "DriftSeries",
    "IngestSummary",
    "ProbeResult",
    "ReportSummary",
    "build_report",
    "compare",
    "drift_timeseries",
    "ingest",
    "latest_task_status",
    "read_connection",
    "record_episode",
    "record_probe",
    "record_run",
    "record_snapshot",
    "record_verdict",
    "write_connection",
]
