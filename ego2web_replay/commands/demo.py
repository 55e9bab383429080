"""``ego2web-replay demo``: the whole story on a bundled demo site, offline, in a few minutes."""

from __future__ import annotations

from pathlib import Path

import click

from ._output import console as make_console


def _rate(x: float | None) -> str:
    """A success rate as a whole percentage; '–' when no episode could be judged (all judge errors)."""
    return "–" if x is None else f"{x:.0%}"


@click.command("demo")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Empty folder for everything the demo makes (default: a new temporary folder).")
@click.option("--workers", type=click.IntRange(1, 8), default=2, show_default=True,
              help="Episodes run at once.")
@click.option("--task", "task_ids", multiple=True, help="Only this demo task (repeatable); default all six.")
@click.option("--base-url", default=None, help="OpenAI-compatible judge endpoint (default $OPENAI_BASE_URL); "
                                               "without one the offline rule judge is used.")
@click.option("--model", default=None, help="Judge model (default $EGO2WEB_JUDGE_MODEL).")
def demo_cmd(out: Path | None, workers: int, task_ids: tuple[str, ...], base_url: str | None,
             model: str | None) -> None:
    """Record a bundled demo site, run an agent live and frozen, let the site drift, run again,
    judge, probe the drift, compare live against frozen and write an HTML report.

    Needs no internet and no API key: everything runs on 127.0.0.1.
    """
    import tempfile

    from ..demo.run import run_demo
    from ..tracking.tables import comparison_tables

    out = out or Path(tempfile.mkdtemp(prefix="ego2web-demo-"))
    console = make_console(min_width=150)
    result = run_demo(out, workers=workers, task_ids=list(task_ids) or None, base_url=base_url, model=model,
                      say=lambda s: console.print(s, highlight=False, markup=False))
    for table in comparison_tables(result.comparison):
        console.print(table)
    groups = result.comparison.groups if result.comparison else []
    for g in groups:
        drifted = [f for f in g.flips if f.direction == "frozen only"]
        attributed = [f for f in drifted if f.drift_status in ("changed", "gone", "blocked")]
        v = g.frozen_validity
        coverage = f" ({v.complete}/{v.episodes} frozen episodes complete)" if v is not None else ""
        console.print(f"[bold]{g.agent} / {g.judge}[/bold]: after drift, live {_rate(g.live_rate)} vs frozen "
                      f"{_rate(g.frozen_rate)}{coverage}; {len(drifted)} task(s) pass frozen but fail live, "
                      f"{len(attributed)} of them explained by what had changed on the pages the live run used:")
        for f in attributed:
            a = f.attribution
            cause = a.resources[0] if a and a.resources else None
            if cause is not None:
                console.print(f"    {f.task_id:22} {f.drift_status:8} {cause.url}  {cause.detail}"[:200],
                              highlight=False)
    console.print(f"""
finished in {result.seconds:.0f} s; everything is in {result.out}
  task suite   {result.suite}
  snapshots    {result.snapshots}
  runs         {', '.join(str(r) for r in result.runs)}
  database     {result.db}
  report       {result.report / 'index.html'}  (open it in a browser; it works offline)
Try:  ego2web-replay compare --db {result.db}
      ego2web-replay serve {next(iter(sorted(result.snapshots.glob('*/*'))), result.snapshots)}""", highlight=False)


COMMANDS = [demo_cmd]
