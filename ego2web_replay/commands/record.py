"""``ego2web-replay record``: record each task's web into a snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import click

from ..config import DEFAULT_DB, DEFAULT_SNAPSHOTS
from ..errors import RecordingError


@click.command("record")
@click.argument("tasks_file", type=click.Path(path_type=Path))
@click.option("--snapshots", "root", type=click.Path(path_type=Path), default=DEFAULT_SNAPSHOTS, show_default=True,
              help="Data root; each task is recorded into <root>/<task-id>/<snapshot-id>/.")
@click.option("--task", "task_ids", multiple=True, help="Record only this task id (repeatable).")
@click.option("--format", "compression", type=click.Choice(["zst", "gz"]), default="zst", show_default=True,
              help="Archive compression: one zstd frame or one gzip member per record.")
@click.option("--guard", type=click.Choice(["open", "allowlist", "loopback"]), default="open", show_default=True,
              help="Which upstream hosts may be contacted (allowlist: the task's allowed_domains plus --allow).")
@click.option("--allow", multiple=True, help="Extra host to allow in allowlist mode (repeatable).")
@click.option("--deny", multiple=True, help="Host never to contact (repeatable).")
@click.option("--upstream-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also trust this CA (PEM) for upstream HTTPS, e.g. a local test site's.")
@click.option("--keep-credentials", is_flag=True, help="Keep Authorization/Cookie values instead of redacting them.")
@click.option("--interactive", is_flag=True,
              help="Headed: open the start page and record while a person browses; closing the window ends it.")
@click.option("--db", type=click.Path(path_type=Path), default=DEFAULT_DB, show_default=True,
              help="Register each snapshot in this tracking database as it is recorded.")
@click.option("--no-db", is_flag=True, help="Do not write to the tracking database.")
@click.option("--action-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds each reference action may take before the task fails.")
def record_cmd(tasks_file: Path, root: Path, task_ids: tuple[str, ...], compression: Literal["zst", "gz"], guard: str,
               allow: tuple[str, ...], deny: tuple[str, ...], upstream_ca: Path | None, keep_credentials: bool,
               interactive: bool, db: Path | None, no_db: bool, action_timeout: float) -> None:
    """Record the tasks of TASKS_FILE (JSON or JSONL) by running their reference actions in
    Chromium through the recording proxy. Exits non-zero if any task failed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..recorder.session import RecordOptions, record_task
    from ..tasks import load_tasks

    suite = load_tasks(tasks_file)
    tasks = suite.select(list(task_ids))
    _check_writable(root)
    from ..proxy import project_ca

    ca = project_ca()
    failures = 0
    with Progress(TextColumn("[bold]record[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=False) as progress:
        bar = progress.add_task("", total=len(tasks))
        sink = None
        if db is not None and not no_db:
            from ..tracking.sink import TrackingSink

            sink = TrackingSink(db, warn=lambda msg: progress.console.print(f"[yellow]warning:[/yellow] {msg}"))
        for task in tasks:
            progress.update(bar, description=task.id)
            allowed = list(allow) + (task.allowed_domains if guard == "allowlist" else [])
            opts = RecordOptions(compression=compression, guard=guard, allow=allowed, deny=deny,
                                 upstream_ca=upstream_ca, keep_credentials=keep_credentials,
                                 interactive=interactive, action_timeout_s=action_timeout)
            r = record_task(task, root, opts, ca=ca)
            if r.ok and r.manifest is not None and r.snapshot is not None:
                progress.console.print(f"[green]ok[/green]   {task.id}: {r.snapshot} "
                                       f"({r.manifest.exchanges} exchanges, {r.manifest.archive_bytes} bytes)")
                if sink is not None:
                    sink.snapshot_recorded(r.snapshot)
            else:
                failures += 1
                progress.console.print(f"[red]FAIL[/red] {task.id}: {r.error}")
            progress.advance(bar)
    if failures:
        raise RecordingError(f"{failures} of {len(tasks)} task(s) failed to record")


def _check_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RecordingError(f"snapshots folder {root} is not writable ({e.strerror or e})") from None


COMMANDS = [record_cmd]
