"""Replay: requests/s, CPU per request and added latency through our ``serve`` (its fast engine, the
same on two processes, and its mitmproxy engine), pywb (proxy mode), mitmproxy ``--server-replay``
and a plain static server (the limit), all serving one recorded multi-page snapshot; Chromium
page-load time through each; index load time of a 100k-record snapshot.

    /work/main/.venv/bin/python benchmarks/bench_replay.py [--rounds 3] [--duration 5] [--reps 5]
    /work/main/.venv/bin/python benchmarks/bench_replay.py --parsers   # HTTP/1.1 parsers only (~30 s)
    /work/main/.venv/bin/python benchmarks/bench_replay.py --cpu   # CPU/request vs a baseline commit (~1-2 min)
    /work/main/.venv/bin/python benchmarks/bench_replay.py --wire  # CPU/request on the wire vs static (~2 min)

Everything runs on 127.0.0.1. The local site is recorded once (gzip WARC, so pywb can read it)
and then stopped: every replay serves the snapshot. pywb and mitmproxy are installed from PyPI
into ``benchmarks/.venvs/`` on first use. Load: ``wrk`` (``apt-get install wrk``) with a Lua
script sending absolute-form request lines over the snapshot's URLs. Prints a table and rewrites
the ``replay`` section of BENCHMARKS.md. ``--parsers`` instead compares the wire's HTTP/1.1 parser with
llhttp (PyPI ``httptools``) on the same job (``_parsers.py``) and rewrites the ``replay-parsers`` section.
``--cpu`` instead times ``Responder.answer`` on this tree and on ``--cpu-baseline`` (a temporary git
worktree) for the same workloads (``_replaycpu.py``) and rewrites the ``replay-cpu`` section.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import resource
import shutil
import subprocess
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
    serve_site_forever,
    text_table,
    timed_load,
    update_section,
    wait_port,
)
from _synthetic import synthetic_snapshot  # noqa: E402

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def record_snapshot(root: Path, pages: int) -> tuple[Path, list[str]]:
    """Record the local multi-page site (gzip) through our recorder; returns the snapshot and page URLs."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = multiprocessing.get_context("fork").Process(target=serve_site_forever, args=(port, pages), daemon=True)
    proc.start()
    try:
        wait_port(port)
        site = RealisticSite(pages=pages)
        site.port = port
        with RecordingProxy(root, "bench-replay", "gz") as rec, sync_playwright() as pw:
            browser = launch_chromium(pw, rec.proxy.url)
            for url in site.page_urls():  # fresh context per page: every subresource is fetched
                timed_load(browser, url)
                rec.writer.add_page(url)
            browser.close()
        return rec.writer.path, site.page_urls()
    finally:
        proc.kill()  # the site is gone: every replay below serves the snapshot only


OURS = "ego2web-replay serve (fast engine)"
OURS2 = "ego2web-replay serve --processes 2"
OURS_MITM = "ego2web-replay serve --engine mitmproxy"
STATIC = "static server (limit)"


def rotated(items: list[_peers.Peer], k: int) -> list[_peers.Peer]:
    """``items`` starting at the ``k``-th (mod its length): no server is always measured first.

    In a fixed order the first server's page loads came out up to 1.5x slower than in a rotated one
    (the same server, the same pages), so every round starts with another server."""
    k %= len(items)
    return items[k:] + items[:k]


def wrk_script(urls: list[str], path: Path) -> None:
    items = ",\n".join(json.dumps(u) for u in urls)
    path.write_text(f"""local urls = {{
{items}
}}
local i = 0
request = function()
  i = i % #urls + 1
  local u = urls[i]
  local host = string.match(u, "^https?://([^/]+)")
  return "GET " .. u .. " HTTP/1.1\\r\\nHost: " .. host .. "\\r\\nAccept: */*\\r\\n\\r\\n"
end
""")


