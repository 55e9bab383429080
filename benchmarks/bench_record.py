"""Recorder overhead: page-load time in Chromium directly vs through the recording proxy,
recorder throughput (exchanges/s) and archive bytes per exchange, zst vs gz.

    /work/main/.venv/bin/python benchmarks/bench_record.py [--reps 7] [--duration 4]
    /work/main/.venv/bin/python benchmarks/bench_record.py --stream   # TTFB and memory by response size
    /work/main/.venv/bin/python benchmarks/bench_record.py --stream --stream-pin   # the origin on a core of its own

Everything runs on 127.0.0.1: a local multi-page site (in its own process) with ~50
subresources per page, the recording proxy (guard in loopback mode, writing a real snapshot; each
engine: the fast front end and the mitmproxy master with ``record_addons``) in this process,
warcprox in its own, Chromium via Playwright. Prints a table and rewrites
the ``record`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

import _recordstream  # noqa: E402
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
from _warcprox import Warcprox  # noqa: E402

ENGINES = ("fast", "mitmproxy")
Times = dict[str, list[tuple[float, float]]]


def _ratio(t: Times, k: int, mode: str) -> float:
    """Median over the rounds of ``mode``'s time over direct's (k: 0 load, 1 last XHR)."""
    return median([x[k] / d[k] for x, d in zip(t[mode], t["direct"], strict=True)])


def _ms(t: Times, k: int, mode: str) -> float:
    return median([x[k] for x in t[mode]])


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="page loads per mode and compression (median reported)")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per throughput run")
    ap.add_argument("--runs", type=int, default=3, help="throughput runs per mode (median reported)")
    ap.add_argument("--concurrency", type=int, default=8, help="client threads in the throughput test")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--stream", action="store_true",
                    help="only time to first byte and recorder memory for large responses, beside direct, "
                         "warcprox, nginx and the Python floor (~5 min); rewrites the record-stream section")
    ap.add_argument("--stream-sizes", default="1,100", help="--stream: response sizes in MiB, comma-separated")
    ap.add_argument("--stream-pin", action="store_true",
                    help="--stream: the origin on CPU 1, every proxy and the client on CPU 0 (two CPUs needed); "
                         "rewrites the record-stream-pinned section instead")
    ap.add_argument("--stream-reps", type=int, default=30,
                    help="--stream: rounds (one fetch per size and mode each; medians, ratio intervals)")
    args = ap.parse_args()
    if args.stream_reps < 1:
        ap.error("--stream-reps must be at least 1")
    info = machine_info()
    if args.stream:
        stream_report(args, info)
        return
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
                # 1) page loads, interleaved direct / our recorder (both engines) / warcprox, fresh context each
                times: dict[str, list[tuple[float, float]]] = {m: [] for m in ("direct", *ENGINES, "warcprox")}
                peer = Warcprox(Path(tmp) / f"warcprox-{comp}", free_port())
                with RecordingProxy(Path(tmp), f"pages-{comp}", comp) as rec, \
                        RecordingProxy(Path(tmp), f"pages-{comp}-mitm", comp, engine="mitmproxy") as mrec, peer:
                    browsers = {"direct": direct_browser, "fast": launch_chromium(pw, rec.proxy.url),
                                "mitmproxy": launch_chromium(pw, mrec.proxy.url),
                                "warcprox": launch_chromium(pw, peer.url)}
                    for mode in ("fast", "mitmproxy", "warcprox"):
                        timed_load(browsers[mode], page_url)  # warm-up
                    for _ in range(args.reps):
                        for mode, b in browsers.items():
                            times[mode].append(timed_load(b, page_url))
                    for mode in ("fast", "mitmproxy", "warcprox"):
                        browsers[mode].close()
                sizes[f"page mix, {comp}"] = {"exchanges": rec.recorder.exchanges, "bytes": rec.archive_bytes,
                                              "revisits": rec.writer.writer.revisits_written}
                counts = peer.records()
                sizes[f"page mix, warcprox {peer.version} (gzip), beside {comp}"] = {
                    "exchanges": counts.get("response", 0) + counts.get("revisit", 0), "bytes": peer.archive_bytes,
                    "revisits": counts.get("revisit", 0)}
                loads[comp] = times
                # 2) throughput: many small GETs through the recorder, keep-alive, N threads
                for engine in ENGINES:
                    runs = []
                    with RecordingProxy(Path(tmp), f"small-{comp}-{engine}", comp, engine=engine) as rec:
                        for _ in range(args.runs):
                            if comp == "zst" and engine == "fast":
                                thr["direct"].append(run_load(port, small, concurrency=args.concurrency,
                                                              duration=args.duration, via_proxy=False))
                            runs.append(run_load(rec.proxy.port, small, concurrency=args.concurrency,
                                                 duration=args.duration))
                    if engine == "fast":
                        sizes[f"1 KiB mix, {comp}"] = {"exchanges": rec.recorder.exchanges, "bytes": rec.archive_bytes,
                                                       "revisits": rec.writer.writer.revisits_written}
                    thr[f"{comp}, {engine}"] = runs
            direct_browser.close()
    finally:
        proc.kill()

    # -- report ---------------------------------------------------------------------------------
    rows = []
    peer_rows = []
    for comp, t in loads.items():
        for what, k in (("`load`", 0), ("last XHR", 1)):
            direct = [x[k] for x in t["direct"]]
            ratio = functools.partial(_ratio, t, k)
            ms = functools.partial(_ms, t, k)
            rows.append([f"page load to {what} ({comp}), fast engine", f"{median(direct):.0f} ms",
                         f"{ms('fast'):.0f} ms", f"{ratio('fast'):.2f}x"])
            rows.append([f"page load to {what} ({comp}), mitmproxy engine", f"{median(direct):.0f} ms",
                         f"{ms('mitmproxy'):.0f} ms", f"{ratio('mitmproxy'):.2f}x"])
            peer_rows.append([f"page load to {what} (ours: {comp})", f"{median(direct):.0f} ms",
                              f"{ms('fast'):.0f} ms ({ratio('fast'):.2f}x)",
                              f"{ms('mitmproxy'):.0f} ms ({ratio('mitmproxy'):.2f}x)",
                              f"{ms('warcprox'):.0f} ms ({ratio('warcprox'):.2f}x)",
                              f"{ratio('fast') / ratio('warcprox'):.2f}"])
    d_rps = median([r["rps"] for r in thr["direct"]])
    for comp in ("zst", "gz"):
        for engine in ENGINES:
            runs = thr[f"{comp}, {engine}"]
            rps = median([r["rps"] for r in runs])
            p50 = median([r["p50"] for r in runs])
            rows.append([f"throughput, 1 KiB GETs, {args.concurrency} conns ({comp}), {engine} engine",
                         f"{d_rps:.0f} req/s", f"{rps:.0f} exchanges/s (p50 {p50:.1f} ms)", f"{rps / d_rps:.2f}x"])
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
    peer_header = ["measure", "direct", "ours, fast engine (ratio to direct)", "ours, mitmproxy engine",
                   "warcprox (ratio to direct)", "fast / warcprox"]
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
bytes or more stored once per recording as revisit records, the `record` default), with each of its
two engines (`fast`, the default: the asyncio front end of `recorder/front.py`; `mitmproxy`: the
mitmproxy master with our addons), and through
warcprox (gzip WARCs, its default deduplication of every payload, a fresh dedup database),
interleaved; medians of the per-pair ratios to direct. Throughput: {args.concurrency} client threads
(keep-alive, own process) fetching 1 KiB resources for {args.duration:.0f} s, {args.runs} runs, median.
Bytes per exchange: archive size / recorded exchanges (the page mix is what a real recording looks
like: the same page recorded {args.reps + 1} times, so most payloads repeat).
A ratio under 1 is possible: Chromium pools its connections to a proxy differently from those to
an origin, and the fast engine keeps its own upstream connections alive; what counts is the
comparison of the proxies measured in the same rounds.

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


def _verdict(ratio: tuple[float, float, float], limit: float) -> str:
    """A (median, low, high) ratio against ``limit``: met by the median, and whether the interval is within it."""
    if ratio[0] > limit:
        return "NOT met"
    return "met, interval within" if ratio[2] <= limit else f"met by the median; interval reaches {ratio[2]:.2f}x"


def floor_verdict(ours: tuple[float, float, float], floors: dict[str, tuple[float, float, float]],
                  limit: float) -> str:
    """What the floors measured in the same rounds say of ``limit`` on ours / direct: is any proxy hop
    here within it? ``floors``: (median, low, high) of each floor over direct, ``nginx`` the fastest."""
    fast = min(floors, key=lambda k: floors[k][0])
    parts = ", ".join(f"{k} {_recordstream.ratio_text(v)}" for k, v in floors.items())
    if all(v[1] > limit for v in floors.values()):
        return (f"even the floors miss {limit}x direct ({parts}; every interval above it): not reachable by any "
                f"proxy hop on this machine")
    if all(v[0] > limit for v in floors.values()):
        reach = ", ".join(f"{k}'s to {v[1]:.2f}x" for k, v in floors.items() if v[1] <= limit)
        return (f"every floor misses {limit}x direct by its median ({parts}): by the medians not reachable by a "
                f"proxy hop here; not proved, the intervals reach below ({reach})")
    met = [k for k, v in floors.items() if v[0] <= limit]
    return (f"{' and '.join(met)} within {limit}x direct by the median ({parts}): reachable by a proxy hop here; "
            f"ours {_recordstream.ratio_text(ours)} direct, {ours[0] / floors[fast][0]:.2f}x the fastest floor's "
            f"median ratio ({fast})")


def stream_report(args: argparse.Namespace, info: dict[str, str]) -> None:
    """The ``--stream`` run (``_recordstream.py``): TTFB and memory by response size, with the floors."""
    sizes = [int(float(x) * 2**20) for x in args.stream_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-record-stream-") as tmp:
        res = _recordstream.measure(Path(tmp), sizes, args.stream_reps, pin=args.stream_pin)
    header, rows, ratio_header, ratio_rows = _recordstream.rows(res, sizes)
    print(text_table(header, rows))
    print(text_table(ratio_header, ratio_rows))
    big = sizes[-1]
    mib = f"{big / 2**20:.4g} MiB"
    ratio = res[big]["ratio"]
    text = _recordstream.ratio_text
    floors = {"nginx": ratio["nginx/direct"], "pyfloor": ratio["pyfloor/direct"]}
    targets = [[f"TTFB through the recorder <= 1.2x direct ({mib})", text(ratio["ours/direct"]),
                _verdict(ratio["ours/direct"], 1.2)],
               [f"floor: TTFB nginx / direct ({mib})", text(ratio["nginx/direct"]), _verdict(ratio["nginx/direct"], 1.2)],
               [f"floor: TTFB pyfloor / direct ({mib})", text(ratio["pyfloor/direct"]),
                _verdict(ratio["pyfloor/direct"], 1.2)],
               [f"is 1.2x reachable by any proxy hop here ({mib})", "-", floor_verdict(ratio["ours/direct"], floors, 1.2)],
               [f"ours over the floors ({mib}): / nginx, / pyfloor", f"{text(ratio['ours/nginx'])}, "
                f"{text(ratio['ours/pyfloor'])}", "-"],
               [f"TTFB ours vs warcprox ({mib})", text(ratio["ours/warcprox"]), "-"],
               [f"TTFB from connect() (the accept always inside), ours / direct ({mib})",
                text(res[big]["connect_ratio"]["ours/direct"]), "-"],
               [f"recorder memory bounded by the stream: peak RSS growth {sizes[0] / 2**20:.4g} MiB vs "
                f"{mib} response", f"{res[sizes[0]]['rss']['ours']:.1f} vs {res[big]['rss']['ours']:.1f} MiB",
                "met" if res[big]["rss"]["ours"] < 0.1 * big / 2**20 else "NOT met"]]
    print(text_table(["target", "measured", ""], targets))
    v = res["versions"]
    section = "record-stream-pinned" if args.stream_pin else "record-stream"
    title = ("## Recorder streaming, the origin on a core of its own (`benchmarks/bench_record.py --stream "
             "--stream-pin`)\n\nThe run of the section above with every process pinned: the origin (and its "
             "threads) on CPU 1, every proxy and the client on CPU 0, so the origin's writing of the body never "
             "competes with a proxy for a core, as an origin on another machine would not. Unpinned, a proxy "
             "woken by the origin's head may wait behind the origin's own work on the same core." if args.stream_pin
             else "## Recorder streaming: first byte and memory by response size (`benchmarks/bench_record.py "
                  f"--stream`)\n\n{(_recordstream.__doc__ or '').strip()}")
    body = f"""{title}

{args.stream_reps} rounds after one warm-up round, each fetching every size in every mode; TTFB and whole body:
medians; ratios: the median of the per-round ratios with its 95% bootstrap interval in brackets; peak
RSS growth: the largest of the fetches. warcprox {v["warcprox"]}; nginx {v["nginx"]}; pyfloor on {v["pyfloor"]}
(ours runs on the same loop).

{markdown_table(header, rows)}

Per-round ratios (first byte, and the whole body):

{markdown_table(ratio_header, ratio_rows)}

{markdown_table(["target", "measured", ""], targets)}

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section(section, body)
        print(f"BENCHMARKS.md: section {section!r} updated")


if __name__ == "__main__":
    main()
