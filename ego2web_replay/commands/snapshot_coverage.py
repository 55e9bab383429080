"""``ego2web-replay snapshot coverage``: how much of a set of frozen episodes stayed on the snapshot, per task."""

from __future__ import annotations

from pathlib import Path

import click

from ._options import json_option
from ._output import console, emit_json, is_stdout, table
from .snapshot import snapshot

__all__ = ["COMMANDS", "coverage_command"]


@snapshot.command("coverage")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--top", type=click.IntRange(min=0), default=3, show_default=True,
              help="List this many of each task's most missed documents and content fetches.")
@json_option("the counts per task, with every missed request")
def coverage_command(run_dirs: tuple[Path, ...], top: int, json_out: str | None) -> None:
    """Per task, over the frozen episodes of RUN_DIRS (run folders): how many episodes stayed complete,
    were degraded or went off the snapshot, and how many documents and content fetches missed."""
    from ..tracking.coverage import coverage_shares

    report = coverage_shares(list(run_dirs))
    emit_json(json_out, {"runs": [str(r) for r in run_dirs], "tasks": [
        {**t.model_dump(mode="json"), "shares": {"complete": t.share(t.complete), "degraded": t.share(t.degraded),
                                                 "off-snapshot": t.share(t.off_snapshot)}} for t in report]})
    if is_stdout(json_out):
        return
    grid = table("task", "episodes", "complete", "degraded", "off-snapshot", "content misses")
    for t in report:
        grid.add_row(t.task_id, str(t.episodes), *(f"{n} ({100 * t.share(n):.0f}%)" for n in
                                                   (t.complete, t.degraded, t.off_snapshot)),
                     f"{t.content_misses}/{t.content_requests}")
    episodes = sum(t.episodes for t in report)
    complete = sum(t.complete for t in report)
    out = console()
    out.print(grid)
    out.print(f"{complete} of {episodes} frozen episode(s) complete ({100 * complete / max(1, episodes):.0f}%)"
              + (f"; {sum(t.unknown for t in report)} without replay stats" if any(t.unknown for t in report) else ""),
              highlight=False, markup=False)
    for t in report:
        for request, n in list(t.missed.items())[:top]:
            out.print(f"  {t.task_id}: missed {request} ×{n}", highlight=False, markup=False)


COMMANDS: list[click.Command] = []  # attached to the `snapshot` group
