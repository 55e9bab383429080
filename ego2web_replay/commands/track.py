"""``ingest``, ``compare`` and ``report``: the tracking database and what is read from it."""

from __future__ import annotations

from pathlib import Path

import click

from ..config import DEFAULT_DB

__all__ = ["COMMANDS", "db_option"]


def db_option(f):  # type: ignore[no-untyped-def]
    """The shared ``--db`` option."""
    return click.option(
        "--db", "db_path", type=click.Path(path_type=Path), default=DEFAULT_DB, show_default=True,
        help="The tracking DuckDB file.",
    )(f)


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
def ingest_command(paths: tuple[Path, ...], db_path: Path) -> None:
    """Load snapshot folders, run folders, or roots holding them into the database.

    Re-ingesting replaces rows and never duplicates them; the files stay the
    source of truth, so the database can always be rebuilt this way.
    """
    from ..tracking.ingest import ingest

    summary = ingest(db_path, paths)
    for w in summary.warnings:
        click.secho(f"warning: {w}", fg="yellow", err=True)
    click.echo(
        f"{db_path}: {summary.snapshots} snapshots ({summary.resources} resources), {summary.runs} runs, "
        f"{summary.episodes} episodes, {summary.verdicts} verdicts"
    )


COMMANDS = [ingest_command]
