"""``drift``: how far the live web has moved from the recorded snapshots."""

from __future__ import annotations

from pathlib import Path

import click

from ._options import Finite, db_option, db_options, guard_option, json_option, upstream_ca_option
from ._output import console, emit_machine, is_stdout
from ._output import line as out_line

__all__ = ["COMMANDS", "drift_group"]


@click.group("drift")
def drift_group() -> None:
    """Probe recorded pages live and report what changed since capture."""


@drift_group.command("report")
@db_option
@json_option("the time series")
def drift_report_command(db_path: Path, json_out: str | None) -> None:
    """Show, for every probe ever made, the share of recorded URLs changed since capture.

    Per task, per site and overall; a URL counts as changed when its probe found
    it changed, gone, or blocked (CAPTCHA / access denied); failed probes are
    counted apart and left out of the share.
    """
    from ..tracking.drift import drift_timeseries
    from ..tracking.tables import drift_tables

    series = drift_timeseries(db_path)
    if not is_stdout(json_out):
        out = console(min_width=160)
        for table in drift_tables(series):
            out.print(table)
    if json_out:
        emit_machine(json_out, series.model_dump_json(indent=2) + "\n")


@drift_group.command("probe")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
@click.option("--task", "task_ids", multiple=True, help="Probe only this task (repeatable).")
@click.option("--archive", "archive_root", type=click.Path(path_type=Path), default=Path("probes"),
              show_default=True, help="Where the probes' own archives go (<archive>/<task>/<id>/).")
@guard_option()
@upstream_ca_option()
@click.option("--timeout", type=Finite(0.5), default=15.0, show_default=True,
              help="Seconds to wait for each URL.")
def drift_probe_command(paths: tuple[Path, ...], db_path: Path, task_ids: tuple[str, ...], archive_root: Path,
                        guard: str, upstream_ca: Path | None, timeout: float) -> None:
    """Re-visit the recorded pages of PATHS (a snapshots root, or snapshot folders) live, through
    the recording proxy (so each probe is archived too), and record per URL what changed."""
    from ..tracking.probe import probe_snapshots, snapshots_to_probe
    from ..tracking.sink import TrackingSink

    targets = snapshots_to_probe(list(paths), task_ids)
    out = console()

    def on_task(task_id: str, status: str, probes) -> None:  # noqa: ANN001
        colour = {"unchanged": "green", "changed": "yellow"}.get(status, "red")
        out.print(out_line(f"{task_id}: {len(probes)} URL(s)", status=f"{status:9}", style=colour))
        for p in probes:
            if p.url_status != "unchanged":
                extra = f" ({p.error})" if p.error else (f" similarity {p.text_similarity:.2f}"
                                                         if p.text_similarity is not None else "")
                out.print(out_line(f"    {p.url_status:9} {p.status_then} -> {p.status_now} {p.url}{extra}"))

    probe_id, rows = probe_snapshots(targets, archive_root=archive_root, guard=guard, upstream_ca=upstream_ca,
                                     timeout=timeout, on_task=on_task)
    TrackingSink(db_path).probed(rows)
    out.print(out_line(f"probe {probe_id}: {len(rows)} URL(s) of {len(targets)} snapshot(s) recorded in {db_path}"))


@drift_group.command("diff")
@click.argument("run_dir", metavar="RUN", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--snapshots", "snapshots_root", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="For tasks without a frozen episode, diff against their newest snapshot under this root.")
@click.option("--task", "task_ids", multiple=True, help="Only this task (repeatable).")
@click.option("--against", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Diff the live episode of this snapshot's task against this snapshot folder instead.")
@db_options("the pair diffs")
@json_option("the diffs")
@click.option("--all", "show_all", is_flag=True, help="Also list unchanged resources.")
def drift_diff_command(run_dir: Path, snapshots_root: Path | None, task_ids: tuple[str, ...], against: Path | None,
                       db: Path | None, json_out: str | None, show_all: bool) -> None:
    """Diff each live episode's own archive in RUN against the frozen snapshot, resource by resource.

    Documents, fetch/XHR responses and images the agent's pages used are each
    unchanged, changed (visible-text or JSON-field differences), gone (404/410
    or a soft 404), new (not in the snapshot), blocked (CAPTCHA or
    access-denied interstitial, sign-in wall) or unreachable (the live run
    could not reach the origin); volatile content does not count.
    """
    from ..tracking.episode_diff import diff_run
    from ..tracking.report_diff import diff_lines

    result = diff_run(run_dir, snapshots_root=snapshots_root, task_ids=task_ids, against=against)
    for line in result.skipped:
        click.secho(f"skipped {line}", fg="yellow", err=True)
    if not result.diffs and not result.skipped:  # never a silent empty answer
        click.secho(f"no live episode in {run_dir} to diff (drift diff compares a live run's own archives with "
                    "the snapshot; run with --mode live or both)", fg="yellow", err=True)
    if not is_stdout(json_out):
        for d in result.diffs:
            for line in diff_lines(d, show_all=show_all):
                click.echo(line)
    if json_out:
        body = ",\n".join(d.model_dump_json(indent=2) for d in result.diffs)
        emit_machine(json_out, "[" + body + "]\n")
    if db is not None and result.diffs:
        from ..tracking.sink import TrackingSink

        sink = TrackingSink(db, warn=lambda msg: click.secho(f"warning: {msg}", fg="yellow", err=True))
        sink.pair_diffed(result.diffs)
        if sink.error is None:
            click.echo(f"{len(result.diffs)} pair diff(s) of run {result.run_id} recorded in {db}",
                       err=is_stdout(json_out))


COMMANDS = [drift_group]