def run_wrk(port: int, script: Path, duration: float, threads: int, conns: int,
            pid: int | None = None) -> dict[str, float]:
    """One wrk run against ``port``; with ``pid``, also the server's CPU seconds (its process tree).
    ``wrk_cpu_us`` is wrk's own CPU per request, ``server_cores`` and ``wrk_cores`` the CPU each used
    over the run's wall time (how much of the machine each had)."""
    cpu0 = _peers.cpu_seconds(pid) if pid else 0.0
    kids0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{conns}", f"-d{duration:.0f}s", "--latency", "--timeout", "5s",
                          "-s", str(script), f"http://127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=duration + 60).stdout
    cpu = _peers.cpu_seconds(pid) - cpu0 if pid else float("nan")
    kids1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - t0
    wrk_cpu = kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime

    def lat(q: str) -> float:
        m = re.search(rf"^\s+{q}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")

    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    requests = int(total.group(1)) if total else 0
    return {"rps": float(rps.group(1)) if rps else 0.0, "p50": lat("50"), "p99": lat("99"),
            "cpu_us": cpu / requests * 1e6 if requests else float("nan"), "requests": requests, "non2xx": int(bad.group(1)) if bad else 0,
            "wrk_cpu_us": wrk_cpu / requests * 1e6 if requests else float("nan"), "server_cores": cpu / wall,
            "wrk_cores": wrk_cpu / wall,
            "sock_errors": sum(map(int, sock.groups())) if sock else 0, "raw": out}


