"""Recorder overhead: page-load time in Chromium directly vs through the recording proxy,
recorder throughput (exchanges/s) and archive bytes per exchange, zst vs gz.

    /work/main/.venv/bin/python benchmarks/bench_record.py [--reps 7] [--duration 4]

Everything runs on 127.0.0.1: a local multi-page site (in its own process) with ~50
subresources per page, the recording proxy (``record_addons`` with the guard in loopback mode,
writing a real snapshot) in this process, Chromium via Playwright. Prints a table and rewrites
the ``record`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    RealisticSite,
    RecordingProxy,
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
from _warcprox import Warcprox  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="page loads per mode and compression (median reported)")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per throughput run")
    ap.add_argument("--runs", type=int, default=3, help="throughput runs per mode (median reported)")
    ap.add_argument("--concurrency", type=int, default=8, help="client threads in the throughput test")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    t_start = time.monotonic()

    site = RealisticSite(pages=1)
    port = free_port()
    proc = multiprocessing.get_context("fork").Process(target=serve_site_forever, args=(port, 1), daemon=True)
    proc.start()
    site.port = port
    wait_port(port)
    page_url = site.page_urls()[0]
    small = [f"{site.url}/small/{i}" for i in range(200)]

    from playwright.sync_api import sync_playwright

    loads: dict[str, dict[str, list[float]]] = {}
    thr: dict[str, list[dict[str, float]]] = {"direct": []}
    sizes: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp, sync_playwright() as pw:
            direct_browser = launch_chromium(pw)
            timed_load(direct_browser, page_url)  # warm-up (process start, disk cache of the binary)
            for comp in ("zst", "gz"):
                # 1) page loads, interleaved direct / our recorder / warcprox, fresh context each
                d_load, d_done, r_load, r_done, w_load, w_done = [], [], [], [], [], []
                peer = Warcprox(Path(tmp) / f"warcprox-{comp}", free_port())
                with RecordingProxy(Path(tmp), f"pages-{comp}", comp) as rec, peer:
                    browser = launch_chromium(pw, rec.proxy.url)
                    wbrowser = launch_chromium(pw, peer.url)
                    timed_load(browser, page_url)  # warm-up
                    timed_load(wbrowser, page_url)
                    for _ in range(args.reps):
                        for b, loads_, dones in ((direct_browser, d_load, d_done), (browser, r_load, r_done),
                                                 (wbrowser, w_load, w_done)):
                            a, z = timed_load(b, page_url)
                            loads_.append(a)
                            dones.append(z)
                    browser.close()
                    wbrowser.close()
                page_exchanges = rec.recorder.exchanges
                revisits = rec.writer.writer.revisits_written
                sizes[f"page mix, {comp}"] = {"exchanges": page_exchanges, "bytes": rec.archive_bytes,
                                              "revisits": revisits}
                counts = peer.records()
                sizes[f"page mix, warcprox {peer.version} (gzip), beside {comp}"] = {
                    "exchanges": counts.get("response", 0) + counts.get("revisit", 0), "bytes": peer.archive_bytes,
                    "revisits": counts.get("revisit", 0)}
                loads[comp] = {"direct_load": d_load, "direct_done": d_done, "rec_load": r_load, "rec_done": r_done,
                               "warcprox_load": w_load, "warcprox_done": w_done}
                # 2) throughput: many small GETs through the recorder, keep-alive, N threads
                runs = []
                with RecordingProxy(Path(tmp), f"small-{comp}", comp) as rec:
                    for _ in range(args.runs):
                        if comp == "zst":
                            thr["direct"].append(run_load(port, small, concurrency=args.concurrency,
                                                          duration=args.duration, via_proxy=False))
                        runs.append(run_load(rec.proxy.port, small, concurrency=args.concurrency,
                                             duration=args.duration))
                sizes[f"1 KiB mix, {comp}"] = {"exchanges": rec.recorder.exchanges, "bytes": rec.archive_bytes,
                                               "revisits": rec.writer.writer.revisits_written}
                thr[comp] = runs
            direct_browser.close()
    finally:
        proc.kill()

    # -- report ---------------------------------------------------------------------------------
    rows = []
    peer_rows = []
    for comp, m in loads.items():
        for what, key in (("`load`", "load"), ("last XHR", "done")):
            ours = [r / d for r, d in zip(m[f"rec_{key}"], m[f"direct_{key}"], strict=True)]
            theirs = [r / d for r, d in zip(m[f"warcprox_{key}"], m[f"direct_{key}"], strict=True)]
            rows.append([f"page load to {what} ({comp})", f"{median(m[f'direct_{key}']):.0f} ms",
                         f"{median(m[f'rec_{key}']):.0f} ms", f"{median(ours):.2f}x"])
            peer_rows.append([f"page load to {what} (ours: {comp})", f"{median(m[f'direct_{key}']):.0f} ms",
                              f"{median(m[f'rec_{key}']):.0f} ms ({median(ours):.2f}x)",
                              f"{median(m[f'warcprox_{key}']):.0f} ms ({median(theirs):.2f}x)",
                              f"{median(ours) / median(theirs):.2f}"])
    d_rps = median([r["rps"] for r in thr["direct"]])
    for comp in ("zst", "gz"):
        rps = median([r["rps"] for r in thr[comp]])
        p50 = median([r["p50"] for r in thr[comp]])
        rows.append([f"throughput, 1 KiB GETs, {args.concurrency} conns ({comp})", f"{d_rps:.0f} req/s",
                     f"{rps:.0f} exchanges/s (p50 {p50:.1f} ms)", f"{rps / d_rps:.2f}x"])
    header = ["measure", "direct", "through the recorder", "recorder / direct"]
    size_rows = []
    for label, s in sizes.items():
        size_rows.append([label, s["exchanges"], s["revisits"], f"{s['bytes'] / 1024:.0f} KiB",
                          f"{s['bytes'] / max(1, s['exchanges']):.0f} B"])
    for mix in ("page mix", "1 KiB mix"):
        z, g = sizes[f"{mix}, zst"], sizes[f"{mix}, gz"]
        size_rows.append([f"{mix}: zst / gz bytes per exchange", "", "", "",
                          f"{(z['bytes'] / z['exchanges']) / (g['bytes'] / g['exchanges']):.2f}"])
    size_header = ["archive", "exchanges", "of them revisits", "archive size", "bytes / exchange"]
    peer_header = ["measure", "direct", "our recorder (ratio to direct)", "warcprox (ratio to direct)",
                   "ours / warcprox"]
    errors = sum(r["errors"] for v in thr.values() for r in v)

    print(text_table(header, rows))
    print()
    print(text_table(peer_header, peer_rows))
    print()
    print(text_table(size_header, size_rows))
    print(f"\nload-client errors: {errors}; took {time.monotonic() - t_start:.0f} s")

    body = f"""## Recorder (`benchmarks/bench_record.py`)

One local page with {site.subresources_per_page()} subresources (6 CSS, 12 JS, 24 PNG, 2 fonts, 8 XHR),
loaded {args.reps} times in a fresh Chromium context (empty cache) directly, through our
recording proxy (guard in loopback mode + recorder writing a snapshot, identical payloads of 256
bytes or more stored once per recording as revisit records, the `record` default) and through
warcprox (gzip WARCs, its default deduplication of every payload, a fresh dedup database),
interleaved; medians of the per-pair ratios to direct. Throughput: {args.concurrency} client threads
(keep-alive, own process) fetching 1 KiB resources for {args.duration:.0f} s, {args.runs} runs, median.
Bytes per exchange: archive size / recorded exchanges (the page mix is what a real recording looks
like: the same page recorded {args.reps + 1} times, so most payloads repeat).

{markdown_table(header, rows)}

Side by side with warcprox (one Chromium each, same page, same rounds):

{markdown_table(peer_header, peer_rows)}

{markdown_table(size_header, size_rows)}

Load-client errors: {errors}.

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("record", body)
        print("BENCHMARKS.md: section 'record' updated")


if __name__ == "__main__":
    main()
