"""``ego2web-replay snapshot``: list, show, verify, re-index and import snapshots."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import SnapshotError
from ._hooks import wire_index_hooks
from ._options import LOCATION, compression_option, json_option, snapshots_option
from ._output import console, emit_json, emit_machine, is_stdout, line, table

__all__ = ["COMMANDS", "snapshot"]

_SNAPSHOTS_OPTION = snapshots_option(name="root")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@click.group()
def snapshot() -> None:
    """List, inspect, check, index, import, export and extend recorded snapshots (WARC + CDXJ + manifest),
    and see what frozen runs missed of them."""


@snapshot.command("list")
@_SNAPSHOTS_OPTION
@json_option("the snapshots (a list of {task_id, snapshot_id, path, complete, manifest})")
def list_command(root: Path | str, json_out: str | None) -> None:
    """List every snapshot under the snapshots folder (or URL), newest first per task."""
    import json

    from ..snapshots import list_snapshots
    from ..snapshots.location import join, root_storage

    if isinstance(root, str):
        infos = list_snapshots(Path(), root_storage(root))
    else:
        infos = list_snapshots(root)
    if json_out:
        emit_machine(json_out, json.dumps([
            {"task_id": i.task_id, "snapshot_id": i.snapshot_id, "complete": i.complete, "problem": i.problem,
             "path": str(join(root, i.task_id, i.snapshot_id) if isinstance(root, str) else i.path),
             "manifest": json.loads(i.manifest.model_dump_json()) if i.manifest else None} for i in infos],
            indent=2) + "\n")
        if is_stdout(json_out):
            return
    rows = table("task", "snapshot", "time (UTC)", "exchanges", "bytes", "source", whole=2)
    for info in infos:
        m = info.manifest
        if m is None:
            rows.add_row(info.task_id, info.snapshot_id, "-", "-", "-",
                         line("corrupt manifest (snapshot verify says more)" if info.problem else "unfinished",
                              style="red"))
        else:
            rows.add_row(m.task_id, m.snapshot_id, m.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                         str(m.exchanges), _size(m.archive_bytes), m.source)
    if not infos:
        click.echo(f"no snapshots under {root}")
        return
    console(min_width=120).print(rows)


@snapshot.command("show")
@click.argument("path", type=LOCATION)
@json_option("the manifest and index counts")
def show_command(path: Path | str, json_out: str | None) -> None:
    """Show a snapshot's manifest summary and its record counts (PATH: a folder or a URL)."""
    import json
    from collections import Counter

    from ..snapshots.location import open_snapshot

    snap = open_snapshot(path)
    m = snap.manifest
    entries = snap.entries()
    by_type = Counter(e.record_type for e in entries)
    if json_out:
        data = json.loads(m.model_dump_json())
        data["index_entries"] = dict(sorted(by_type.items()))
        emit_machine(json_out, json.dumps(data, indent=2) + "\n")
        if is_stdout(json_out):
            return
    click.echo(f"snapshot   {m.task_id}/{m.snapshot_id} ({m.source})")
    click.echo(f"path       {path if isinstance(path, str) else snap.path}")
    click.echo(f"created    {m.created_at.isoformat()}  finished {m.finished_at.isoformat() if m.finished_at else '-'}")
    click.echo(f"start url  {m.start_url or '-'}")
    click.echo(f"pages      {len(m.pages)}")
    click.echo(f"archive    {m.archive}  {_size(m.archive_bytes)} ({_size(m.payload_bytes)} payload)")
    click.echo(f"records    {', '.join(f'{k} {v}' for k, v in m.records.items())}")
    click.echo(f"index      {len(entries)} entries ({', '.join(f'{k} {v}' for k, v in sorted(by_type.items()))})")
    click.echo(f"tools      {', '.join(f'{k} {v}' for k, v in m.tools.items())}")


