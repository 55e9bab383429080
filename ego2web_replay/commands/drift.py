"""``drift``: how far the live web has moved from the recorded snapshots."""

from __future__ import annotations

from pathlib import Path

import click

from .track import db_option

__all__ = ["COMMANDS", "drift_group"]


@click.group("drift")
def drift_group() -> None:
    """Probe recorded pages live and report what changed since capture."""


@drift_group.command("report")
@db_option
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Also write the time series as JSON here.")
def drift_report_command(db_path: Path, json_path: Path | None) -> None:
    """Show, for every probe ever made, the share of recorded URLs changed since capture.

    Per task, per site and overall; a URL counts as changed when its probe found
    it changed, gone, or blocked (CAPTCHA / access denied); failed probes are
    counted apart and left out of the share.
    """
    from rich.console import Console

    from ..atomic import atomic_write_text
    from ..tracking.drift import drift_timeseries
    from ..tracking.tables import drift_tables

    series = drift_timeseries(db_path)
    console = Console(width=160)
    for table in drift_tables(series):
        console.print(table)
    if json_path:
        atomic_write_text(json_path, series.model_dump_json(indent=2) + "\n")
        click.echo(f"wrote {json_path}")


COMMANDS = [drift_group]
