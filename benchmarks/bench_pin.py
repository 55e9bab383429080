"""A run's start: finding every task's newest snapshot, per task against from one listing of the root.

    .venv/bin/python benchmarks/bench_pin.py [--local 200x3] [--s3 100x2] [--reps 3] [--no-write]

A root of T tasks × K snapshots (copies of one small real snapshot, each with its own manifest: task,
id and creation time) in a local folder and, uploaded, on a real S3-compatible server on 127.0.0.1
(moto's, ``testing.s3server.S3Server``). For every task the newest snapshot is found:

* local, *as before*: what a lookup did until this change, reading the whole root per task
  (``list_snapshots(root)``, then the task's first complete snapshot), 8 at a time as ``pin_snapshots``;
* local, *per task now*: ``find_snapshot`` per task (its own folder only), 8 at a time;
* local, *one listing*: ``pin_snapshots`` (``RootListing``);
* s3, *per task*: ``find_snapshot`` per task, 8 at a time (what ``pin_snapshots`` did), warm cache;
* s3, *one listing*: ``pin_snapshots``, the same warm cache.

Reported: median wall time, directory listings (``os.scandir``) or the requests the S3 server saw (its
own log, by kind), and that every way chose the same snapshots. Prints a table and rewrites the
``pin`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    exit_on_sigterm,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
)

WORKERS = 8


def _build(root: Path, tasks: int, per_task: int) -> list[str]:
    """``tasks`` × ``per_task`` snapshots under ``root``; returns the task ids."""
    from ego2web_replay.models import read_model, save_model
    from ego2web_replay.models.snapshot import SnapshotManifest
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    at = datetime(2026, 1, 1)
    seed = SnapshotWriter(root / ".seed", "seed", snapshot_id="seed", clock=lambda: at)
    seed.writer.write_exchange(url="http://a.example/", method="GET", request_headers=[("Accept", "*/*")],
                               request_body=b"", status=200, reason="OK",
                               response_headers=[("Content-Type", "text/plain")], response_body=b"x", date=at)
    seed.finalize()
    manifest = read_model(seed.path / "manifest.json", SnapshotManifest, "snapshot manifest")
    ids = [f"task-{n:04d}" for n in range(tasks)]
    for task in ids:
        for k in range(per_task):
            when = at + timedelta(hours=k)
            sid = when.strftime("%Y%m%dT%H%M%SZ")
            copy = shutil.copytree(seed.path, root / task / sid)
            save_model(copy / "manifest.json", manifest.model_copy(update={"task_id": task, "snapshot_id": sid,
                                                                           "created_at": when}))
    shutil.rmtree(root / ".seed")
    return ids


def _pool(fn: Callable[[str], Any], tasks: list[str]) -> dict[str, str]:
    from ego2web_replay.snapshots.location import name_of

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(tasks, (name_of(p) for p in pool.map(fn, tasks)), strict=True))


def _before(root: Path) -> Callable[[str], Path]:
    """A lookup as it was: the whole root read for one task."""
    from ego2web_replay.snapshots.snapshot import list_snapshots

    def lookup(task: str) -> Path:
        return next(i.path for i in list_snapshots(root) if i.task_id == task and i.complete)

    return lookup


class _Scandirs:
    """Counts directory listings (os.scandir, which Path.iterdir uses) while it is entered."""

    def __enter__(self) -> _Scandirs:
        self.n, self.real = 0, os.scandir

        def counting(path: Any = ".") -> Any:
            self.n += 1
            return self.real(path)

        os.scandir = counting  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        os.scandir = self.real


def _time(fn: Callable[[], dict[str, str]], reps: int) -> tuple[float, dict[str, str]]:
    times, got = [], {}
    for _ in range(reps):
        t0 = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), got


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local", default="200x3", help="tasks x snapshots per task in the local root")
    ap.add_argument("--s3", default="100x2", help="tasks x snapshots per task on s3:// (0x0: skip)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    t_start = time.monotonic()

    from ego2web_replay.models import RunSettings
    from ego2web_replay.runner.episode import find_snapshot
    from ego2web_replay.runner.run import pin_snapshots
    from ego2web_replay.snapshots.location import upload_snapshot

    rows: list[list[object]] = []
    home = Path(tempfile.mkdtemp(prefix="bench-pin-home-"))
    os.environ["EGO2WEB_REPLAY_HOME"] = str(home)
    work = Path(tempfile.mkdtemp(prefix="bench-pin-"))
    try:
        lt, lk = (int(x) for x in args.local.split("x"))
        root = work / "local"
        tasks = _build(root, lt, lk)
        settings = RunSettings(mode="frozen", snapshots_root=str(root))
        ways: list[tuple[str, Callable[[], dict[str, str]]]] = [
            ("as before (whole root per task)", lambda: _pool(_before(root), tasks)),
            ("per task now (own folder)", lambda: _pool(lambda t: find_snapshot(root, t, None), tasks)),
            ("one listing (pin_snapshots)", lambda: pin_snapshots(settings, tasks)[0]),
        ]
        chosen = []
        for label, fn in ways:
            with _Scandirs() as seen:
                fn()
            wall, got = _time(fn, args.reps)
            chosen.append(got)
            rows.append([f"local, {lt} tasks × {lk}", label, f"{wall * 1000:.0f} ms", f"{seen.n:,} listings"])
            print(f"  local {label}: {wall:.3f} s, {seen.n} directory listings")
        same_local = all(c == chosen[0] for c in chosen) and len(chosen[0]) == lt

        st, sk = (int(x) for x in args.s3.split("x"))
        same_s3 = True
        if st:
            from ego2web_replay.testing.s3server import S3Server

            src = work / "s3src"
            s3_tasks = _build(src, st, sk)
            with S3Server() as server:
                os.environ.update(server.env())
                url = f"{server.create_bucket('bench-pin')}/snaps"
                for task in s3_tasks:
                    for snap in sorted((src / task).iterdir()):
                        upload_snapshot(snap, f"{url}/{task}/{snap.name}")
                s3_settings = RunSettings(mode="frozen", snapshots_root=url)
                s3_ways: list[tuple[str, Callable[[], dict[str, str]]]] = [
                    ("per task (as before), warm cache", lambda: _pool(lambda t: find_snapshot(url, t, None),
                                                                       s3_tasks)),
                    ("one listing (pin_snapshots), warm cache", lambda: pin_snapshots(s3_settings, s3_tasks)[0]),
                ]
                s3_chosen = []
                for label, fn in s3_ways:
                    fn()  # the manifests cached
                    server.record_requests()
                    fn()
                    kinds = Counter("listing" if m == "GET" and "list-type" in q else m for m, _, q, _ in
                                    server.requests())
                    wall, got = _time(fn, args.reps)
                    s3_chosen.append(got)
                    counted = ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items()))
                    rows.append([f"s3, {st} tasks × {sk}", label, f"{wall * 1000:.0f} ms",
                                 f"{sum(kinds.values()):,} requests ({counted})"])
                    print(f"  s3 {label}: {wall:.3f} s, {dict(kinds)}")
                same_s3 = all(c == s3_chosen[0] for c in s3_chosen) and len(s3_chosen[0]) == st
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)

    header = ["root", "how", "wall (median)", "asked"]
    print()
    print(text_table(header, rows))
    print(f"same snapshots chosen every way: local {same_local}, s3 {same_s3}")
    print(f"took {time.monotonic() - t_start:.0f} s")
    body = f"""## A run's start: every task's newest snapshot (`benchmarks/bench_pin.py`)

A root of tasks × snapshots per task (copies of one small real snapshot with their own manifests) in a
local folder and on a real S3-compatible server on 127.0.0.1 (moto's, one Python process: slower per
request than a real store, with no network latency). Every task's newest snapshot found {WORKERS} tasks
at a time: *as before* reads the whole root per task (`list_snapshots`, what a local lookup did until
`RootListing`); *per task now* is `find_snapshot`, its own task's folder only; *one listing* is
`pin_snapshots` (`snapshots/rootlist.py`). On s3:// the per-task row is what `pin_snapshots` did
before; both with the manifests already in the cache. *Asked*: directory listings (`os.scandir`) of
one round, or the requests the S3 server logged for one round, by kind. Medians of {args.reps} rounds.
Same snapshots chosen every way: local {same_local}, s3 {same_s3}. One machine, shared with other
work: read the ratios, not the absolute figures.

{markdown_table(header, rows)}

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("pin", body)
        print("BENCHMARKS.md: section 'pin' updated")


if __name__ == "__main__":
    main()