@snapshot.command("verify")
@click.argument("path", type=LOCATION)
@json_option("the check (ok, problems, warnings, records, entries)")
def verify_command(path: Path | str, json_out: str | None) -> None:
    """Check digests, index offsets and manifest sha256s; exit non-zero on any problem (PATH: a folder
    or a URL, whose files are downloaded to check them)."""
    from ..snapshots.location import verify_location

    report = verify_location(path)
    emit_json(json_out, {"path": str(path), "ok": report.ok, "problems": report.problems, "warnings": report.warnings,
                         "records": report.records, "entries": report.entries, "truncated_at": report.truncated_at})
    quiet = is_stdout(json_out)
    for warning in [] if quiet else report.warnings:
        click.echo(f"warning: {warning}")
    for problem in [] if quiet else report.problems:
        click.echo(f"problem: {problem}")
    summary = f"{report.records} whole records, {report.entries} index entries"
    if not report.ok:
        raise SnapshotError(f"{path}: {len(report.problems)} problem(s) found ({summary})")
    if not quiet:
        click.echo(f"ok: {path} ({summary})")


@snapshot.command("index")
@click.argument("path", type=LOCATION)
def index_command(path: Path | str) -> None:
    """Rebuild a snapshot's index.cdxj from its archive."""
    from ..snapshots import reindex_snapshot
    from ..snapshots.location import require_local

    wire_index_hooks()
    count = reindex_snapshot(require_local(path, "snapshot index"))
    click.echo(f"indexed {count} captures in {path}")


@snapshot.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--task", "task_id", required=True, help="Task id the snapshot belongs to.")
@_SNAPSHOTS_OPTION
@click.option("--id", "snapshot_id", default=None, help="Snapshot id (default: the current UTC time).")
@compression_option(("zst", "gz", "none"))
@click.option("--keep-credentials", is_flag=True, default=False,
              help="HAR files: archive cookies, tokens and passwords as they are (by default they are redacted).")
@json_option("the snapshot made (path, ids, captures)")
def import_command(files: tuple[Path, ...], task_id: str, root: Path | str, snapshot_id: str | None,
                   compression: str, keep_credentials: bool, json_out: str | None) -> None:
    """Import WARC / WARC.GZ / WARC.ZST / WACZ files, or HAR 1.2 files (several go into one snapshot)."""
    from ..snapshots import import_warc
    from ..snapshots.location import require_local

    wire_index_hooks()
    snap = import_warc(list(files), task_id, require_local(root, "snapshot import"), snapshot_id=snapshot_id, compression=compression, keep_credentials=keep_credentials)  # type: ignore[arg-type]
    m = snap.manifest
    left_out = [note for note in m.notes if "not archived" in note]  # HAR entries left out: shown, not only noted
    emit_json(json_out, {"path": str(snap.path), "task_id": m.task_id, "snapshot_id": m.snapshot_id,
                         "exchanges": m.exchanges, "archive_bytes": m.archive_bytes, "files": [str(f) for f in files],
                         "left_out": left_out})
    if not is_stdout(json_out):
        click.echo(f"imported {m.exchanges} captures into {snap.path}")
        for note in left_out:
            click.echo(f"  {note}")


@snapshot.command("extend")
@click.argument("base", type=LOCATION)
@click.argument("sources", nargs=-1, required=True, type=LOCATION)
@click.option("--window", default=None,
              help="Merge only captures made within this time of the base's capture (90s, 30m, 2h, 1d); "
                   "default: no limit.")
def extend_command(base: Path | str, sources: tuple[Path | str, ...], window: str | None) -> None:
    """Make a new snapshot of BASE's task: its captures plus those of SOURCES (other snapshots of the task,
    or run/episode folders holding live-run archives) for requests BASE does not hold, with provenance."""
    from ..replay.canonical import entry_key
    from ..snapshots.extend import extend_snapshot, parse_window
    from ..snapshots.location import require_local

    wire_index_hooks()
    base_dir = require_local(base, "snapshot extend")
    source_dirs = [require_local(s, "snapshot extend") for s in sources]
    result = extend_snapshot(base_dir, source_dirs, window=parse_window(window) if window else None,
                             request_key=entry_key())
    click.echo(f"extended snapshot {result.path}: {result.base_captures} base captures + {result.merged} merged")
    for s in result.sources:
        click.echo(f"  {s.snapshot_id} ({s.label}): merged {s.merged}, already held {s.already_held}, "
                   f"outside the window {s.outside_window}" + (f", unresolved revisits {s.unresolved_revisits}"
                                                              if s.unresolved_revisits else ""))


COMMANDS = [snapshot]