def index_load(n: int) -> dict[str, float]:
    """Time ``Replay(...).open()`` on a synthetic ``n``-record snapshot (zst) of small JSON exchanges.

    The snapshot is built once with ``ArchiveWriter`` + ``finalize`` under ``benchmarks/out/`` (git-ignored)
    and reused by later runs; the build times of that first run are kept beside it.
    """
    from ego2web_replay.replay.session import Replay

    path, built = synthetic_snapshot(n)
    from ego2web_replay.replay.mapped import canonical_file
    from ego2web_replay.replay.rules import default_rules
    from ego2web_replay.snapshots.index_cache import cache_file
    from ego2web_replay.snapshots.index_map import map_file, open_index_map

    # every cache of the index (built with it, or on a first open) dropped to time an open from the CDXJ alone
    imap = open_index_map(path / "index.cdxj")
    canonical_file(imap, default_rules()).unlink(missing_ok=True)
    imap.close()
    for cache in (cache_file(path / "index.cdxj"), map_file(path / "index.cdxj")):
        if cache is not None:
            cache.unlink(missing_ok=True)
    cache = map_file(path / "index.cdxj")
    opens = []
    captures = 0
    for _ in range(4):  # the first open builds the mapped index from the CDXJ; the others map it
        r = Replay([path], miss="404")
        t1 = time.perf_counter()
        r.open()
        opens.append(time.perf_counter() - t1)
        captures = r.captures
    archive = next(path.glob("archive.warc*"))
    return {"records": n, "captures": captures, "write_s": built["write_s"], "finalize_s": built["finalize_s"],
            "built": built["date"], "cold_s": opens[0], "open_s": median(opens[1:]),
            "cached": cache is not None and cache.exists(), "archive_mib": archive.stat().st_size / 2**20}


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=3, help="pages in the recorded site")
    ap.add_argument("--rounds", type=int, default=3, help="wrk runs per server, interleaved (median reported)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--conns", type=int, default=10, help="wrk connections")
    ap.add_argument("--reps", type=int, default=5, help="Chromium loads per page and server (median reported)")
    ap.add_argument("--index-records", type=int, default=100_000, help="records of the synthetic snapshot")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--parsers", action="store_true", help="only compare HTTP/1.1 request parsers (~30 s)")
    ap.add_argument("--cpu", action="store_true",
                    help="only CPU per request of Responder.answer, this tree against --cpu-baseline (~1-2 min)")
    ap.add_argument("--wire", action="store_true",
                    help="only CPU per request through the whole fast engine (wrk, and in process) against the "
                         "static server, uvloop and asyncio's loop, --processes 2 (~2 min)")
    ap.add_argument("--wire-requests", type=int, default=20_000, help="--wire: requests per in-process round")
    ap.add_argument("--cpu-baseline", default="17f86f9", help="the commit --cpu compares with")
    ap.add_argument("--cpu-rounds", type=int, default=7, help="--cpu: child processes per version, interleaved")
    ap.add_argument("--cpu-requests", type=int, default=20_000, help="--cpu: requests per workload and child")
    args = ap.parse_args()
    info = machine_info()
    if args.cpu:
        import _replaycpu

        _replaycpu.report(args, info)
        return
    if args.parsers:
        parsers(args, info)
        return
    if args.wire:
        if shutil.which("wrk") is None:
            sys.exit("wrk is not installed: apt-get install -y wrk")
        import _replaywire

        _replaywire.report(args, info)
        return
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk")
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    peers: list[_peers.Peer] = []
    try:
        snap, pages = record_snapshot(tmp / "snapshots", args.pages)
        records = _peers.snapshot_responses(snap)
        urls = sorted({r.url for r in records if r.status == 200})
        total_bytes = sum(len(r.payload) for r in records if r.status == 200)
        print(f"snapshot {snap}: {len(records)} responses, {len(urls)} URLs with 200 for the load test "
              f"({total_bytes / len(urls) / 1024:.1f} KiB mean body)")
        flows = tmp / "flows.mitm"
        _peers.write_flows(records, flows)
        script = tmp / "urls.lua"
        wrk_script(urls, script)

        stats_file = tmp / "ours-stats.json"
        peers = [_peers.ours(snap, free_port(), 3600, stats_file, name=OURS),
                 _peers.ours(snap, free_port(), 3600, tmp / "ours2-stats.json", ["--processes", "2"], name=OURS2),
                 _peers.ours(snap, free_port(), 3600, tmp / "oursm-stats.json", ["--engine", "mitmproxy"],
                             name=OURS_MITM),
                 _peers.pywb(snap / "archive.warc.gz", tmp / "pywb", free_port()),
                 _peers.mitmproxy_replay(flows, free_port()),
                 _peers.static(snap, free_port())]
        for p in peers:
            p.log = tmp / f"{p.port}.log"
            p.start()
            print(f"started {p.name} on 127.0.0.1:{p.port} ({p.version})")

        # throughput: warm-up, then rounds interleaved across servers
        wrk_res: dict[str, list[dict[str, float]]] = {p.name: [] for p in peers}
        for p in peers:
            run_wrk(p.port, script, 1, args.threads, args.conns)
        for r in range(args.rounds):
            for p in rotated(peers, r):
                res = run_wrk(p.port, script, args.duration, args.threads, args.conns, pid=p.proc.pid)
                wrk_res[p.name].append(res)
                print(f"  wrk {p.name}: {res['rps']:.0f} req/s, {res['cpu_us']:.0f} us CPU/request, "
                      f"p50 {res['p50']:.2f} ms, p99 {res['p99']:.2f} ms, "
                      f"non-2xx {res['non2xx']}, socket errors {res['sock_errors']}")

        # Chromium page loads: fresh context per load, interleaved across servers
        from playwright.sync_api import sync_playwright

        loads: dict[str, list[float]] = {p.name: [] for p in peers}
        dones: dict[str, list[float]] = {p.name: [] for p in peers}
        failures: dict[str, int] = {p.name: 0 for p in peers}
        with sync_playwright() as pw:
            browsers = {p.name: launch_chromium(pw, f"http://127.0.0.1:{p.port}") for p in peers}
            for p in peers:  # warm-up
                try:
                    timed_load(browsers[p.name], pages[0], timeout_s=15)
                except Exception:  # noqa: BLE001 - counted below
                    pass
            for r in range(args.reps):
                for i, url in enumerate(pages):
                    for p in rotated(peers, r * len(pages) + i):
                        try:
                            a, b = timed_load(browsers[p.name], url, timeout_s=15)
                        except Exception as e:  # noqa: BLE001 - a server that cannot replay the page
                            failures[p.name] += 1
                            print(f"  {p.name}: {url}: {str(e).splitlines()[0]}")
                            continue
                        loads[p.name].append(a)
                        dones[p.name].append(b)
            for b in browsers.values():
                b.close()
    finally:
        for p in peers:
            p.stop()
    ours_stats = json.loads(stats_file.read_text()) if peers and stats_file.exists() else {}

    idx = index_load(args.index_records)
    shutil.rmtree(tmp, ignore_errors=True)

    # -- report ---------------------------------------------------------------------------------
    names = [p.name for p in peers]
    static_name, ours_name, pywb_name, mitm_name = STATIC, OURS, names[3], names[4]
    rps = {n: median([r["rps"] for r in wrk_res[n]]) for n in names}
    cpu = {n: median([r["cpu_us"] for r in wrk_res[n]]) for n in names}
    p50 = {n: median([r["p50"] for r in wrk_res[n]]) for n in names}
    p99 = {n: median([r["p99"] for r in wrk_res[n]]) for n in names}
    pl = {n: median(loads[n]) for n in names}
    pd = {n: median(dones[n]) for n in names}
    header = ["server", "version", "req/s", "ours / it", "CPU µs/request", "p50 ms", "p99 ms", "added p50 ms",
              "non-2xx + errors", "page `load` ms", "vs static", "last XHR ms", "vs static", "failed loads"]
    rows = []
    for p in peers:
        n = p.name
        errs = sum(r["non2xx"] + r["sock_errors"] for r in wrk_res[n])
        rows.append([n, p.version, f"{rps[n]:.0f}", f"{rps[ours_name] / rps[n]:.2f}x", f"{cpu[n]:.0f}",
                     f"{p50[n]:.2f}", f"{p99[n]:.2f}", f"{p50[n] - p50[static_name]:.2f}", errs, f"{pl[n]:.0f}",
                     f"{pl[n] / pl[static_name]:.2f}x", f"{pd[n]:.0f}", f"{pd[n] / pd[static_name]:.2f}x",
                     failures[n]])

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    targets = [
        ["CPU per replayed request <= 300 µs", f"{cpu[ours_name]:.0f} µs", verdict(cpu[ours_name] <= 300)],
        ["throughput >= 5x mitmproxy --server-replay", f"{rps[ours_name] / rps[mitm_name]:.2f}x",
         verdict(rps[ours_name] >= 5 * rps[mitm_name])],
        ["throughput >= 2x pywb", f"{rps[ours_name] / rps[pywb_name]:.2f}x", verdict(rps[ours_name] >= 2 * rps[pywb_name])],
        ["replayed page load (to `load`) <= 1.2x static", f"{pl[ours_name] / pl[static_name]:.2f}x",
         verdict(pl[ours_name] <= 1.2 * pl[static_name])],
        ["replayed page load (to last XHR) <= 1.2x static", f"{pd[ours_name] / pd[static_name]:.2f}x",
         verdict(pd[ours_name] <= 1.2 * pd[static_name])],
        ["two processes: throughput vs one", f"{rps[OURS2] / rps[ours_name]:.2f}x", "-"],
        ["fast engine vs our mitmproxy engine (throughput)", f"{rps[ours_name] / rps[OURS_MITM]:.2f}x", "-"],
        [f"index load of {idx['records']:,} records < 1 s (mapped index, built once per index and rule set)",
         f"{idx['open_s']:.2f} s", verdict(idx["open_s"] < 1)],
        [f"(for reference: the first open with no cache at all, building the mapped index from the "
         f"{idx['records']:,}-line CDXJ, once per index)", f"{idx['cold_s']:.2f} s", "-"],
    ]
    idx_rows = [[f"{idx['records']:,}", idx["captures"], f"{idx['archive_mib']:.1f} MiB", f"{idx['write_s']:.1f} s",
                 f"{idx['finalize_s']:.1f} s", f"{idx['cold_s']:.3f} s", f"{idx['open_s']:.3f} s"]]
    idx_header = ["records", "captures", "archive", f"write (ArchiveWriter, built {idx['built']})",
                  "finalize (index + manifest + caches)", "first Replay.open() with no cache (builds the mapped index)",
                  "later Replay.open() (median of 3" + (", mapped index" if idx["cached"] else "") + ")"]
    total = sum(ours_stats.get(k, 0) for k in ("exact", "canonical", "fuzzy", "miss", "blocked", "websocket", "live"))
    stats_line = (f"our replay stats over the whole benchmark: {total} requests, "
                  f"exact {ours_stats.get('exact')}, miss {ours_stats.get('miss')}, "
                  f"blocked background {ours_stats.get('blocked')}")

    print()
    print(text_table(header, rows))
    print()
    print(text_table(["target", "measured", ""], targets))
    print()
    print(text_table(idx_header, idx_rows))
    print(f"\n{stats_line}\ntook {time.monotonic() - t_start:.0f} s")

    body = f"""## Replay (`benchmarks/bench_replay.py`)

One snapshot of a local {args.pages}-page site ({len(records)} responses, {len(urls)} distinct 200 URLs,
{total_bytes / len(urls) / 1024:.1f} KiB mean body), recorded once through our recorder as a gzip
WARC; the site is then stopped. Each server runs in its own process on 127.0.0.1 and serves that
snapshot: our `ego2web-replay serve` (default settings: the fast engine, frozen-clock script
injected into HTML), the same with `--processes 2` and with `--engine mitmproxy`;
pywb in proxy mode on a collection built with `wb-manager add` from the same `.warc.gz`
(`enable_content_rewrite: false`); `mitmdump --server-replay` on a flows file converted from the
same snapshot with mitmproxy's `io.FlowWriter` (`server_replay_extra=kill`, `server_replay_reuse=true`,
`server_replay_refresh=false`, `connection_strategy=lazy`, `-q`); and a static asyncio server
holding the same response bytes in memory (the limit). Throughput: `wrk -t{args.threads} -c{args.conns}
-d{args.duration:.0f}s` sending absolute-form request lines over all the URLs, {args.rounds} rounds
interleaved across servers (each round starting with another server), median. "CPU µs/request" is the CPU time (user + system) of the server's
process tree during a run divided by the requests it answered (wrk itself shares the 2 cores).
"Added p50" is the server's p50 minus the static server's.
Page loads: each page {args.reps} times per server in a fresh Chromium context (empty cache),
interleaved (each page and round starting with another server), median; "last XHR" is when the page's 8 XHRs have all answered.

{markdown_table(header, rows)}

Targets (from the issue):

{markdown_table(["target", "measured", ""], targets)}

Index load time (synthetic snapshot of small JSON exchanges):

{markdown_table(idx_header, idx_rows)}

{stats_line}.

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("replay", body)
        print("BENCHMARKS.md: section 'replay' updated")


def parsers(args: argparse.Namespace, info: dict[str, str]) -> None:
    """The ``--parsers`` run: CPU µs per request of each parser per workload, median of the rounds."""
    from importlib.metadata import version

    import _parsers

    res = _parsers.measure(max(args.rounds, 5))
    names = list(_parsers.PARSERS)
    header = ["workload", *[f"{n}: µs/request" for n in names], "hand / llhttp"]
    rows = [[w, *[f"{median(res[w][n]):.1f}" for n in names],
             f"{median(res[w][names[0]]) / median(res[w][names[1]]):.2f}x"] for w in res]
    print(text_table(header, rows))
    body = f"""## HTTP/1.1 request parsers (`benchmarks/bench_replay.py --parsers`)

{_parsers.__doc__.strip()} CPU time (`time.process_time`), {max(args.rounds, 5)} rounds.

{markdown_table(header, rows)}

Machine and versions:
{machine_lines(info, {"httptools": version("httptools")})}
"""
    if not args.no_write:
        update_section("replay-parsers", body)
        print("BENCHMARKS.md: section 'replay-parsers' updated")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
