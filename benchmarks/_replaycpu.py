"""Replay CPU per request on two versions of the code: this tree and a baseline commit.

The parent (``measure``) writes one small snapshot with this tree's ``SnapshotWriter`` (both versions
read the same format), checks out the baseline with ``git worktree add --detach`` into a temporary
folder (removed afterwards in every case), and runs this file as a child process per version and
round (``PYTHONPATH`` = that version's tree), interleaved: baseline, current, baseline, current...
A child opens a ``Replay`` of the snapshot (``open()`` only: no proxy is started), answers every
workload once to warm the responder's caches, then times each workload with ``time.process_time``
over ``n`` calls of ``Responder.answer(method, url, headers, body)`` and prints JSON: µs per request
and the status codes it answered (so both versions are seen to give the same answers).
Websocket messages (a second snapshot holding a recorded conversation) are timed on the current
tree only: the baseline refuses every websocket handshake.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HOST = "http://127.0.0.1:9"
BROWSER = [("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/156.0 Safari/537.36"),
           ("Accept-Encoding", "gzip, deflate, br, zstd"), ("Accept-Language", "en-US,en;q=0.9")]
VIDEO_BYTES = 512 * 1024
WS_TURNS = 20
WORKLOADS = ("plain GETs of cached captures", "GETs with Range: bytes=... in a recorded 200",
             "page load mix (document, scripts, CSS, images, XHR)")
WS_WORKLOAD = "websocket messages (current only, per message)"


def _asset(i: int, kind: str) -> tuple[str, str, bytes]:
    rng = random.Random(i)
    if kind == "script":
        return f"{HOST}/static/app{i}.js", "application/javascript", (f"var m{i}=" + "1+" * rng.randint(800, 3000) + "1;").encode()
    if kind == "style":
        return f"{HOST}/static/site{i}.css", "text/css", (f".c{i}{{color:#123}}" * rng.randint(100, 400)).encode()
    if kind == "image":
        return f"{HOST}/img/p{i}.png", "image/png", rng.randbytes(rng.randint(2000, 20000))
    return f"{HOST}/api/items?page={i}", "application/json", json.dumps({"page": i, "items": list(range(40))}).encode()


def assets() -> dict[str, list[tuple[str, str, bytes]]]:
    return {"script": [_asset(i, "script") for i in range(8)], "style": [_asset(i, "style") for i in range(2)],
            "image": [_asset(i, "image") for i in range(12)], "xhr": [_asset(i, "xhr") for i in range(4)]}


def page_html() -> bytes:
    a = assets()
    tags = "".join(f'<script src="{u}"></script>' for u, _, _ in a["script"][:4])
    tags += "".join(f'<link rel="stylesheet" href="{u}">' for u, _, _ in a["style"])
    tags += "".join(f'<img src="{u}">' for u, _, _ in a["image"][:6])
    return f"<!doctype html><html><head><title>p</title></head><body>{tags}{'<p>text</p>' * 300}</body></html>".encode()


def build_snapshots(root: Path) -> tuple[Path, Path]:
    """The HTTP snapshot (page, assets, one video) and the websocket one, written with this tree's code."""
    from datetime import UTC, datetime

    from ego2web_replay.snapshots.snapshot import SnapshotWriter
    from ego2web_replay.snapshots.wsrecords import WsMessage, write_conversation

    sw = SnapshotWriter(root, "cpu", compression="zst", source="record")
    items = [(f"{HOST}/", "text/html; charset=utf-8", page_html()),
             (f"{HOST}/media/clip.mp4", "video/mp4", random.Random(7).randbytes(VIDEO_BYTES))]
    items += [x for group in assets().values() for x in group]
    for url, ctype, body in items:
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Host", "127.0.0.1:9"), *BROWSER],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", ctype), ("Content-Length", str(len(body))),
                                                   ("Accept-Ranges", "bytes"), ("Cache-Control", "max-age=60"),
                                                   ("Date", "Tue, 01 Dec 2026 12:00:00 GMT")],
                                 response_body=body)
    sw.finalize()
    ws = SnapshotWriter(root, "cpu-ws", compression="zst", source="record")
    messages = [WsMessage(0.0, "server", "text", b'{"hello": 1}')]
    for i in range(WS_TURNS):
        messages.append(WsMessage(0.1 * i, "client", "text", json.dumps({"op": "get", "id": i}).encode()))
        messages.append(WsMessage(0.1 * i + 0.05, "server", "text", json.dumps({"id": i, "data": "x" * 200}).encode()))
    write_conversation(ws.writer, url=f"{HOST}/socket",
                       request_headers=[("Host", "127.0.0.1:9"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                        ("Sec-WebSocket-Version", "13")],
                       status=101, reason="Switching Protocols",
                       response_headers=[("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                         ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")],
                       messages=messages, truncated=False, ip="127.0.0.1", date=datetime.now(UTC))
    ws.finalize()
    return sw.path, ws.path


# -- the child: one version of the code ------------------------------------------------------------
def _get(url: str, dest: str, accept: str, extra: tuple[tuple[str, str], ...] = ()) -> tuple[str, str, list[tuple[str, str]], bytes]:
    mode = "navigate" if dest == "document" else ("cors" if dest == "empty" else "no-cors")
    return ("GET", url, [("Host", "127.0.0.1:9"), *BROWSER, ("Accept", accept), ("Sec-Fetch-Dest", dest),
                         ("Sec-Fetch-Mode", mode), *extra], b"")


def requests_of(workload: str) -> list[tuple[str, str, list[tuple[str, str]], bytes]]:
    a = assets()
    if workload == WORKLOADS[0]:
        return [_get(u, "script", "*/*") for u, _, _ in a["script"]] + [_get(u, "image", "image/*") for u, _, _ in a["image"]]
    if workload == WORKLOADS[1]:
        rng = random.Random(3)
        out = []
        for _ in range(32):
            start = rng.randrange(0, VIDEO_BYTES - 70000)
            end = start + rng.randint(1000, 65535)
            out.append(_get(f"{HOST}/media/clip.mp4", "video", "*/*", (("Range", f"bytes={start}-{end}"),)))
        return out
    return ([_get(f"{HOST}/", "document", "text/html,application/xhtml+xml,*/*;q=0.8")]
            + [_get(u, "script", "*/*") for u, _, _ in a["script"][:4]]
            + [_get(u, "style", "text/css,*/*;q=0.1") for u, _, _ in a["style"]]
            + [_get(u, "image", "image/avif,image/webp,*/*") for u, _, _ in a["image"][:6]]
            + [_get(u, "empty", "application/json") for u, _, _ in a["xhr"][:2]])


def _time(answer: Any, reqs: list[Any], n: int) -> tuple[float, Counter[int]]:
    statuses: Counter[int] = Counter(answer(*r).status for r in reqs)  # warm-up, and the answers
    k = len(reqs)
    t0 = time.process_time()
    for i in range(n):
        answer(*reqs[i % k])
    return (time.process_time() - t0) / n * 1e6, statuses


def _client_frame(data: bytes) -> bytes:
    key = b"\x11\x22\x33\x44"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(data))
    return bytes([0x81, 0x80 | len(data)]) + key + masked


