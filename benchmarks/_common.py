"""Shared pieces of the benchmark scripts: machine facts, the BENCHMARKS.md sections,
statistics, a realistic local site and a small load client.

Every server here binds 127.0.0.1 and every client connects to 127.0.0.1 only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
import os
import platform
import random
import re
import signal
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from importlib import metadata
from pathlib import Path
from typing import Any

from ego2web_replay.httpd import LoopbackHTTPServer

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
OUT = ROOT / "benchmarks" / "out"
CORES = os.cpu_count() or 1
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``timeout``) end the benchmark as Ctrl-C does, through its ``finally``
    blocks: the servers, browsers and temporary folders it started are cleaned up, not left behind."""
    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


# -- machine facts and the report file ----------------------------------------------------------

def machine_info() -> dict[str, str]:
    """CPU model, cores, RAM, OS, Python and the versions that shape the figures."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    info = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu,
            "cores": str(os.cpu_count()), "ram": f"{ram:.1f} GiB", "os": platform.platform(),
            "python": platform.python_version(),
            "load average at start (1/5/15 min)": loadavg()}
    for dist in ("ego2web-replay", "mitmproxy", "playwright", "zstandard", "warcio"):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist] = "not installed"
    try:
        from ego2web_replay.browser import chromium_version

        info["chromium"] = chromium_version()
    except Exception:  # noqa: BLE001 - informative only
        info["chromium"] = "unknown"
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        info["commit"] = out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        info["commit"] = "unknown"
    return info


def loadavg() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def machine_lines(info: dict[str, str], extra: dict[str, str] | None = None) -> str:
    """Markdown list of ``info`` (taken at the start of a run) plus the load average now."""
    items = {**info, **(extra or {}), "load average at end (1/5/15 min)": loadavg()}
    return "\n".join(f"- {k}: {v}" for k, v in items.items())


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = "  ".join("{:<" + str(w) + "}" for w in widths)
    out = [fmt.format(*cells[0]), "  ".join("-" * w for w in widths)]
    out += [fmt.format(*r) for r in cells[1:]]
    return "\n".join(out)


_PREAMBLE = """# Benchmarks

