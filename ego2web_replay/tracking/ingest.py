"""Loading snapshot and run folders into the tracking database.

The files stay the source of truth: every row here can be rebuilt from them.
Each ``record_*`` function is one transaction (all its rows or none) and is
idempotent: it deletes the rows it owns by key and inserts them again, so
re-ingesting replaces and never duplicates. ``record``, ``run`` and ``judge``
call them as they go; :func:`ingest` walks any mix of snapshot roots,
snapshot folders, run roots and run folders.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import duckdb
from pydantic import BaseModel, Field

from ..errors import ArchiveError, Ego2WebError, TrackingError
from ..models import (
    RUN_MANIFEST,
    AgentSpec,
    IndexEntry,
    RunManifest,
    SnapshotManifest,
    TaskSuite,
    Trajectory,
    Verdict,
    load_tasks,
    load_trajectory,
    parse_episode_folder,
    read_model,
)
from ..validity import episode_validity, set_aside
from .db import db_time, write_connection

__all__ = [
    "SourceFileError",
    "IngestSummary",
    "agent_label",
    "parse_cdxj",
    "read_run_manifest",
    "run_id_of",
    "run_suite",
    "record_snapshot",
    "record_run",
    "record_episode",
    "record_verdict",
    "ingest",
]

PathLike = str | os.PathLike[str]


class SourceFileError(TrackingError):
    """A snapshot or run file to ingest is missing or malformed (the database is fine)."""


class IngestSummary(BaseModel):
    """What :func:`ingest` loaded."""

    snapshots: int = 0
    resources: int = 0
    runs: int = 0
    episodes: int = 0
    verdicts: int = 0
    warnings: list[str] = Field(default_factory=list)


def agent_label(spec: AgentSpec) -> str:
    """The name agents are compared under: ``name`` or ``name:model``."""
    return f"{spec.name}:{spec.model}" if spec.model else spec.name


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


# -- parsing -----------------------------------------------------------------------------


def parse_cdxj(path: PathLike) -> list[IndexEntry]:
    """The entries of a CDXJ index (read by the snapshot library); a malformed line raises
    :class:`SourceFileError` naming it."""
    from ..snapshots.cdxj import read_index

    try:
        return read_index(Path(path))
    except ArchiveError as e:
        raise SourceFileError(str(e)) from None


def _read_json_model[M: BaseModel](path: Path, model: type[M], what: str) -> M:
    try:
        return read_model(path, model, what, SourceFileError)
    except FileNotFoundError:
        raise SourceFileError(f"{path}: {what} not found") from None


def read_run_manifest(run_dir: PathLike) -> RunManifest | None:
    """``run.json`` of a run folder; None when the folder has none (its rows are named after it)."""
    d = Path(run_dir)
    if (d / RUN_MANIFEST).exists():
        return _read_json_model(d / RUN_MANIFEST, RunManifest, "run manifest")
    return None


def run_id_of(run: RunManifest | None, run_dir: PathLike) -> str:
    """The run's id: from its manifest, else the folder's name."""
    return run.run_id if run is not None else Path(run_dir).resolve().name


@lru_cache(maxsize=32)
def _load_suite(path: str, mtime: float) -> TaskSuite | None:
    try:
        return load_tasks(path)
    except Ego2WebError:
        return None


def run_suite(run: RunManifest | None, run_dir: PathLike) -> TaskSuite | None:
    """The run's task suite (``suite_path``, as given or relative to the run folder or its
    parent), or None when it cannot be found or loaded."""
    if run is None or not run.suite_path:
        return None
    rd = Path(run_dir)
    for candidate in (Path(run.suite_path), rd / run.suite_path, rd.parent / run.suite_path):
        if candidate.is_file():
            return _load_suite(str(candidate.resolve()), candidate.stat().st_mtime)
    return None


def _categories(run: RunManifest | None, run_dir: Path) -> dict[str, str]:
    """Task id → category from the run's suite file; empty when it cannot be loaded."""
    suite = run_suite(run, run_dir)
    return {t.id: t.category for t in suite} if suite else {}


# -- row writers (inside a transaction) --------------------------------------------------


def _write_snapshot(con: duckdb.DuckDBPyConnection, snapshot_dir: Path, location: str | None = None) -> int:
    m = _read_json_model(snapshot_dir / "manifest.json", SnapshotManifest, "snapshot manifest")
    records = parse_cdxj(snapshot_dir / m.index) if (snapshot_dir / m.index).exists() else []
    key = [m.task_id, m.snapshot_id]
    con.execute("DELETE FROM snapshots WHERE task_id = ? AND snapshot_id = ?", key)
    con.execute("DELETE FROM resources WHERE task_id = ? AND snapshot_id = ?", key)
    con.execute(
        "INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [m.task_id, m.snapshot_id, location or str(snapshot_dir.resolve()), db_time(m.created_at), db_time(m.finished_at),
         m.source, m.start_url, json.dumps(m.pages), m.archive, m.exchanges, m.payload_bytes,
         m.archive_bytes, _now()],
    )
    if records:
        con.executemany(
            "INSERT INTO resources VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [[m.task_id, m.snapshot_id, r.url, r.surt, r.captured_at, (r.method or "GET").upper(), r.status,
              r.mime, r.digest or None, r.length] for r in records],
        )
    return len(records)


