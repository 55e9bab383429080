"""Snapshots that travel: bytes per suite (per-task gzip, per-task zstd, deduplicated, deduplicated +
dictionary, the pack file) on a suite of many tasks on one site and on the demo suite; replay
throughput and index-open time of a deduplicated suite next to a plain one.

    .venv/bin/python benchmarks/bench_travel.py [--tasks 12] [--pages 4] [--rounds 3] [--duration 4]

Everything runs on 127.0.0.1. The one-site suite: ``--tasks`` tasks on the local multi-page site
(``RealisticSite``), task k visiting pages k and k+1 (mod ``--pages``) in fresh Chromium contexts,
each recorded through our recorder as a ``.warc.gz``. The demo suite: the demo site's tasks recorded
with ``record_task`` (their reference actions), ``.warc.gz``. Per-task zstd is each snapshot
imported into ``.warc.zst`` (one frame per record, level 3, as ``record`` writes it). Prints a
table and rewrites the ``travel`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

import _peers  # noqa: E402
from _common import (  # noqa: E402
    RealisticSite,
    RecordingProxy,
    exit_on_sigterm,
    free_port,
    launch_chromium,
    machine_info,
    machine_lines,
    markdown_table,
    median,
    run_load,
    serve_site_forever,
    text_table,
    timed_load,
    update_section,
    wait_port,
)


def record_site_suite(root: Path, tasks: int, pages: int) -> list[Path]:
    """``tasks`` gzip snapshots of the local multi-page site."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = multiprocessing.get_context("fork").Process(target=serve_site_forever, args=(port, pages), daemon=True)
    proc.start()
    out = []
    try:
        wait_port(port)
        site = RealisticSite(pages=pages)
        site.port = port
        urls = site.page_urls()
        with sync_playwright() as pw:
            for k in range(tasks):
                with RecordingProxy(root, f"task-{k:02d}", "gz") as rec:
                    browser = launch_chromium(pw, rec.proxy.url)
                    for url in (urls[k % pages], urls[(k + 1) % pages]):
                        timed_load(browser, url)
                        rec.writer.add_page(url)
                    browser.close()
                out.append(rec.writer.path)
    finally:
        proc.kill()
    return out


def record_demo_suite(root: Path) -> list[Path]:
    """The demo suite's tasks, recorded (gzip) against the demo site."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import load_tasks

    site = DemoSite().start()
    try:
        suite = load_tasks(write_demo_suite(root / "suite", site.url))
        out = []
        for task in suite.tasks:
            r = record_task(task, root / "snapshots", RecordOptions(guard="loopback", compression="gz",
                                                                     screenshots=False))
            if not r.ok or r.snapshot is None:
                raise RuntimeError(f"recording {task.id} failed: {r.error}")
            out.append(r.snapshot)
        return out
    finally:
        site.stop()


def _archives(folder: Path) -> int:
    """Bytes of the archives (snapshots and shared stores) under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("archive.warc*") if p.is_file())


def suite_sizes(name: str, gz: list[Path], work: Path) -> tuple[dict[str, float], dict[str, Path]]:
    """Bytes of one suite in every layout; returns the row and the folders made (for replay)."""
    from ego2web_replay.snapshots import import_warc
    from ego2web_replay.snapshots.dedup import dedup_snapshots
    from ego2web_replay.snapshots.pack import pack_suite

    plain = work / f"{name}-zst"
    for snap in gz:
        task = snap.parent.name
        import_warc(snap / "archive.warc.gz", task, plain, snapshot_id=snap.name, compression="zst")
    t0 = time.perf_counter()
    dedup = dedup_snapshots(gz, work / f"{name}-dedup")
    t_dedup = time.perf_counter() - t0
    t0 = time.perf_counter()
    ddict = dedup_snapshots(gz, work / f"{name}-dedup-dict", dictionary=True)
    t_dict = time.perf_counter() - t0
    gz_root = gz[0].parent.parent
    t0 = time.perf_counter()
    pack = pack_suite(gz_root, work / f"{name}.pack")
    t_pack = time.perf_counter() - t0
    row = {
        "tasks": len(gz),
        "gzip": sum((s / "archive.warc.gz").stat().st_size for s in gz),
        "zstd": _archives(plain),
        "dedup": _archives(dedup.root),
        "dedup_dict": _archives(ddict.root),
        "pack": pack.bytes,
        "shared": dedup.stored_payloads,
        "revisits": dedup.revisits,
        "dict_kib": ddict.dictionary_bytes / 1024,
        "t_dedup": t_dedup, "t_dict": t_dict, "t_pack": t_pack,
    }
    return row, {"plain": plain, "dedup": dedup.root, "dedup+dict": ddict.root}