Written by the scripts in `benchmarks/` (see `benchmarks/README.md`); each script
replaces only its own section, between its HTML comment markers. Figures are
medians of several repetitions on the machine named in each section; compare
ratios measured in one run rather than absolute figures across machines.
"""


_MARKER = re.compile(r"<!-- bench:([A-Za-z0-9_.-]+):(start|end) -->")


def check_markers(text: str, path: Path = BENCHMARKS_MD) -> None:
    """Refuse (SystemExit) a file whose section markers nest, overlap, repeat or lack their pair:
    rewriting one section there would swallow or split another."""
    open_name: str | None = None
    seen: set[str] = set()
    for m in _MARKER.finditer(text):
        name, kind = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if kind == "start":
            if open_name is not None:
                raise SystemExit(f"{path}:{line}: section {name!r} starts inside {open_name!r}; "
                                 "repair the markers by hand")
            if name in seen:
                raise SystemExit(f"{path}:{line}: section {name!r} appears twice; repair the markers by hand")
            open_name = name
            seen.add(name)
        elif name != open_name:
            raise SystemExit(f"{path}:{line}: end of section {name!r} where "
                             f"{'none' if open_name is None else repr(open_name)} is open; repair the markers by hand")
        else:
            open_name = None
    if open_name is not None:
        raise SystemExit(f"{path}: section {open_name!r} has no end marker; repair the markers by hand")


def update_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace (or append) the section between ``<!-- bench:NAME:start/end -->`` in BENCHMARKS.md."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = path.read_text("utf-8") if path.exists() else _PREAMBLE
    check_markers(text, path)
    block = f"{start}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)


# -- CPU utilisation ------------------------------------------------------------------------------

class CpuMeter:
    """CPU time over a stretch of wall time: the machine's (``/proc/stat``) and this process tree's."""

    @staticmethod
    def _stat() -> list[tuple[int, int]]:
        """(busy, total) jiffies: all cores first, then each core (``cpu0``, ``cpu1``, ...)."""
        out = []
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                if not line.startswith("cpu"):
                    break
                fields = [int(x) for x in line.split()[1:]]
                idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
                out.append((sum(fields) - idle, sum(fields)))
        return out

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def __enter__(self) -> CpuMeter:
        self.s0, self.o0, self.t0 = self._stat(), self._own(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        s1, o1 = self._stat(), self._own()
        self.wall = time.monotonic() - self.t0
        shares = [(b1 - b0) / max(1, a1 - a0) for (b0, a0), (b1, a1) in zip(self.s0, s1, strict=True)]
        self.machine, self.cores = shares[0], shares[1:]
        self.own = (o1 - self.o0) / (self.wall * CORES)


# -- statistics -----------------------------------------------------------------------------------

def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: Sequence[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def ratio_ci(num: Sequence[float], den: Sequence[float], level: float = 0.95, resamples: int = 2000,
             seed: int = 0) -> tuple[float, float, float]:
    """Per-round ratios ``num[i] / den[i]``: (their median, low and high end of a percentile-bootstrap
    ``level`` interval of that median). Seeded, so the same samples always give the same interval."""
    if len(num) != len(den) or not num:
        raise ValueError(f"ratio_ci needs paired samples, got {len(num)} and {len(den)}")
    ratios = [a / b for a, b in zip(num, den, strict=True)]
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    tail = (1 - level) / 2 * 100
    return statistics.median(ratios), percentile(meds, tail), percentile(meds, 100 - tail)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


# -- a realistic site ------------------------------------------------------------------------------

def _words(rng: random.Random, n: int) -> str:
    vocab = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
             "labore et dolore magna aliqua product price cart review shipping order colour size brand").split()
    return " ".join(rng.choice(vocab) for _ in range(n))


def _png(rng: random.Random, w: int, h: int) -> bytes:
    from ego2web_replay.png import png_bytes

    return png_bytes(w, h, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))


class RealisticSite(LoopbackHTTPServer):
    """A multi-page site on 127.0.0.1: each page has ~50 subresources (CSS, JS, images, fonts, XHR).

    Page ``/p/<n>`` links 6 stylesheets, 12 scripts, 24 images, 2 web fonts (via CSS) and fires 8
    XHRs (``fetch``) from its last script; half of the assets are shared between pages. When every
    XHR has answered, the page sets ``window.__done``. Bodies are deterministic (seeded), so two
    runs serve the same bytes. ``/small/<i>`` are 1 KiB resources for throughput tests.
    """

    thread_name = "realistic-site"

    def __init__(self, pages: int = 3, seed: int = 7) -> None:
        super().__init__()
        self.pages = pages
        rng = random.Random(seed)
        self.files: dict[str, tuple[str, bytes]] = {}
        font = self._font()
        for i in range(2):
            self.files[f"/fonts/f{i}.woff2"] = ("font/woff2", font[: 40_000 + 20_000 * i])
        for scope in ["shared"] + [f"p{n}" for n in range(pages)]:
            for i in range(3):
                css = f"@font-face{{font-family:F{i % 2};src:url(/fonts/f{i % 2}.woff2)}}\n" if scope == "shared" else ""
                css += "".join(f".{scope}-c{i}-{k}{{margin:{k}px;padding:{k % 7}px;color:#{rng.randrange(16**6):06x}}}\n"
                               for k in range(rng.randrange(150, 500)))
                self.files[f"/{scope}/s{i}.css"] = ("text/css", css.encode())
            for i in range(6):
                js = "".join(f"function {scope}_f{i}_{k}(a){{return '{_words(rng, 8)}'.length+a*{k};}}\n"
                             for k in range(rng.randrange(100, 600)))
                self.files[f"/{scope}/j{i}.js"] = ("application/javascript", js.encode())
            for i in range(12):
                self.files[f"/{scope}/i{i}.png"] = ("image/png", _png(rng, rng.randrange(40, 200), rng.randrange(40, 160)))
        for n in range(pages):
            for i in range(8):
                data = {"page": n, "item": i, "items": [{"id": k, "name": _words(rng, 4), "price": rng.randrange(100, 9999)}
                                                        for k in range(rng.randrange(5, 60))]}
                self.files[f"/api/p{n}/d{i}.json"] = ("application/json", json.dumps(data).encode())
            self.files[f"/p/{n}"] = ("text/html; charset=utf-8", self._page(n, rng))
        for i in range(200):
            self.files[f"/small/{i}"] = ("text/plain", hashlib.sha256(str(i).encode()).hexdigest().encode() * 32)

    @staticmethod
    def _font() -> bytes:
        for c in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                  "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf"):
            if Path(c).exists():
                return Path(c).read_bytes()
        return bytes(80_000)

    def _page(self, n: int, rng: random.Random) -> bytes:
        head = []
        for scope in ("shared", f"p{n}"):
            head += [f'<link rel="stylesheet" href="/{scope}/s{i}.css">' for i in range(3)]
            head += [f'<script src="/{scope}/j{i}.js"></script>' for i in range(6)]
        imgs = [f'<img src="/{scope}/i{i}.png" width="80" height="60" alt="">'
                for scope in ("shared", f"p{n}") for i in range(12)]
        xhr = ("<script>Promise.all([" + ",".join(f"fetch('/api/p{n}/d{i}.json').then(r=>r.json())" for i in range(8))
               + "]).then(()=>{window.__done=performance.now();});</script>")
        links = " ".join(f'<a href="/p/{k}">page {k}</a>' for k in range(self.pages))
        paras = "".join(f"<p style=\"font-family:F{k % 2}\">{_words(rng, 60)}</p>" for k in range(30))
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>Page {n}</title>{''.join(head)}</head>"
                f"<body><nav>{links}</nav><h1>Page {n}</h1>{''.join(imgs)}{paras}{xhr}</body></html>").encode()

    def page_urls(self) -> list[str]:
        return [f"{self.url}/p/{n}" for n in range(self.pages)]

    def subresources_per_page(self) -> int:
        return 6 + 12 + 24 + 2 + 8

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        files = self.files

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                if "://" in path:
                    path = "/" + path.split("://", 1)[1].split("/", 1)[1]
                hit = files.get(path)
                if hit is None:
                    body, ctype, status = b"not found", "text/plain", 404
                else:
                    (ctype, body), status = hit, 200
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "max-age=3600")
                self.end_headers()
                self.wfile.write(body)

        return Handler


def serve_site_forever(port: int, pages: int) -> None:
    """Target of a child process: serve a :class:`RealisticSite` on ``port`` until killed."""
    site = RealisticSite(pages=pages)
    site.port = port
    site.start()
    threading.Event().wait()


# -- a load client (threads, keep-alive, absolute-form through a proxy) ----------------------------

def load_client(target_port: int, urls: Sequence[str], concurrency: int, duration: float, via_proxy: bool,
                result_file: str) -> None:
    """Target of a child process: ``concurrency`` threads fetch ``urls`` round-robin for ``duration`` s.

    Each thread keeps one connection to 127.0.0.1:``target_port`` (the proxy, or the site itself)
    and reconnects when the server closes it. Writes ``{"count", "errors", "latencies_ms"}`` as JSON.
    """
    stop_at = time.monotonic() + duration
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]

    def worker(k: int) -> None:
        conn: http.client.HTTPConnection | None = None
        i = k
        local: list[float] = []
        while time.monotonic() < stop_at:
            url = urls[i % len(urls)]
            i += concurrency
            target = url if via_proxy else "/" + url.split("://", 1)[1].split("/", 1)[1]
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=10)
                conn.request("GET", target)
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    errors[0] += 1
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                errors[0] += 1
                if conn is not None:
                    conn.close()
                conn = None
                continue
            local.append((time.perf_counter() - t0) * 1000)
        with lock:
            latencies.extend(local)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    Path(result_file).write_text(json.dumps({"count": len(latencies), "errors": errors[0],
                                             "latencies_ms": latencies}))


def run_load(target_port: int, urls: Sequence[str], *, concurrency: int = 8, duration: float = 5.0,
             via_proxy: bool = True) -> dict[str, float]:
    """Run :func:`load_client` in its own process; requests/s, p50 and p99 latency (ms)."""
    import multiprocessing
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result_file = fh.name
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=load_client, args=(target_port, list(urls), concurrency, duration, via_proxy, result_file))
    p.start()
    p.join(duration + 60)
    if p.is_alive():
        p.kill()
        raise RuntimeError("the load client did not finish")
    data = json.loads(Path(result_file).read_text())
    os.unlink(result_file)
    lat = data["latencies_ms"]
    return {"rps": data["count"] / duration, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "count": data["count"], "errors": data["errors"]}


class RecordingProxy:
    """The recording proxy (guard in loopback mode + recorder) writing one snapshot.

    ``engine``: ``fast`` (the recording front end, what ``record`` uses by default) or ``mitmproxy``.
    """

    def __init__(self, root: Path, name: str, compression: str, engine: str = "fast") -> None:
        from ego2web_replay.guard import GuardPolicy
        from ego2web_replay.proxy import ProxyServer, project_ca
        from ego2web_replay.recorder.addon import ExchangeArchive
        from ego2web_replay.recorder.front import RecordFront
        from ego2web_replay.recorder.session import RecordOptions, record_addons
        from ego2web_replay.snapshots.snapshot import SnapshotWriter

        self.writer = SnapshotWriter(root, name, compression=compression, source="record",  # type: ignore[arg-type]
                                     dedup_min_size=RecordOptions().dedup_min_size)  # as `record` does
        self.proxy: Any
        if engine == "mitmproxy":
            self.guard, self.recorder = record_addons(self.writer.writer)
            self.proxy = ProxyServer([self.guard, self.recorder], options={"guard_mode": "loopback"})
        else:
            self.recorder = ExchangeArchive(self.writer.writer)
            self.proxy = RecordFront(self.recorder, ca=project_ca(), guard=GuardPolicy(mode="loopback"))

    def __enter__(self) -> RecordingProxy:
        self.proxy.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proxy.stop()
        self.recorder.drain()
        if self.recorder.failed:
            raise RuntimeError(f"the recorder failed: {self.recorder.failed}")
        self.writer.finalize()

    @property
    def archive_bytes(self) -> int:
        return self.writer.writer.path.stat().st_size


# -- Chromium page loads ------------------------------------------------------------------------------

def launch_chromium(pw: Any, proxy_url: str | None = None, spki: str | None = None) -> Any:
    """Debian's Chromium via Playwright; with ``proxy_url`` loopback goes through the proxy too."""
    from ego2web_replay.browser import chromium_executable, sealed_chromium_args

    args = list(CHROMIUM_ARGS) + sealed_chromium_args(proxy_url) + ([f"--ignore-certificate-errors-spki-list={spki}"] if spki else [])
    kwargs: dict[str, Any] = {"executable_path": chromium_executable(), "headless": True, "args": args}
    if proxy_url:
        kwargs["proxy"] = {"server": proxy_url}
    return pw.chromium.launch(**kwargs)


def timed_load(browser: Any, url: str, timeout_s: float = 30.0) -> tuple[float, float]:
    """Load ``url`` in a fresh context (empty cache): ms to the ``load`` event, and ms until the
    page's XHRs have all answered (``window.__done``)."""
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        t0 = time.perf_counter()
        page.goto(url, wait_until="load", timeout=timeout_s * 1000)
        t_load = time.perf_counter()
        page.wait_for_function("window.__done !== undefined", timeout=timeout_s * 1000, polling=5)
        t_done = time.perf_counter()
        return (t_load - t0) * 1000, (t_done - t0) * 1000
    finally:
        ctx.close()
