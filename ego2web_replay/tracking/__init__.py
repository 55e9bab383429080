"""Tracking: the DuckDB database of snapshots, runs, episodes, verdicts and drift probes,
live-versus-frozen comparison, drift reports and the static HTML report."""

from __future__ import annotations

from .db import read_connection, write_connection
from .ingest import (
    IngestSummary,
    ingest,
    record_episode,
    record_run,
    record_snapshot,
    record_verdict,
)
from .schema import CURRENT_VERSION, MIGRATIONS

__all__ = [
    "CURRENT_VERSION",
    "MIGRATIONS",
    "IngestSummary",
    "ingest",
    "read_connection",
    "record_episode",
    "record_run",
    "record_snapshot",
    "record_verdict",
    "write_connection",
]