def _ws(replay: Any, n: int) -> float:
    """CPU µs per client message on replayed websockets (handshakes outside the timer)."""
    frames = [_client_frame(json.dumps({"op": "get", "id": i}).encode()) for i in range(WS_TURNS)]
    hs = ("GET", f"{HOST}/socket", [("Host", "127.0.0.1:9"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                           ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                           ("Sec-WebSocket-Version", "13")], b"")
    total, sent = 0.0, 0
    while sent < n:
        reply = replay.responder.answer(*hs)
        tunnel = reply.tunnel
        if reply.status != 101 or tunnel is None:
            raise SystemExit(f"websocket handshake answered {reply.status}")
        out: list[bytes] = []
        tunnel.start(out.append, lambda: None)
        t0 = time.process_time()
        for f in frames:
            tunnel.send(f)
        total += time.process_time() - t0
        sent += len(frames)
        if len(out) != 1 + WS_TURNS:
            raise SystemExit(f"websocket: {len(out)} server messages played, {1 + WS_TURNS} recorded")
    return total / sent * 1e6


def child(snap: str, ws_snap: str, n: int) -> None:
    import ego2web_replay
    from ego2web_replay.replay.session import Replay

    replay = Replay([snap], miss="404")
    replay.open()
    res: dict[str, Any] = {"module": ego2web_replay.__file__}
    for w in WORKLOADS:
        us, statuses = _time(replay.responder.answer, requests_of(w), n)  # type: ignore[union-attr]
        res[w] = {"us": us, "statuses": dict(statuses)}
    if ws_snap:
        wr = Replay([ws_snap], miss="404")
        wr.open()
        res[WS_WORKLOAD] = {"us": _ws(wr, n)}
    print(json.dumps(res))


# -- the parent ------------------------------------------------------------------------------------
def _run_child(tree: Path, snap: Path, ws_snap: Path | None, n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "child", str(snap), str(ws_snap or ""), str(n)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
    if out.returncode:
        raise SystemExit(f"child on {tree} failed:\n{out.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not res["module"].startswith(str(tree)):
        raise SystemExit(f"child on {tree} imported {res['module']}")
    return res


def measure(baseline: str, rounds: int, n: int) -> dict[str, Any]:
    """Interleaved rounds on ``baseline`` (a commit) and this tree: every child's results, by version."""
    root = Path(__file__).resolve().parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    base_tree = tmp / "baseline"
    try:
        snap, ws_snap = build_snapshots(tmp / "snapshots")
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(base_tree), baseline],
                       check=True, capture_output=True)
        commit = subprocess.run(["git", "-C", str(base_tree), "rev-parse", "--short", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
        for r in range(rounds):
            runs["baseline"].append(_run_child(base_tree, snap, None, n))
            runs["current"].append(_run_child(root, snap, ws_snap, n))
            print(f"  round {r + 1}/{rounds}: " + ", ".join(
                f"{v} {runs[v][-1][WORKLOADS[0]]['us']:.0f}/{runs[v][-1][WORKLOADS[1]]['us']:.0f}/"
                f"{runs[v][-1][WORKLOADS[2]]['us']:.0f} µs" for v in runs), flush=True)
        return {"commit": commit, "runs": runs}
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(base_tree)], capture_output=True)
        subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def report(args: Any, info: dict[str, str]) -> None:
    """The ``bench_replay.py --cpu`` run: print the table, rewrite the ``replay-cpu`` section."""
    from _common import machine_lines, markdown_table, median, text_table, update_section

    t0 = time.monotonic()
    res = measure(args.cpu_baseline, args.cpu_rounds, args.cpu_requests)
    runs = res["runs"]
    header = ["workload", f"baseline {res['commit']}: µs/request", "current: µs/request", "current / baseline",
              "per-round ratios (min - max)", "within 10%", "same statuses"]
    rows: list[list[Any]] = []
    for w in WORKLOADS:
        b = [r[w]["us"] for r in runs["baseline"]]
        c = [r[w]["us"] for r in runs["current"]]
        ratio = median(c) / median(b)
        per_round = [x / y for x, y in zip(c, b, strict=True)]
        same = all(r[w]["statuses"] == runs["baseline"][0][w]["statuses"] for v in runs.values() for r in v)
        answered = ", ".join(f"{k}: {v}" for k, v in sorted(runs["current"][0][w]["statuses"].items()))
        rows.append([w, f"{median(b):.1f}", f"{median(c):.1f}", f"{ratio:.3f}",
                     f"{min(per_round):.3f} - {max(per_round):.3f}", "yes" if ratio <= 1.10 else "NO (slower by more)",
                     f"{'yes' if same else 'NO'} ({answered})"])
    ws = [r[WS_WORKLOAD]["us"] for r in runs["current"]]
    rows.append([WS_WORKLOAD, "- (refused with 403)", f"{median(ws):.1f}", "-", "-", "- (no baseline)", "-"])
    print(text_table(header, rows))
    print(f"took {time.monotonic() - t0:.0f} s")
    body = f"""## Replay CPU per request, against a baseline commit (`benchmarks/bench_replay.py --cpu`)

{__doc__.strip()}

Workloads: {len(requests_of(WORKLOADS[0]))} distinct cached captures (8 scripts, 12 PNGs) fetched in
turn; {len(requests_of(WORKLOADS[1]))} `Range: bytes=a-b` GETs (1 KiB to 64 KiB) inside a
{VIDEO_BYTES // 1024} KiB `video/mp4` recorded with a 200; a page load of
{len(requests_of(WORKLOADS[2]))} requests (the HTML document, frozen-clock script injected, 4 scripts,
2 stylesheets, 6 images, 2 JSON XHRs) in turn; websocket: handshakes outside the timer, then
{WS_TURNS} client text messages per connection, each answered by its recorded server message.
{args.cpu_requests} requests per workload per child, {args.cpu_rounds} rounds per version; medians.
"Within 10%" compares the medians (target of issue 23: current <= 1.10 x baseline).

{markdown_table(header, rows)}

Machine and versions:
{machine_lines(info, {"baseline": res["commit"]})}
"""
    if not args.no_write:
        update_section("replay-cpu", body)
        print("BENCHMARKS.md: section 'replay-cpu' updated")


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "child":
    child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
