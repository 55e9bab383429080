"""Loading a large index for replay: parsed once, then read from the compact cache; edits invalidate it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ego2web_replay.errors import ArchiveError
from ego2web_replay.replay.session import load_captures
from ego2web_replay.snapshots.index_cache import cache_file


class _Snap:
    def __init__(self, index: Path) -> None:
        self.index_path = index


def _write_index(path: Path, n: int, post_every: int = 0) -> None:
    lines = []
    for i in range(n):
        data = {"url": f"https://shop.example/item/{i}", "mime": "text/html", "status": "200",
                "digest": "X" * 32, "length": "100", "offset": str(i * 100), "filename": "archive.warc.zst"}
        if post_every and i % post_every == 0:
            data.update(method="POST", requestBody=f"__wb_method=post&q={i}")
        lines.append(f"com,example,shop)/item/{i} 2026113007{i % 60:02d}{i % 60:02d} {json.dumps(data)}")
    lines.append("com,example,shop)/old 20261130070000 " + json.dumps(
        {"url": "https://shop.example/old", "mime": "warc/revisit", "digest": "Y" * 32, "length": "50",
         "offset": "0", "filename": "archive.warc.zst"}))
    path.write_text("\n".join(sorted(lines)) + "\n")


def test_cache_roundtrip_and_invalidation(tmp_path, data_home):
    index = tmp_path / "index.cdxj"
    _write_index(index, 3000, post_every=100)
    first = load_captures([_Snap(index)])
    cache = cache_file(index)
    assert cache is not None and cache.is_file()
    second = load_captures([_Snap(index)])
    assert first == second and len(first) == 3001
    # recorded order: by timestamp, then offset
    stamps = [c.timestamp for c in first]
    assert stamps == sorted(stamps)
    posts = [c for c in first if c.method == "POST"]
    assert len(posts) == 30 and posts[0].body.startswith("__wb_method=post")
    assert any(c.url.endswith("/old") for c in first)  # revisits are served too
    _write_index(index, 2500)
    os.utime(index, ns=(1, 1))
    assert len(load_captures([_Snap(index)])) == 2501


def test_corrupt_line_names_file_and_line(tmp_path, data_home):
    index = tmp_path / "index.cdxj"
    _write_index(index, 5)
    with index.open("a") as fh:
        fh.write("not a cdxj line\n")
    with pytest.raises(ArchiveError, match=r"index.cdxj: line 7 is not a valid CDXJ line"):
        load_captures([_Snap(index)])


def test_finalize_warms_the_cache_of_a_large_index(tmp_path, data_home):
    from datetime import datetime

    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    sw = SnapshotWriter(tmp_path, "big", compression="none")
    for i in range(2100):
        sw.writer.write_exchange(url=f"http://big.example/{i}", method="GET", request_headers=[], request_body=b"",
                                 status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                                 response_body=b"x", date=datetime(2026, 1, 1))
    sw.finalize()
    cache = cache_file(sw.path / "index.cdxj")
    assert cache is not None and cache.is_file()
    assert len(load_captures([_Snap(sw.path / "index.cdxj")])) == 2100
