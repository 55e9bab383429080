"""The fast recorder to an HTTP/2 client, as Chromium speaks to it: many streams at once on one
connection, a large body past the flow-control windows, a large POST, and a stream reset while its
upstream answer is still coming; the connection goes on and every answer is the origin's, recorded.
"""

from __future__ import annotations

import asyncio
import ssl
import threading

import httpx

from ego2web_replay.guard import GuardPolicy
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter


async def _browse(proxy: str, ca_file: str, base: str) -> tuple[list[httpx.Response], httpx.Response]:
    ctx = ssl.create_default_context(cafile=ca_file)
    async with httpx.AsyncClient(proxy=proxy, verify=ctx, http2=True, timeout=20) as client:
        asks = [client.get(f"{base}/api/price?id={i}") for i in range(40)]
        asks += [client.get(base + "/big.bin"), client.post(base + "/api/cart", json={"item": "x" * 200_000, "qty": 3})]
        answers = list(await asyncio.gather(*asks))
        dropped = asyncio.ensure_future(client.get(base + "/big.bin"))
        await asyncio.sleep(0.02)
        dropped.cancel()  # the client resets the stream; the proxy is still fetching its answer
        await asyncio.gather(dropped, return_exceptions=True)
        return answers, await client.get(base + "/chunked")


def test_many_streams_a_large_post_and_a_reset_stream_over_http2(site, ca, tmp_path):
    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    archive = ExchangeArchive(snap.writer)
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback"), upstream_ca=site.tls.ca_cert).start()
    got: list = []
    # in a thread of its own: the session's Playwright may hold an event loop in this one
    client = threading.Thread(target=lambda: got.append(asyncio.run(_browse(front.url, str(ca.cert_path),
                                                                           site.https_url))))
    try:
        client.start()
        client.join(60)
    finally:
        front.stop()
    [(answers, after)] = got
    assert {r.http_version for r in answers} == {"HTTP/2"}
    assert [r.status_code for r in answers] == [200] * 42
    assert [r.json()["id"] for r in answers[:40]] == [str(i) for i in range(40)]
    assert answers[40].content == site.big and answers[41].json() == {"items": 3, "item": "x" * 200_000}
    assert after.http_version == "HTTP/2" and after.content == b"chunk-" * 700
    assert not archive.errors and archive.failed is None
    snap.finalize()
    posts = [r for r in iter_records(snap.writer.path) if r.rec_type == "request" and r.http_method == "POST"]
    assert len(posts) == 1 and len(posts[0].payload) > 200_000
