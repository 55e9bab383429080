"""Large synthetic snapshots (up to millions of captures) built in minutes, for the open-time benchmark.

``_synthetic.synthetic_snapshot`` records through ``ArchiveWriter`` and ``finalize``, which parses the
archive back to index it: right for 100k, about an hour for a million on this machine. This helper
writes the same kind of snapshot directly: each exchange a response record and a request record
serialised here (WARC/1.1, sha1 block and payload digests, ``WARC-Concurrent-To``), each record its
own zstd frame appended through ``ArchiveWriter.write_raw``; the CDXJ lines are made from the
offsets the writer returns (``IndexEntry``, ``surt_key``), then the snapshot is finalised the way
``SnapshotWriter.finalize`` does it (index, learned volatility, sha256 of every file, manifest,
index caches). ``snapshot verify`` passes on the result (checked on 10k; see BENCHMARKS.md).

The order the exchanges are written in: ``"index"`` (the default) writes them in the order of their
URLs, all at one timestamp, so the recorded order (timestamp, then offset) nearly follows the index,
which is sorted by key; ``"shuffled"`` writes them as a recording does, in browsing order, which has
nothing to do with the URLs' order: a fixed random permutation (seed :data:`SHUFFLE_SEED`), the
timestamps rising along the archive (:data:`PER_SECOND` exchanges a second), so the index's offsets
and timestamps are in random order (a uniform shuffle: the worst case of a real browsing order, whose
pages and resources are near each other in both orders).

Built once under ``benchmarks/out/big-<n>/`` (``big-<n>-shuffled/``) and reused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from _common import OUT
from _synthetic import earlier_build, synthetic_url


def _sha1(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


_EMPTY_SHA1 = _sha1(b"")
_HOST = "127.0.0.1:9"
_ORIGIN = "http://" + _HOST
_SURT_HOST = "1,0,0,127:9)"  # surt_key of every synthetic_url's scheme and host (checked below)
SHUFFLE_SEED = 27
PER_SECOND = 50  # exchanges recorded a second, in the shuffled order

Order = Literal["index", "shuffled"]


def _surt(url: str) -> str:
    """``surt_key(url)`` of a ``synthetic_url`` (a lower-case path and query, already in order): the
    host part swapped, instead of the general canonicaliser (70 us a URL, a minute for a million)."""
    return _SURT_HOST + url[len(_ORIGIN):]


def _record(kind: str, url: str, date: str, rid: str, block: bytes, payload_sha1: str, extra: str = "") -> bytes:
    head = (f"WARC/1.1\r\nWARC-Type: {kind}\r\nWARC-Record-ID: {rid}\r\nWARC-Date: {date}\r\n"
            f"WARC-Target-URI: {url}\r\n{extra}WARC-Payload-Digest: {payload_sha1}\r\n"
            f"WARC-Block-Digest: {_sha1(block)}\r\nContent-Type: application/http; msgtype={kind}\r\n"
            f"Content-Length: {len(block)}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def big_snapshot(n: int, order: Order = "index") -> tuple[Path, dict[str, str]]:
    """A finalised zst snapshot of ``n`` small JSON exchanges (same URLs as ``synthetic_snapshot``),
    written in ``order`` (see the module docstring)."""
    from ego2web_replay.models import SnapshotManifest
    from ego2web_replay.snapshots.cdxj import IndexEntry, surt_key
    from ego2web_replay.snapshots.index_cache import warm_cache
    from ego2web_replay.snapshots.reader import normalize_digest
    from ego2web_replay.snapshots.snapshot import INDEX, SnapshotWriter, file_digest
    from ego2web_replay.snapshots.volatility import VOLATILE_FILE, volatile_text

    root = OUT / (f"big-{n}" if order == "index" else f"big-{n}-{order}")
    timing = root / "build.json"
    if (earlier := earlier_build(root)) is not None:
        return earlier
    if not all(_surt(synthetic_url(i)) == surt_key(synthetic_url(i)) for i in (0, 7, 12_345, n - 1)):
        raise SystemExit("_bigsnap: synthetic_url no longer fits the index-key template of _surt")
    t0 = time.perf_counter()
    sw = SnapshotWriter(root, "synthetic", compression="zst", source="record")
    writer = sw.writer
    when = datetime.now(UTC).replace(tzinfo=None)
    date = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    stamp = when.strftime("%Y%m%d%H%M%S")
    written = list(range(n))
    if order == "shuffled":
        random.Random(SHUFFLE_SEED).shuffle(written)
        when -= timedelta(seconds=n // PER_SECOND)  # the last exchange recorded about now
    lines = []
    payload_bytes = 0
    for at, i in enumerate(written):
        if order == "shuffled" and at % PER_SECOND == 0:
            moment = when + timedelta(seconds=at // PER_SECOND)
            date, stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), moment.strftime("%Y%m%d%H%M%S")
        url = synthetic_url(i)
        body = f'{{"id": {i}, "name": "item {i}"}}'.encode()
        payload_bytes += len(body)
        http = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                .encode() + body)
        rid = f"<urn:uuid:{uuid.UUID(int=2 * i + 1)}>"
        digest = _sha1(body)
        loc = writer.write_raw(_record("response", url, date, rid, http, digest), record_type="response",
                               record_id=rid, url=url, payload_digest=digest)
        target = url[len(_ORIGIN):]
        req = f"GET {target} HTTP/1.1\r\nHost: {_HOST}\r\n\r\n".encode()
        qid = f"<urn:uuid:{uuid.UUID(int=2 * i + 2)}>"
        writer.write_raw(_record("request", url, date, qid, req, _EMPTY_SHA1, f"WARC-Concurrent-To: {rid}\r\n"),
                         record_type="request", record_id=qid, url=url, payload_digest=None)
        lines.append(IndexEntry(surt=_surt(url), timestamp=stamp, url=url, mime="application/json",
                                digest=normalize_digest(digest), offset=loc.offset, length=loc.length, filename=writer.path.name,
                                status=200).to_line())
    t_write = time.perf_counter() - t0
    t1 = time.perf_counter()
    writer.close()
    lines.sort(key=lambda s: s.encode("utf-8"))
    folder = sw.path
    (folder / INDEX).write_text("".join(line + "\n" for line in lines), "utf-8")
    del lines
    # every path is distinct (``/item/<i//100>/r<i>``): no name can be learned volatile
    (folder / VOLATILE_FILE).write_bytes(volatile_text({}))
    archive = writer.path
    manifest = SnapshotManifest(
        task_id="synthetic", snapshot_id=sw.snapshot_id, created_at=sw.created_at.replace(tzinfo=UTC),
        finished_at=datetime.now(UTC), source="record", archive=archive.name, index=INDEX,
        records={"request": n, "response": n, "warcinfo": 1}, exchanges=n, payload_bytes=payload_bytes,
        archive_bytes=archive.stat().st_size,
        files=[file_digest(p, folder) for p in (archive, folder / INDEX, folder / VOLATILE_FILE)],
        tools=sw.tools, settings=sw.settings)
    (folder / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
    t_cache = time.perf_counter()
    warm_cache(folder / INDEX)
    built = {"write_s": t_write, "finalize_s": time.perf_counter() - t1, "cache_s": time.perf_counter() - t_cache,
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    timing.write_text(json.dumps(built))
    return folder, built
