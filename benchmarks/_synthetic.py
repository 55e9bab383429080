"""Synthetic snapshots of ``n`` small JSON exchanges, built once under ``benchmarks/out/`` and reused."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from _common import OUT


def synthetic_url(i: int) -> str:
    return f"http://127.0.0.1:9/item/{i // 100}/r{i}?q={i % 37}"


def earlier_build(root: Path) -> tuple[Path, dict[str, str]] | None:
    """The synthetic snapshot built earlier under ``root`` and the timings of that build (its
    ``build.json``); ``None``, with ``root`` emptied for a new build, when there is none."""
    done = sorted(root.glob("synthetic/*/manifest.json"))
    if done and (root / "build.json").exists():
        return done[-1].parent, json.loads((root / "build.json").read_text())
    shutil.rmtree(root, ignore_errors=True)
    return None


def synthetic_snapshot(n: int) -> tuple[Path, dict[str, str]]:
    """A zst snapshot of ``n`` records (``ArchiveWriter`` + ``finalize``) and the timings of its build.

    Built under ``benchmarks/out/index-<n>/`` (git-ignored) on first use; later calls reuse it and
    return the timings of that first build (``write_s``, ``finalize_s``, ``date``).
    """
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    root = OUT / f"index-{n}"
    timing = root / "build.json"
    if (earlier := earlier_build(root)) is not None:
        return earlier
    t0 = time.perf_counter()
    sw = SnapshotWriter(root, "synthetic", compression="zst", source="record")
    for i in range(n):
        body = f'{{"id": {i}, "name": "item {i}"}}'.encode()
        sw.writer.write_exchange(url=synthetic_url(i), method="GET", request_headers=[("Host", "127.0.0.1:9")],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "application/json"),
                                                   ("Content-Length", str(len(body)))],
                                 response_body=body)
    t_write = time.perf_counter() - t0
    t1 = time.perf_counter()
    sw.finalize()
    built = {"write_s": t_write, "finalize_s": time.perf_counter() - t1,
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    timing.write_text(json.dumps(built))
    return sw.path, built
