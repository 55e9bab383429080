"""``ego2web-replay snapshot export``: a snapshot as a WACZ, a ``.warc.gz`` or a HAR for other tools."""

from __future__ import annotations

from pathlib import Path

import click

from ._options import json_option
from ._output import emit_json, is_stdout
from .snapshot import snapshot

__all__ = ["COMMANDS", "export_command"]


@snapshot.command("export")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["wacz", "warc.gz", "har"]), default="wacz", show_default=True,
              help="wacz (WACZ 1.1.1: WARC, CDXJ index, pages, manifest), warc.gz (records + manifest record) "
                   "or har (HAR 1.2, replayable by Playwright's route_from_har).")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True, help="File to write.")
@json_option("what was written (path, format, records, bytes)")
def export_command(path: Path, fmt: str, out: Path, json_out: str | None) -> None:
    """Export a snapshot for pywb, py-wacz, warcio and other web-archive tools."""
    from ..snapshots.export import export_snapshot

    result = export_snapshot(path, out, fmt)  # type: ignore[arg-type]
    emit_json(json_out, {"path": str(result.path), "format": result.format, "records": result.records,
                         "materialized": result.materialized, "bytes": result.bytes, "snapshot": str(path)})
    if is_stdout(json_out):
        return
    extra = f", {result.materialized} revisits made whole" if result.materialized else ""
    extra += f", {result.left_out} captures with no HTTP response left out" if result.left_out else ""
    what = "entries" if result.format == "har" else "records"
    click.echo(f"exported {result.records} {what} to {result.path} ({result.bytes} bytes{extra})")


COMMANDS: list[click.Command] = []  # attached to the `snapshot` group above
