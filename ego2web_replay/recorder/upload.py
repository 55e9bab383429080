"""Recording into object storage: record locally, then upload the finished snapshot, manifest last.

The recorder appends and flushes the archive record by record, which an object
store cannot do; so a task whose ``--snapshots`` is a URL is recorded into a
staging folder under the data folder (``upload-staging/``) and uploaded once
finished (:func:`~ego2web_replay.snapshots.location.upload_snapshot`: every
file before the manifest). The staged copy is removed after a good upload and
kept, and named in the error, after a failed one: nothing recorded is lost.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import SnapshotError
from ..models import Task
from ..proxy import ProjectCA
from ..snapshots.location import Location, join, staging_root, upload_snapshot
from .session import RecordOptions, RecordResult, record_task

__all__ = ["record_task_to"]


def record_task_to(task: Task, root: Location, opts: RecordOptions, *, ca: ProjectCA | None = None,
                   on_recorded: Callable[[Path, str | None], None] | None = None,
                   on_upload: Callable[[str], None] | None = None) -> RecordResult:
    """Record ``task`` under ``root`` (a folder or a URL); ``on_recorded(folder, url)`` runs while the
    finished snapshot's local folder still exists (``url`` is None for a local root); ``on_upload(url)``
    when the upload of a recording to object storage begins."""
    if not isinstance(root, str):
        r = record_task(task, root, opts, ca=ca)
        if r.ok and r.snapshot is not None and on_recorded is not None:
            on_recorded(r.snapshot, None)
        return r
    r = record_task(task, staging_root(), opts, ca=ca)
    if not r.ok or r.snapshot is None:
        return r
    target = str(join(root, r.task_id, r.snapshot.name))
    if on_upload is not None:
        on_upload(target)
    try:
        upload_snapshot(r.snapshot, target)
    except SnapshotError as e:
        return replace(r, ok=False, error=f"{e}; the recorded snapshot stays in {r.snapshot}")
    if on_recorded is not None:
        on_recorded(r.snapshot, target)
    shutil.rmtree(r.snapshot, ignore_errors=True)
    return replace(r, location=target)
