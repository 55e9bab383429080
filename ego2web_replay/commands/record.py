"""``ego2web-replay record``: record each task's web into a snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from ..errors import RecordingError
from ._checks import check_display
from ._hooks import wire_index_hooks
from ._options import (
    Finite,
    compression_option,
    db_options,
    guard_option,
    json_option,
    keep_credentials_option,
    snapshots_option,
    upstream_ca_option,
)
from ._output import emit_json, is_stdout, progress, say, warn
from .wire_options import wire_options

if TYPE_CHECKING:
    from ..wire.budget import WireLimits


@click.command("record")
@click.argument("tasks_file", type=click.Path(path_type=Path))
@snapshots_option("Data root; each task is recorded into <root>/<task-id>/<snapshot-id>/.", name="root")
@click.option("--task", "task_ids", multiple=True, help="Record only this task id (repeatable).")
@compression_option(("zst", "gz"), alias="--format")
@guard_option("Which upstream hosts may be contacted (allowlist: the task's allowed_domains plus --allow).")
@click.option("--allow", multiple=True, help="Extra host to allow in allowlist mode (repeatable).")
@click.option("--deny", multiple=True, help="Host never to contact (repeatable).")
@upstream_ca_option("Also trust this CA (PEM) for upstream HTTPS, e.g. a local test site's.")
@keep_credentials_option
@click.option("--redact-header", "redact_headers", multiple=True,
              help="Also redact this header's values (repeatable; Authorization, Cookie, Set-Cookie, "
                   "X-Api-Key ... are redacted already).")
@click.option("--redact-param", "redact_params", multiple=True,
              help="Also redact this query parameter / form or JSON field (repeatable; names with token, "
                   "key, auth, password, session, secret, sig ... are redacted already).")
@click.option("--interactive", is_flag=True,
              help="Headed: open the start page and record while a person browses; closing the window ends it.")
@db_options("each snapshot as it is recorded")
@click.option("--action-timeout", type=Finite(min=0.1), default=30.0, show_default=True,
              help="Seconds each reference action may take before the task fails.")
@click.option("--dedup-min-size", type=click.IntRange(min=0), default=256, show_default=True,
              help="Store identical payloads of at least this many bytes once per recording, later captures "
                   "as WARC revisit records; 0 stores every payload.")
@click.option("--engine", type=click.Choice(["fast", "mitmproxy"]), default="fast", show_default=True,
              help="The recording proxy: fast (asyncio, upstream over HTTP/1.1) or mitmproxy (its master with "
                   "our addons; HTTP/2 upstream).")
@wire_options
@click.option("--second-load/--no-second-load", default=True, show_default=True,
              help="After the actions, load each recorded page once more in a throw-away browser context, "
                   "not archived: what its requests send differently while getting the same response (request "
                   "ids, client ids) is learned volatile (volatile.json). Not after --interactive.")
@json_option("each task's snapshot (or error)")
def record_cmd(tasks_file: Path, root: Path | str, task_ids: tuple[str, ...], compression: Literal["zst", "gz"], guard: str,
               allow: tuple[str, ...], deny: tuple[str, ...], upstream_ca: Path | None, keep_credentials: bool,
               redact_headers: tuple[str, ...], redact_params: tuple[str, ...], interactive: bool,
               db: Path | None, action_timeout: float, dedup_min_size: int, engine: Literal["fast", "mitmproxy"],
               wire: WireLimits, second_load: bool, json_out: str | None) -> None:
    """Record the tasks of TASKS_FILE (JSON or JSONL) by running their reference actions in
    Chromium through the recording proxy. Exits non-zero if any task failed.

    One line per task and the progress bar go to stderr; the summary to stdout.
    """
    from ..models import load_tasks
    from ..recorder.session import RecordOptions
    from ..recorder.upload import record_task_to

    if interactive:
        check_display("record --interactive")
    wire_index_hooks()
    suite = load_tasks(tasks_file)
    tasks = suite.select(list(task_ids))
    _check_writable(root)
    from ..proxy import project_ca

    ca = project_ca()
    failures = 0
    results: list[dict[str, object]] = []
    with progress("record") as bars:
        bar = bars.add_task("", total=len(tasks))
        sink = None
        if db is not None:
            from ..tracking.sink import TrackingSink

            sink = TrackingSink(db, warn=lambda msg: warn(bars, msg))
        for task in tasks:
            bars.update(bar, description=task.id)
            allowed = list(allow) + (task.allowed_domains if guard == "allowlist" else [])
            opts = RecordOptions(compression=compression, guard=guard, allow=allowed, deny=deny,
                                 upstream_ca=upstream_ca, keep_credentials=keep_credentials,
                                 redact_headers=redact_headers, redact_params=redact_params,
                                 interactive=interactive, action_timeout_s=action_timeout,
                                 dedup_min_size=dedup_min_size or None, engine=engine, wire=wire,
                                 second_load=second_load and not interactive)
            recorded = sink.snapshot_recorded if sink is not None else None
            def uploading(url: str, task_id: str = task.id) -> None:
                bars.update(bar, description=f"{task_id}: uploading to {url}")

            r = record_task_to(task, root, opts, ca=ca, on_recorded=recorded, on_upload=uploading)
            ok = r.ok and r.manifest is not None and r.snapshot is not None
            results.append({"task_id": task.id, "ok": ok, "snapshot": str(r.location or r.snapshot) if ok else None,
                            "exchanges": r.manifest.exchanges if ok and r.manifest else None,
                            "archive_bytes": r.manifest.archive_bytes if ok and r.manifest else None,
                            "refused": dict(r.refused or {}), "error": None if ok else r.error})
            if r.ok and r.manifest is not None and r.snapshot is not None:
                say(bars, f"{task.id}: {r.location or r.snapshot} ({r.manifest.exchanges} exchanges, "
                          f"{r.manifest.archive_bytes} bytes)", status="ok  ", style="green")
                if r.refused:
                    say(bars, f"{task.id}: proxy bounds (docs/limits.md): "
                              + ", ".join(f"{k} {v}" for k, v in sorted(r.refused.items())), status="note")
            else:
                failures += 1
                say(bars, f"{task.id}: {r.error}", status="FAIL", style="red")
            bars.advance(bar)
    emit_json(json_out, {"root": str(root), "recorded": len(tasks) - failures, "failed": failures, "tasks": results})
    if failures:
        raise RecordingError(f"{failures} of {len(tasks)} task(s) failed to record")
    if not is_stdout(json_out):
        click.echo(f"recorded {len(tasks)} task(s) into {root}")


def _check_writable(root: Path | str) -> None:
    if isinstance(root, str):  # object storage: reachable, the bucket there, a PUT accepted
        from ..snapshots.location import root_storage

        root_storage(root, write=True)
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RecordingError(f"snapshots folder {root} is not writable ({e.strerror or e})") from None


COMMANDS = [record_cmd]
