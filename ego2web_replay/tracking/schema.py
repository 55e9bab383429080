"""The tracking database's schema, as an ordered list of migrations.

Each migration is a version number, a description and SQL statements. The
table ``schema_migrations(version, applied_at, description)`` records which
ones a database has had; :func:`migrate` applies the missing ones in order,
inside the caller's transaction, so a database is never left half-migrated.
Never edit a released migration: append a new one.

Tables hold no primary-key constraints: every writer replaces its rows by
deleting them by key and inserting them again in one transaction, which keeps
re-ingestion idempotent without DuckDB's index bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

__all__ = ["Migration", "MIGRATIONS", "CURRENT_VERSION", "schema_version", "migrate"]


@dataclass(frozen=True)
class Migration:
    """One step of the schema: applied once, in version order."""

    version: int
    description: str
    statements: tuple[str, ...]


_V1 = (
    """CREATE TABLE snapshots (
        task_id VARCHAR NOT NULL,
        snapshot_id VARCHAR NOT NULL,
        path VARCHAR,
        created_at TIMESTAMP,
        finished_at TIMESTAMP,
        source VARCHAR,
        start_url VARCHAR,
        pages VARCHAR,            -- JSON list of main-document URLs
        archive VARCHAR,
        exchanges INTEGER,
        payload_bytes BIGINT,
        archive_bytes BIGINT,
        ingested_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE resources (
        task_id VARCHAR NOT NULL,
        snapshot_id VARCHAR NOT NULL,
        url VARCHAR NOT NULL,
        surt VARCHAR,
        captured_at TIMESTAMP,
        method VARCHAR,
        status INTEGER,
        mime VARCHAR,
        digest VARCHAR,
        size BIGINT
    )""",
    """CREATE TABLE runs (
        run_id VARCHAR NOT NULL,
        started_at TIMESTAMP,
        suite_path VARCHAR,
        suite_sha256 VARCHAR,
        agent VARCHAR,            -- label: name or name:model
        agent_spec VARCHAR,       -- JSON AgentSpec
        modes VARCHAR,            -- JSON list
        versions VARCHAR,         -- JSON object
        machine VARCHAR,          -- JSON object
        git_commit VARCHAR,
        path VARCHAR,
        ingested_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE episodes (
        run_id VARCHAR NOT NULL,
        task_id VARCHAR NOT NULL,
        mode VARCHAR NOT NULL,
        category VARCHAR,
        agent VARCHAR,
        snapshot_id VARCHAR,
        steps INTEGER,
        end_reason VARCHAR,
        answer VARCHAR,
        error VARCHAR,
        started_at TIMESTAMP,
        finished_at TIMESTAMP,
        replay_exact INTEGER,
        replay_canonical INTEGER,
        replay_fuzzy INTEGER,
        replay_miss INTEGER,
        path VARCHAR,
        ingested_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE verdicts (
        run_id VARCHAR NOT NULL,
        task_id VARCHAR NOT NULL,
        mode VARCHAR NOT NULL,
        judge VARCHAR NOT NULL,   -- verdict file stem, e.g. ego2web
        judge_kind VARCHAR,       -- JudgeSpec.name
        judge_model VARCHAR,
        judge_spec VARCHAR,       -- JSON JudgeSpec
        success BOOLEAN,
        score DOUBLE,
        thoughts VARCHAR,
        error VARCHAR,
        judged_at TIMESTAMP,
        path VARCHAR,
        ingested_at TIMESTAMP NOT NULL
    )""",
)

_V2 = (
    """CREATE TABLE probes (
        probe_id VARCHAR NOT NULL,
        probed_at TIMESTAMP NOT NULL,
        task_id VARCHAR NOT NULL,
        snapshot_id VARCHAR,
        url VARCHAR NOT NULL,
        host VARCHAR,
        status_then INTEGER,
        status_now INTEGER,
        digest_equal BOOLEAN,
        text_similarity DOUBLE,
        url_status VARCHAR NOT NULL,   -- unchanged / changed / gone / blocked / error
        task_status VARCHAR,           -- the task's feasibility at this probe
        error VARCHAR
    )""",
)

_V3 = (
    "ALTER TABLE episodes ADD COLUMN replay_blocked INTEGER DEFAULT 0",
    "ALTER TABLE episodes ADD COLUMN replay_live INTEGER DEFAULT 0",
    "ALTER TABLE episodes ADD COLUMN missed_urls VARCHAR DEFAULT '[]'",
)

_V4 = ("ALTER TABLE episodes ADD COLUMN validity VARCHAR",)  # complete / degraded / off-snapshot (frozen)

_V5 = ("ALTER TABLE episodes ADD COLUMN input_modality VARCHAR",)  # video / keyframes / captions / none

_V6 = (
    """CREATE TABLE pair_diffs (
        run_id VARCHAR NOT NULL,          -- the live episode's run
        task_id VARCHAR NOT NULL,
        live_snapshot_id VARCHAR,         -- the live episode's own archive
        frozen_snapshot_id VARCHAR NOT NULL,
        live_at TIMESTAMP,                -- when the live archive was recorded
        diffed_at TIMESTAMP NOT NULL,
        status VARCHAR NOT NULL,          -- unchanged / changed / gone / blocked / unreachable / unknown
        resources INTEGER,
        changed INTEGER,                  -- resources not unchanged
        data VARCHAR                      -- the whole PairDiff as JSON
    )""",
    """CREATE TABLE resource_changes (
        run_id VARCHAR NOT NULL,
        task_id VARCHAR NOT NULL,
        frozen_snapshot_id VARCHAR NOT NULL,
        rank INTEGER,                     -- 0 = the likeliest cause (final page first, then severity)
        url VARCHAR NOT NULL,
        method VARCHAR,
        kind VARCHAR,                     -- document / xhr / image
        status VARCHAR NOT NULL,          -- changed / gone / new / blocked
        status_then INTEGER,
        status_now INTEGER,
        detail VARCHAR,
        final_page BOOLEAN,
        diff VARCHAR                      -- JSON: removed/added text lines, changed JSON fields
    )""",
)

_V7 = (  # run --repeats: which run of a task and mode an episode (and its verdicts) is; 0 for older rows
    "ALTER TABLE episodes ADD COLUMN repeat_index INTEGER DEFAULT 0",
    "ALTER TABLE verdicts ADD COLUMN repeat_index INTEGER DEFAULT 0",
)

_V8 = (  # answers that set volatile values aside (learned at record time, fresh ids), with their parameters
    "ALTER TABLE episodes ADD COLUMN replay_learned INTEGER DEFAULT 0",
    "ALTER TABLE episodes ADD COLUMN replay_fresh_id INTEGER DEFAULT 0",
    "ALTER TABLE episodes ADD COLUMN set_aside VARCHAR DEFAULT '{}'",
)

_V9 = (  # answers from other tasks' snapshots of the suite (--share-window), with their sources
    "ALTER TABLE episodes ADD COLUMN replay_shared INTEGER DEFAULT 0",
    "ALTER TABLE episodes ADD COLUMN shared_from VARCHAR DEFAULT '{}'",
)

_V10 = (  # the snapshot each task's frozen episodes replay, pinned when the run started (run.json's snapshots)
    "ALTER TABLE runs ADD COLUMN pinned_snapshots VARCHAR DEFAULT '{}'",
)

_V11 = (  # the shared captures' sources pinned when the run started (run.json's shared_snapshots); NULL: none pinned
    "ALTER TABLE runs ADD COLUMN shared_snapshots VARCHAR DEFAULT NULL",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "snapshots, resources, runs, episodes, verdicts", _V1),
    Migration(2, "drift probes", _V2),
    Migration(3, "episode blocked/live counts and missed URLs", _V3),
    Migration(4, "episode validity (complete / degraded / off-snapshot)", _V4),
    Migration(5, "episode input modality", _V5),
    Migration(6, "pair diffs of live archives against frozen snapshots", _V6),
    Migration(7, "episode and verdict repeat index (run --repeats)", _V7),
    Migration(8, "episode answers that set volatile values aside (learned, fresh ids)", _V8),
    Migration(9, "episode answers from shared captures (other tasks' snapshots)", _V9),
    Migration(10, "the snapshots a run pinned when it started (task id -> snapshot id)", _V10),
    Migration(11, "the shared captures' sources a run pinned when it started (task id -> snapshot id)", _V11),
)
CURRENT_VERSION = MIGRATIONS[-1].version

_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER NOT NULL,
    applied_at TIMESTAMP NOT NULL,
    description VARCHAR NOT NULL
)"""


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The highest migration applied to the database (0 for an empty one)."""
    try:
        row = con.execute("SELECT max(version) FROM schema_migrations").fetchone()
    except duckdb.CatalogException:
        return 0
    return int(row[0]) if row and row[0] is not None else 0


def missing_migrations(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Versions of this program's migrations that the database's ledger lacks."""
    try:
        done = {int(row[0]) for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
    except duckdb.CatalogException:
        done = set()
    return [m.version for m in MIGRATIONS if m.version not in done]


def migrate(con: duckdb.DuckDBPyConnection, target: int | None = None) -> list[int]:
    """Apply every migration not yet in the ledger, in version order, up to ``target``.

    Versions are reserved per change and may land out of order (6 before 4): a
    database at version 6 still gets 4 when it arrives. Runs inside the
    caller's transaction. Returns the versions applied.
    """
    target = CURRENT_VERSION if target is None else target
    con.execute(_LEDGER)
    missing = set(missing_migrations(con))
    applied: list[int] = []
    for m in MIGRATIONS:
        if m.version in missing and m.version <= target:
            for sql in m.statements:
                con.execute(sql)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [m.version, datetime.now(UTC).replace(tzinfo=None), m.description],
            )
            applied.append(m.version)
    return applied