def _write_run_row(con: duckdb.DuckDBPyConnection, run: RunManifest | None, run_dir: Path,
                   agent: AgentSpec | None) -> None:
    """The run's row; a folder without ``run.json`` gets its id from its name and its agent
    from its first trajectory."""
    spec = run.agent if run is not None else agent
    run_id = run_id_of(run, run_dir)
    con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
    con.execute(
        """INSERT INTO runs (run_id, started_at, suite_path, suite_sha256, agent, agent_spec, modes, versions,
                             machine, git_commit, path, ingested_at, pinned_snapshots, shared_snapshots)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [run_id, db_time(run.started_at) if run else None, run.suite_path if run else None,
         run.suite_sha256 if run else None, agent_label(spec) if spec else None,
         spec.model_dump_json() if spec else None, json.dumps(run.modes if run else []),
         json.dumps(run.versions if run else {}), json.dumps(run.machine if run else {}),
         run.git_commit if run else None, str(run_dir.resolve()), _now(),
         json.dumps(run.snapshots if run else {}, sort_keys=True),
         # NULL for a run that pinned no sources (sharing off, object storage, or from before they were pinned)
         None if run is None or run.shared_snapshots is None else json.dumps(run.shared_snapshots, sort_keys=True)],
    )


def _write_verdict(con: duckdb.DuckDBPyConnection, run_id: str, verdict: Verdict, judge: str,
                   path: Path | None, repeat: int) -> None:
    key = [run_id, verdict.task_id, verdict.mode, judge, repeat]
    con.execute("DELETE FROM verdicts WHERE run_id = ? AND task_id = ? AND mode = ? AND judge = ? "
                "AND repeat_index = ?", key)
    con.execute(
        """INSERT INTO verdicts (run_id, task_id, mode, judge, repeat_index, judge_kind, judge_model, judge_spec,
               success, score, thoughts, error, judged_at, path, ingested_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [*key, verdict.judge.name, verdict.judge.model, verdict.judge.model_dump_json(), verdict.success,
         verdict.score, verdict.thoughts, verdict.error, db_time(verdict.judged_at),
         str(path.resolve()) if path else None, _now()],
    )


def _write_episode(con: duckdb.DuckDBPyConnection, run_id: str, traj: Trajectory, category: str,
                   episode_dir: Path, warnings: list[str]) -> int:
    """The episode row and every verdict file beside it; returns the verdicts written."""
    key = [run_id, traj.task_id, traj.mode, traj.repeat]
    con.execute("DELETE FROM episodes WHERE run_id = ? AND task_id = ? AND mode = ? AND repeat_index = ?", key)
    con.execute("DELETE FROM verdicts WHERE run_id = ? AND task_id = ? AND mode = ? AND repeat_index = ?", key)
    r = traj.replay
    con.execute(
        """INSERT INTO episodes (run_id, task_id, mode, repeat_index, category, agent, snapshot_id, steps,
               end_reason, answer, error, started_at, finished_at, replay_exact, replay_canonical, replay_fuzzy,
               replay_miss, path, ingested_at, replay_blocked, replay_live, missed_urls, validity, input_modality,
               replay_learned, replay_fresh_id, set_aside, replay_shared, shared_from)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [*key, category, agent_label(traj.agent), traj.snapshot_id, len(traj.steps), traj.end_reason,
         traj.answer, traj.error, db_time(traj.started_at), db_time(traj.finished_at),
         r.exact if r else None, r.canonical if r else None, r.fuzzy if r else None, r.miss if r else None,
         str(episode_dir.resolve()), _now(), r.blocked if r else None, r.live if r else None,
         json.dumps(r.missed_urls if r else []), episode_validity(traj), traj.agent.input_modality,
         r.learned if r else None, r.fresh_id if r else None, json.dumps(set_aside(r.log) if r else {}),
         r.shared if r else None, json.dumps(r.shared_from if r else {})],
    )
    written = 0
    for vfile in sorted((episode_dir / "verdicts").glob("*.json")):
        try:
            verdict = _read_json_model(vfile, Verdict, "verdict")
        except SourceFileError as e:
            warnings.append(str(e))
            continue
        _write_verdict(con, run_id, verdict, vfile.stem, vfile, traj.repeat)
        written += 1
    return written


def _episode_dirs(run_dir: Path) -> list[Path]:
    return sorted(p.parent for p in (run_dir / "episodes").glob("*/*/trajectory.json"))


# -- public, one transaction each ---------------------------------------------------------


def record_snapshot(db_path: PathLike, snapshot_dir: PathLike, location: str | None = None) -> int:
    """Load one snapshot folder (manifest + CDXJ resources); returns the resources written.

    ``location`` is stored as its path when the folder is a local copy of a snapshot kept elsewhere (a URL).
    """
    d = Path(snapshot_dir)
    with write_connection(db_path) as con:
        return _write_snapshot(con, d, location)


def record_episode(db_path: PathLike, run_dir: PathLike, episode_dir: PathLike) -> int:
    """Load one episode (its trajectory and verdicts) and its run's row; returns verdicts written."""
    rd, ed = Path(run_dir), Path(episode_dir)
    run = read_run_manifest(rd)
    try:
        traj = load_trajectory(ed)
    except Ego2WebError as e:
        raise SourceFileError(str(e)) from None
    category = _categories(run, rd).get(traj.task_id, "unknown")
    with write_connection(db_path) as con:
        _write_run_row(con, run, rd, traj.agent)
        return _write_episode(con, run_id_of(run, rd), traj, category, ed, [])


def record_verdict(db_path: PathLike, episode_dir: PathLike, verdict: Verdict, judge: str | None = None) -> None:
    """Store one verdict of the episode in ``episode_dir`` (``<run>/episodes/<task>/<mode>``).

    ``judge`` is the name it is compared under (the verdict file's stem); default
    the judge spec's name.
    """
    ed = Path(episode_dir)
    rd = ed.resolve().parents[2]
    run_id = run_id_of(read_run_manifest(rd), rd)
    repeat = (parse_episode_folder(ed.name) or (verdict.mode, verdict.repeat))[1]
    with write_connection(db_path) as con:
        _write_verdict(con, run_id, verdict, judge or verdict.judge.name, None, repeat)


def record_run(db_path: PathLike, run_dir: PathLike, warnings: list[str] | None = None) -> IngestSummary:
    """Load a whole run folder (run row, every episode and verdict) in one transaction."""
    rd = Path(run_dir)
    run = read_run_manifest(rd)
    summary = IngestSummary(runs=1)
    warn = summary.warnings
    trajectories: list[tuple[Path, Trajectory]] = []
    for ed in _episode_dirs(rd):
        try:
            trajectories.append((ed, load_trajectory(ed)))
        except Ego2WebError as e:
            warn.append(str(e))
    categories = _categories(run, rd)
    run_id = run_id_of(run, rd)
    with write_connection(db_path) as con:
        _write_run_row(con, run, rd, trajectories[0][1].agent if trajectories else None)
        con.execute("DELETE FROM episodes WHERE run_id = ?", [run_id])
        con.execute("DELETE FROM verdicts WHERE run_id = ?", [run_id])
        for ed, traj in trajectories:
            summary.verdicts += _write_episode(con, run_id, traj, categories.get(traj.task_id, "unknown"),
                                               ed, warn)
            summary.episodes += 1
    if warnings is not None:
        warnings.extend(warn)
    return summary


def _classify(path: Path) -> Iterator[tuple[str, Path]]:
    """Yield ("snapshot" | "run", folder) for everything ingestible under ``path``."""
    if (path / "manifest.json").is_file():
        yield "snapshot", path
    elif (path / "run.json").is_file() or (path / "episodes").is_dir():
        yield "run", path
    else:
        for child in sorted(p for p in path.iterdir() if p.is_dir()):
            if (child / "run.json").is_file() or (child / "episodes").is_dir():
                yield "run", child
            else:  # a snapshot root: <task-id>/<snapshot-id>/manifest.json
                for snap in sorted(child.glob("*/manifest.json")):
                    yield "snapshot", snap.parent
                if (child / "manifest.json").is_file():
                    yield "snapshot", child


def ingest(db_path: PathLike, paths: Iterable[PathLike]) -> IngestSummary:
    """Load snapshot roots/folders and run roots/folders; each folder is its own transaction. The database is
    made (its tables, empty) even when nothing is found, so what reads it next finds it."""
    summary = IngestSummary()
    paths = list(paths)
    for raw in paths:
        if not Path(raw).is_dir():
            raise TrackingError(f"{raw}: no such folder; give snapshot or run folders (or their roots)")
    with write_connection(db_path):
        pass
    for raw in paths:
        p = Path(raw)
        found = list(_classify(p))
        if not found:
            summary.warnings.append(f"{p}: no snapshot or run folders found")
        for kind, folder in found:
            try:
                if kind == "snapshot":
                    summary.resources += record_snapshot(db_path, folder)
                    summary.snapshots += 1
                else:
                    part = record_run(db_path, folder)
                    summary.runs += 1
                    summary.episodes += part.episodes
                    summary.verdicts += part.verdicts
                    summary.warnings.extend(part.warnings)
            except SourceFileError as e:
                summary.warnings.append(str(e))
    return summary
