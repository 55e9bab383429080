"""A third-party origin (moto's S3 server: werkzeug) recorded through the fast engine, then replayed frozen.

What the client got while recording (status, headers, body of PUT, GET, HEAD, ranges, a 404, a
DELETE's 204, a conditional GET) must be what the origin sends directly, and what the frozen replay
answers must be what was recorded.
"""

from __future__ import annotations

import http.client
import os
import uuid

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.tasks import Task

pytestmark = pytest.mark.slow
VOLATILE = {"date", "x-amz-request-id", "x-amzn-requestid", "x-amz-id-2", "last-modified", "connection", "server",
            "x-ego2web-replay"}


BIG = os.urandom(300_000)
# moto takes any signature, but an anonymous read of a private object is a 403 (the recorder redacts this)
AUTH = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, "
                         "SignedHeaders=host, Signature=0000"}


def _requests(bucket: str) -> list[tuple[str, str, bytes | None, dict[str, str]]]:
    big = BIG
    return [("PUT", f"/{bucket}", b"", {}), ("PUT", f"/{bucket}/a.txt", b"hello moto", {"Content-Type": "text/plain"}),
            ("PUT", f"/{bucket}/big.bin", big, {}), ("GET", f"/{bucket}/a.txt", None, {}),
            ("HEAD", f"/{bucket}/a.txt", None, {}), ("GET", f"/{bucket}/a.txt", None, {"Range": "bytes=1-3"}),
            ("GET", f"/{bucket}/missing", None, {}), ("GET", f"/{bucket}/big.bin", None, {}),
            ("DELETE", f"/{bucket}/a.txt", None, {}), ("GET", f"/{bucket}/a.txt", None, {"If-None-Match": '"x"'})]


def _send(host: str, port: int, base: str | None, requests: list, bucket: str) -> list[tuple]:
    """Each request on one kept-alive connection (through a proxy when ``base`` is given); the bucket's
    name, where an answer carries it, reads ``B``."""
    conn = http.client.HTTPConnection(host, port, timeout=20)
    out = []
    for method, path, body, headers in requests:
        conn.request(method, (base or "") + path, body=body, headers={**AUTH, **headers})
        resp = conn.getresponse()
        data = resp.read()
        kept = [(k.lower(), v.replace(bucket, "B")) for k, v in resp.getheaders() if k.lower() not in VOLATILE]
        out.append((method, resp.status, sorted(kept), b"<xml>" if b"<RequestId>" in data else data))
    conn.close()
    return out


def _addr(url: str) -> tuple[str, int]:
    host, _, port = url.partition("://")[2].partition(":")
    return host, int(port.rstrip("/"))


def test_moto_recorded_through_the_fast_engine_then_replayed(s3_server, ca, tmp_path):
    bucket = f"rec{uuid.uuid4().hex[:8]}"
    task = Task(id="moto", instruction="x", start_url=s3_server.url + "/")
    with LiveRecording(task, tmp_path, RecordOptions(guard="loopback"), ca=ca) as live:
        recorded = _send(*_addr(live.proxy_url), s3_server.url, _requests(bucket), bucket)
    assert live.ok, live.error
    assert live.recorder.exchanges == len(recorded) and not live.recorder.errors
    direct = _send(*_addr(s3_server.url), None, _requests(bucket + "d"), bucket + "d")
    assert recorded == direct
    assert [r[1] for r in recorded] == [200, 200, 200, 200, 200, 206, 404, 200, 204, 404]
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        replayed = _send(*_addr(replay.proxy_url), s3_server.url, _requests(bucket), bucket)
        stats = replay.stats()
    assert stats.miss == 0, stats.missed_urls
    assert replayed == recorded