def replay_compare(roots: dict[str, Path], task: str, rounds: int, duration: float) -> dict[str, dict[str, float]]:
    """Index-open time (Replay.open) and requests/s through ``serve`` for one task in each layout."""
    from ego2web_replay.replay.session import Replay
    from ego2web_replay.snapshots import Snapshot
    from ego2web_replay.snapshots.dedup import _OPEN

    snaps = {k: next((root / task).iterdir()) for k, root in roots.items()}
    urls = sorted({e.url for e in Snapshot.open(snaps["plain"]).entries() if e.status == 200 and e.method == "GET"})
    res: dict[str, dict[str, float]] = {k: {"open": [], "first": [], "rps": [], "p50": [], "errors": 0}
                                         for k in snaps}  # type: ignore[misc]
    for _ in range(5):  # index open + the first request's resolve, interleaved
        for k, path in snaps.items():
            _OPEN.clear()
            r = Replay([path], miss="404")
            t0 = time.perf_counter()
            r.open()
            res[k]["open"].append((time.perf_counter() - t0) * 1000)  # type: ignore[union-attr]
            snap = r.snapshots[0]
            entry = next(e for e in snap.entries() if e.url == urls[0])
            t0 = time.perf_counter()
            snap.resolve(entry)
            res[k]["first"].append((time.perf_counter() - t0) * 1000)  # type: ignore[union-attr]
    tmp = Path(tempfile.mkdtemp(prefix="bench-travel-serve-"))
    peers = {}
    try:
        for k, path in snaps.items():
            p = _peers.ours(path, free_port(), 3600, tmp / f"{k}-stats.json")
            p.log = tmp / f"{k}.log"
            peers[k] = p.start()
        for p in peers.values():  # warm-up
            run_load(p.port, urls, concurrency=8, duration=1.0)
        for _ in range(rounds):
            for k, p in peers.items():
                r = run_load(p.port, urls, concurrency=8, duration=duration)
                res[k]["rps"].append(r["rps"])  # type: ignore[union-attr]
                res[k]["p50"].append(r["p50"])  # type: ignore[union-attr]
                res[k]["errors"] += r["errors"]  # type: ignore[operator]
    finally:
        for p in peers.values():
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {k: {"open_ms": median(v["open"]), "first_ms": median(v["first"]), "rps": median(v["rps"]),  # type: ignore[arg-type]
                "p50": median(v["p50"]), "errors": v["errors"], "urls": len(urls)}  # type: ignore[arg-type, dict-item]
            for k, v in res.items()}


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f}"


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=12, help="tasks of the one-site suite")
    ap.add_argument("--pages", type=int, default=4, help="pages of the local site")
    ap.add_argument("--rounds", type=int, default=3, help="load rounds per layout, interleaved (median reported)")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per load round")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    work = Path(tempfile.mkdtemp(prefix="bench-travel-"))
    t_start = time.monotonic()
    try:
        site_gz = record_site_suite(work / "site-gz", args.tasks, args.pages)
        demo_gz = record_demo_suite(work / "demo")
        site_row, site_roots = suite_sizes("site", site_gz, work)
        demo_row, _ = suite_sizes("demo", demo_gz, work)
        replay = replay_compare(site_roots, "task-00", args.rounds, args.duration)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    size_header = ["suite", "tasks", "per-task gzip MB", "per-task zstd MB", "dedup MB", "dedup+dict MB", "pack MB",
                   "dedup+dict / gzip", "shared payloads", "revisits", "dictionary KiB"]
    size_rows = []
    for label, row in ((f"one site ({args.pages} pages)", site_row), ("demo suite", demo_row)):
        size_rows.append([label, row["tasks"], _mb(row["gzip"]), _mb(row["zstd"]), _mb(row["dedup"]),
                          _mb(row["dedup_dict"]), _mb(row["pack"]), f"{row['dedup_dict'] / row['gzip']:.2f}",
                          row["shared"], row["revisits"], f"{row['dict_kib']:.1f}"])
    replay_header = ["layout", "index open ms", "first resolve ms", "req/s", "p50 ms", "non-200 + errors"]
    replay_rows = [[k, f"{v['open_ms']:.2f}", f"{v['first_ms']:.2f}", f"{v['rps']:.0f}", f"{v['p50']:.1f}",
                    int(v["errors"])] for k, v in replay.items()]
    print(text_table(size_header, size_rows))
    print()
    print(text_table(replay_header, replay_rows))
    elapsed = time.monotonic() - t_start
    any_replay = next(iter(replay.values()))
    reading = (f"Reading: on the one-site suite, deduplication alone keeps "
               f"{site_row['dedup'] / site_row['gzip']:.0%} of the per-task gzip bytes and deduplication with a "
               f"dictionary {site_row['dedup_dict'] / site_row['gzip']:.0%}; per-task zstd without a dictionary is "
               f"{site_row['zstd'] / site_row['gzip']:.2f}x gzip (the payloads are already compressed). The demo "
               f"suite's payloads are mostly under the 256-byte threshold, so there the dictionary does the work. "
               "Replay figures on this shared 2-core machine move by tens of percent between rounds; the "
               "deduplicated layouts pay one more index load (the store's) and, with a dictionary, one "
               "dictionary load per archive file, both at the first resolve.")
    body = f"""## Snapshots that travel (`benchmarks/bench_travel.py`)

Bytes per suite, archives only (snapshot archives plus the shared store; indexes and manifests
excluded), except "pack MB", the whole `suite pack` file (deduplicated, dictionary, indexes,
manifests, checksums). **One site**: {args.tasks} tasks on the local multi-page site (`RealisticSite`,
~50 subresources a page, half of them shared between pages), task k loading pages k and k+1 of
{args.pages} in fresh Chromium contexts. **Demo suite**: the demo site's {demo_row['tasks']} tasks,
recorded with their reference actions. Every snapshot recorded once as `.warc.gz` (one gzip member
per record); per-task zstd is the same records one zstd frame each (level 3, as `record` writes
them); "dedup" stores each payload of 256 bytes or more that occurs twice or more once per suite
(revisit records elsewhere); "+dict" adds a zstd dictionary trained on the suite (IIPC layout, one
copy at the head of every archive).

{markdown_table(size_header, size_rows)}

Replay of one task (`task-00` of the one-site suite, {any_replay['urls']} distinct 200 GET URLs)
in three layouts: the plain per-task `.warc.zst` snapshot, the deduplicated one (revisits resolved
through the shared store) and deduplicated + dictionary. "Index open" is `Replay.open()` (manifest,
CDXJ, matching tables), median of 5, interleaved; "first resolve" is the first `Snapshot.resolve`
of the page (for the deduplicated layouts it opens the shared store's index). Throughput: our
`ego2web-replay serve` in its own process, a keep-alive load client with 8 connections sending
absolute-form requests over all the URLs for {args.duration:.0f} s, {args.rounds} rounds interleaved
across layouts, median.

{markdown_table(replay_header, replay_rows)}

{reading}

Whole run: {elapsed:.0f} s.

{machine_lines(info)}
"""
    if not args.no_write:
        update_section("travel", body)
        print("\nwrote the travel section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
