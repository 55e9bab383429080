"""Snapshots on object storage: time to open a snapshot from S3 (moto on 127.0.0.1), cold and warm.

    .venv/bin/python benchmarks/bench_objstore.py [--sizes 1000,10000] [--reps 3] [--no-write]

A synthetic snapshot per size (``_synthetic.py``) is uploaded to a real S3-compatible server on
127.0.0.1 (moto's, ``testing.s3server.S3Server``) with ``upload_snapshot``. Then, for the local
folder and for the ``s3://`` URL with the content-addressed cache emptied first (cold) or kept
(warm), in that order, ``--reps`` times: ``open_snapshot`` (manifest, index and learned volatility),
``Replay.open`` (that plus the match index a frozen episode builds) and reading 100 records spread over
the archive. Reported are medians, and the GETs and bytes the last repetition fetched from the store.
Prints a table and rewrites the ``objstore`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
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
from _synthetic import synthetic_snapshot  # noqa: E402


def _measure(location: Any) -> dict[str, float]:
    from ego2web_replay.replay.session import Replay
    from ego2web_replay.snapshots.location import open_snapshot

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    snap = open_snapshot(location)
    entries = snap.entries()
    out["open"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    replay = Replay([location], check=False)
    replay.open()
    out["replay"] = time.perf_counter() - t0
    step = max(1, len(entries) // 100)
    picked = entries[::step][:100]
    t0 = time.perf_counter()
    for entry in picked:
        snap.record(entry)
    out["records"] = time.perf_counter() - t0
    remote = getattr(getattr(snap, "storage", None), "remote", None)
    opened = [s for s in replay.snapshots if hasattr(s.storage, "remote")]
    out["gets"] = float((remote.gets if remote else 0) + sum(s.storage.remote.gets for s in opened))
    out["bytes"] = float((remote.bytes_read if remote else 0) + sum(s.storage.remote.bytes_read for s in opened))
    return out


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000", help="captures per synthetic snapshot, comma-separated")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each measurement (median reported)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    t_start = time.monotonic()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    from ego2web_replay.snapshots.location import upload_snapshot
    from ego2web_replay.testing.s3server import S3Server

    home = Path(tempfile.mkdtemp(prefix="bench-objstore-home-"))
    os.environ["EGO2WEB_REPLAY_HOME"] = str(home)  # the cache lives here; emptied for every cold open
    rows: list[list[object]] = []
    uploads: list[str] = []
    with S3Server() as server:
        os.environ.update(server.env())
        bucket = server.create_bucket("bench")
        for n in sizes:
            folder, _build = synthetic_snapshot(n)
            archive_mb = sum(f.stat().st_size for f in folder.iterdir() if f.name.startswith("archive")) / 2**20
            url = f"{bucket}/snapshots/synthetic-{n}/{folder.name}"
            t0 = time.perf_counter()
            upload_snapshot(folder, url)
            uploads.append(f"{n:,} captures ({archive_mb:.1f} MB archive): {time.perf_counter() - t0:.2f} s")
            results: dict[str, list[dict[str, float]]] = {"local folder": [], "s3, cold cache": [],
                                                          "s3, warm cache": []}
            for _ in range(args.reps):
                results["local folder"].append(_measure(folder))
                for name in ("object-cache", "remote-snapshots", "index-cache"):
                    shutil.rmtree(home / name, ignore_errors=True)
                results["s3, cold cache"].append(_measure(url))
                results["s3, warm cache"].append(_measure(url))
            for label, got in results.items():
                med = {k: statistics.median(r[k] for r in got) for k in ("open", "replay", "records")}
                last = got[-1]
                rows.append([f"{n:,}", label, f"{med['open'] * 1000:.0f} ms", f"{med['replay'] * 1000:.0f} ms",
                             f"{med['records'] * 1000:.0f} ms", f"{last['gets']:.0f}",
                             f"{last['bytes'] / 1024:.0f} KB"])
                print(f"  {n} {label}: open {med['open']:.3f} s, replay open {med['replay']:.3f} s, "
                      f"100 records {med['records']:.3f} s, {last['gets']:.0f} GETs, {last['bytes'] / 1024:.0f} KB")
    shutil.rmtree(home, ignore_errors=True)

    header = ["captures", "where", "open + index", "replay open", "100 records", "GETs", "downloaded"]
    print()
    print(text_table(header, rows))
    print(f"took {time.monotonic() - t_start:.0f} s")
    body = f"""## Snapshots on object storage (`benchmarks/bench_objstore.py`)

Synthetic snapshots (small JSON exchanges, zstd, `_synthetic.py`) uploaded with `upload_snapshot` to a
real S3-compatible server on 127.0.0.1 (moto's server, one Python process: slower per request than a
real store, but with no network latency). Per size, {args.reps} rounds of: the local folder, then the
`s3://` URL with the content-addressed cache emptied (cold), then again with it kept (warm). *Open +
index*: `open_snapshot` and its index entries; *replay open*: `Replay.open` (that plus the match index a
frozen episode builds); *100 records*: records spread over the archive, read by range. Medians; GETs and
bytes are what the last round fetched from the store (the warm rows: nothing but the manifest's ETag, a
HEAD). One machine, shared with other work: read the ratios, not the absolute figures.

{markdown_table(header, rows)}

- Upload (every file, the manifest last): {"; ".join(uploads)}.
- A cold open downloads the manifest, the index and the learned volatility whole (checked against the
  manifest's sha256) and then only the 1 MiB archive blocks holding the records read; a warm open
  downloads nothing.
- *Replay open* of a local folder whose index holds 512 KiB or more uses the mapped index (built on its
  first use); a snapshot read through object storage is matched with the in-memory index.

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("objstore", body)
        print("BENCHMARKS.md: section 'objstore' updated")


if __name__ == "__main__":
    main()
