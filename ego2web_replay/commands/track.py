"""``ingest``, ``compare`` and ``report``: the tracking database and what is read from it."""

from __future__ import annotations

from pathlib import Path

import click

from ._options import Finite, db_option, iterations_option, json_option
from ._output import console, emit_json, emit_machine, is_stdout

__all__ = ["COMMANDS", "db_option"]


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
@json_option("what was loaded (counts and warnings)")
def ingest_command(paths: tuple[Path, ...], db_path: Path, json_out: str | None) -> None:
    """Load snapshot folders, run folders, or roots holding them into the database.

    Re-ingesting replaces rows and never duplicates them; the files stay the
    source of truth, so the database can always be rebuilt this way.
    """
    from ..tracking.ingest import ingest

    summary = ingest(db_path, paths)
    for w in summary.warnings:
        click.secho(f"warning: {w}", fg="yellow", err=True)
    emit_json(json_out, {"db": str(db_path), **summary.model_dump(mode="json")})
    if not is_stdout(json_out):
        click.echo(f"{db_path}: {summary.snapshots} snapshots ({summary.resources} resources), {summary.runs} runs, "
                   f"{summary.episodes} episodes, {summary.verdicts} verdicts")


@click.command("compare")
@db_option
@click.option("--agent", "agents", multiple=True, help="Only this agent (name or name:model); repeatable.")
@click.option("--judge", "judges", multiple=True, help="Only this judge (verdict file name); repeatable.")
@json_option("the comparison")
@click.option("--csv", "csv_out", metavar="FILE|-",
              help="Write per-category rows as CSV to FILE; `--csv -` prints only the CSV, on stdout.")
@iterations_option(2000)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap random seed.")
@click.option("--level", type=Finite(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Confidence level of the interval.")
@click.option("--probe-window", type=Finite(min=0, max=876_000), default=24.0, show_default=True,
              help="Hours around a live run within which a drift probe may explain its flip "
                   "(only when the live episode has no archive of its own; at most 876000, 100 years).")
def compare_command(db_path: Path, agents: tuple[str, ...], judges: tuple[str, ...], json_out: str | None,
                    csv_out: str | None, iterations: int, seed: int, level: float, probe_window: float) -> None:
    """Compare live and frozen success per agent and judge, paired by task.

    Uses the most recent run per (agent, judge, task, mode). Shows rates per
    category, the paired table, McNemar's exact test, a bootstrap interval of
    the difference, frozen miss rates, and each flip with what had changed at
    the time of its live run: from the live episode's own archive, else from a
    drift probe taken within --probe-window hours of it, else unknown.
    """
    if is_stdout(json_out) and is_stdout(csv_out):
        raise click.UsageError("--json - and --csv - both want stdout; write one of them to a file")
    from datetime import timedelta

    from ..tracking.compare import compare, csv_text
    from ..tracking.tables import comparison_tables

    result = compare(db_path, agents=agents, judges=judges, iterations=iterations, seed=seed, level=level,
                     probe_window=timedelta(hours=probe_window))
    if not (is_stdout(json_out) or is_stdout(csv_out)):
        out = console(min_width=160)
        for table in comparison_tables(result):
            out.print(table)
    if json_out:
        emit_machine(json_out, result.model_dump_json(indent=2) + "\n")
    if csv_out:
        emit_machine(csv_out, csv_text(result))


@click.command("report")
@db_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=Path("report"),
              show_default=True, help="Folder to write the static HTML report into.")
@iterations_option(2000)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap random seed.")
@click.option("--png", is_flag=True, help="Also save each chart as a PNG (drawn by headless Chromium) beside its SVG.")
def report_command(db_path: Path, out_dir: Path, iterations: int, seed: int, png: bool) -> None:
    """Write a static HTML report (opens from disk, no server, no network).

    It holds the comparison tables, a live-vs-frozen chart per agent, the drift
    timeline, and a page per episode with screenshots, actions, answer, replay
    misses, video keyframes and every judge's verdict. The comparison is also saved as
    comparison.csv, the runs as runs.csv and each chart as charts/<name>.svg (and .png with --png).
    """
    from ..tracking.report import build_report

    summary = build_report(db_path, out_dir, iterations=iterations, seed=seed)
    if png:
        from ..browser import svg_to_png

        summary.exports += svg_to_png([p for p in summary.exports if p.suffix == ".svg"])
    click.echo(f"wrote {summary.index} ({summary.episode_pages} episode pages, {summary.assets} images; "
               f"comparison.csv, runs.csv and {sum(p.suffix in ('.svg', '.png') for p in summary.exports)} chart files "
               "beside it)")


COMMANDS = [ingest_command, compare_command, report_command]
