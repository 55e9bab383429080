"""Snapshots on object storage, against a real S3-compatible server (moto's) on 127.0.0.1.

The server is the session's ``s3_server`` fixture (started and stopped by the
tests); its request recorder shows what each step asked of it: ranged GETs for
records, no object GET at all for a warm open, the manifest's PUT after every
other file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import SnapshotError
from ego2web_replay.snapshots import SnapshotWriter
from ego2web_replay.snapshots.location import (
    latest,
    open_snapshot,
    upload_snapshot,
    verify_location,
)
from ego2web_replay.snapshots.objcache import BLOCK

BIG = os.urandom(3 * BLOCK)  # incompressible: the archive spans several cache blocks


def _snapshot(root: Path, task: str = "shop", big: bytes = BIG) -> Path:
    w = SnapshotWriter(root, task, clock=lambda: datetime(2026, 11, 30, 7, 15))
    w.add_page("http://127.0.0.1:8000/")
    w.writer.write_exchange(url="http://127.0.0.1:8000/big.bin", method="GET", request_headers=[],
                            request_body=b"", status=200, reason="OK",
                            response_headers=[("Content-Type", "application/octet-stream")], response_body=big)
    w.writer.write_exchange(url="http://127.0.0.1:8000/", method="GET", request_headers=[], request_body=b"",
                            status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                            response_body=b"<h1>home</h1>")
    (w.path / "screenshots" / "step-000.png").write_bytes(b"\x89PNG not really")
    w.add_screenshot("screenshots/step-000.png")
    w.finalize()
    return w.path


def _forget_cache(data_home: Path) -> None:
    for name in ("object-cache", "remote-snapshots"):
        shutil.rmtree(data_home / name, ignore_errors=True)


def test_list_show_verify_and_latest_on_s3(s3, tmp_path, capsys):
    folder = _snapshot(tmp_path / "local")
    url = f"{s3}/suite/shop/{folder.name}"
    assert upload_snapshot(folder, url)[-1] == "manifest.json"
    assert main(["snapshot", "list", "--snapshots", f"{s3}/suite", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(i["task_id"], i["snapshot_id"], i["path"], i["complete"]) for i in listed] == \
        [("shop", folder.name, url, True)]
    assert main(["snapshot", "show", url]) == 0
    out = capsys.readouterr().out
    assert f"path       {url}" in out and "index      2 entries" in out
    assert main(["snapshot", "verify", url]) == 0
    assert capsys.readouterr().out.strip() == f"ok: {url} (5 whole records, 2 index entries)"
    assert latest(f"{s3}/suite", "shop") == url
    report = verify_location(url)
    assert report.ok and report.records == 5


def test_verify_on_s3_finds_a_changed_archive(s3, tmp_path, capsys):
    folder = _snapshot(tmp_path / "local", big=b"x" * 1000)
    url = f"{s3}/p/shop/{folder.name}"
    upload_snapshot(folder, url)
    archive = (folder / "archive.warc.zst").read_bytes()
    from ego2web_replay.snapshots.objstore import ObjectStorage

    ObjectStorage(url).write_atomic("archive.warc.zst", archive[:-10])  # cut short, as a broken copy is
    assert main(["snapshot", "verify", url]) == 1
    captured = capsys.readouterr()
    assert "archive truncated" in captured.out and "problem(s) found" in captured.err


def test_cold_open_reads_records_by_range_and_a_warm_open_downloads_nothing(s3, s3_server, tmp_path, data_home):
    folder = _snapshot(tmp_path / "local")
    url = f"{s3}/p/shop/{folder.name}"
    upload_snapshot(folder, url)
    _forget_cache(data_home)
    s3_server.record_requests()
    snap = open_snapshot(url)
    home = next(e for e in snap.entries() if e.url.endswith(":8000/"))
    assert snap.record(home).payload == b"<h1>home</h1>"
    gets = dict(s3_server.object_gets())
    base = url.removeprefix("s3://")
    assert set(gets) == {f"/{base}/{n}" for n in ("manifest.json", "index.cdxj", "volatile.json",
                                                  "archive.warc.zst")}
    assert gets[f"/{base}/archive.warc.zst"], "the archive must be read by range, not whole"
    archive_bytes = snap.manifest.archive_bytes
    remote = snap.storage.remote
    assert remote.bytes_read < archive_bytes / 2  # the small record's block, not the 3 MB payload
    # the index is kept by its sha256 (content-addressed), checked on download
    index_digest = next(d for d in snap.manifest.files if d.path == "index.cdxj")
    assert (data_home / "object-cache" / "sha256" / index_digest.sha256[:2] / index_digest.sha256).is_file()

    s3_server.record_requests()
    warm = open_snapshot(url)
    assert warm.record(home).payload == b"<h1>home</h1>" and len(warm.entries()) == 2
    assert s3_server.object_gets() == []
    assert [m for m, *_ in s3_server.requests()] == ["HEAD"]  # only the manifest's ETag is asked for
    assert warm.storage.remote.bytes_read == 0


def test_a_changed_manifest_is_downloaded_again(s3, tmp_path, data_home):
    first = _snapshot(tmp_path / "a", big=b"a" * 100)
    url = f"{s3}/p/shop/{first.name}"
    upload_snapshot(first, url)
    assert open_snapshot(url).manifest.payload_bytes == 113
    second = _snapshot(tmp_path / "b", big=b"b" * 200)  # the same id, other content (a re-upload)
    upload_snapshot(second, url)
    snap = open_snapshot(url)
    assert snap.manifest.payload_bytes == 213
    big = next(e for e in snap.entries() if e.url.endswith("/big.bin"))
    assert snap.resolve(big).payload == b"b" * 200


def test_upload_puts_the_manifest_last(s3, s3_server, tmp_path):
    folder = _snapshot(tmp_path / "local", big=b"z" * 100)
    s3_server.record_requests()
    upload_snapshot(folder, f"{s3}/p/shop/{folder.name}")
    puts = [path.rsplit("/", 1)[-1] for method, path, _q, _h in s3_server.requests() if method == "PUT"]
    assert puts[-1] == "manifest.json" and set(puts[:-1]) == {"archive.warc.zst", "index.cdxj",
                                                               "volatile.json", "step-000.png"}


UPLOADER = r'''
import sys
from pathlib import Path
from ego2web_replay.snapshots.location import upload_snapshot
print("start", flush=True)
upload_snapshot(Path(sys.argv[1]), sys.argv[2])
print("done", flush=True)
'''


@pytest.mark.slow  # a 40 MB upload
def test_a_killed_upload_leaves_no_manifest(s3, tmp_path, capsys):
    folder = _snapshot(tmp_path / "local", big=os.urandom(40 << 20))  # 40 MB: the upload takes a while
    url = f"{s3}/p/shop/{folder.name}"
    proc = subprocess.Popen([sys.executable, "-c", UPLOADER, str(folder), url], stdout=subprocess.PIPE,
                            env=dict(os.environ), start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"start"
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with pytest.raises(SnapshotError, match="manifest.json is missing"):
        open_snapshot(url)
    assert main(["snapshot", "list", "--snapshots", f"{s3}/p", "--json"]) == 0
    assert all(not i["complete"] for i in json.loads(capsys.readouterr().out))


@pytest.mark.slow  # a second server, a connection refused with retries
def test_bad_urls_and_credentials_are_one_line_errors(s3, s3_server, tmp_path, monkeypatch, capsys):
    def error(args: list[str]) -> str:
        assert main(args) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    assert "the bucket 'no-such-bucket' does not exist" in error(
        ["snapshot", "list", "--snapshots", "s3://no-such-bucket/p"])
    assert "Protocol not known: nosuch" in error(["snapshot", "list", "--snapshots", "nosuch://x/p"])
    assert "not a snapshot, manifest.json is missing" in error(["snapshot", "show", f"{s3}/p/t/none"])
    assert "works on local folders only" in error(
        ["snapshot", "import", str(tmp_path / "x.warc"), "--task", "t", "--snapshots", f"{s3}/p"])
    assert "works on local folders only" in error(["suite", "pack", f"{s3}/p", "--out", str(tmp_path / "p")])
    with socket_closed() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        assert "check AWS_ENDPOINT_URL" in error(["snapshot", "list", "--snapshots", f"{s3}/p"])
    from ego2web_replay.testing.s3server import S3Server

    with S3Server(check_credentials=True) as strict:
        for name, value in strict.env().items():
            monkeypatch.setenv(name, value)
        assert "check AWS_ACCESS_KEY_ID" in error(["snapshot", "list", "--snapshots", "s3://any/p"])


class socket_closed:
    """A loopback port with nothing listening on it."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        pass


def test_serve_replays_a_snapshot_from_s3(s3, tmp_path, data_home, capsys, ca):
    import urllib.request

    from ego2web_replay.replay import Replay

    folder = _snapshot(tmp_path / "local", big=b"q" * 100)
    url = f"{s3}/p/shop/{folder.name}"
    upload_snapshot(folder, url)
    shutil.rmtree(folder)
    _forget_cache(data_home)
    assert main(["serve", url, "--port", "0", "--duration", "0.2"]) == 0
    assert "captures       2 from 1 snapshot(s)" in capsys.readouterr().out
    with Replay([url], guard_mode="loopback", freeze=False) as replay:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url}))
        with opener.open("http://127.0.0.1:8000/", timeout=10) as resp:
            assert resp.read() == b"<h1>home</h1>"
        stats = replay.stats()
    assert stats.exact == 1 and stats.miss == 0 and stats.snapshots == [url]


def test_a_snapshot_on_s3_replays_from_a_mapped_index_and_resolves_revisits_through_it(s3, tmp_path, data_home,
                                                                                       monkeypatch, ca):
    """Large snapshots on object storage map the index copy of their local view, as local ones do; a
    revisit then finds its original through the map's digest table (the index is never parsed)."""
    import urllib.request

    from ego2web_replay.replay import Replay
    from ego2web_replay.snapshots.index_map import map_file
    from ego2web_replay.snapshots.location import open_snapshot

    w = SnapshotWriter(tmp_path / "local", "shop", clock=lambda: datetime(2026, 11, 30, 7, 15), dedup_min_size=16)
    for path in ("/a", "/b"):  # /b's payload is /a's: stored as a revisit
        w.writer.write_exchange(url=f"http://127.0.0.1:8000{path}", method="GET", request_headers=[],
                                request_body=b"", status=200, reason="OK",
                                response_headers=[("Content-Type", "text/plain")], response_body=b"same body " * 10)
    w.finalize()
    url = f"{s3}/m/shop/{w.path.name}"
    upload_snapshot(w.path, url)
    shutil.rmtree(w.path)
    _forget_cache(data_home)
    monkeypatch.setenv("EGO2WEB_REPLAY_INDEX", "mapped")
    with Replay([url], guard_mode="loopback", freeze=False) as replay:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url}))
        for path in ("/a", "/b"):
            with opener.open(f"http://127.0.0.1:8000{path}", timeout=10) as resp:
                assert resp.read() == b"same body " * 10
        stats = replay.stats()
        snap = replay.snapshots[0]
        assert snap._entries is None  # the revisit was resolved through the map, not a parsed index
    assert stats.exact == 2 and stats.miss == 0
    view_index = open_snapshot(url).index_path
    assert map_file(view_index).is_file()


def test_an_unreachable_store_is_never_a_missing_snapshot(s3, monkeypatch):
    """With nothing listening at the endpoint, a lookup is an error naming the endpoint, not "no such file"."""
    from ego2web_replay.snapshots.objstore import ObjectStorage, StoreUnreachable

    monkeypatch.setenv("EGO2WEB_REPLAY_STORE_ATTEMPTS", "1")
    with socket_closed() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        with pytest.raises(StoreUnreachable, match=f"the object store at http://127.0.0.1:{port} is unreachable"):
            ObjectStorage(f"{s3}/p").exists("t/s/manifest.json")
        for call in (lambda: open_snapshot(f"{s3}/p/t/s"), lambda: latest(f"{s3}/p", "t")):
            with pytest.raises(StoreUnreachable) as e:
                call()
            assert f"http://127.0.0.1:{port}" in str(e.value) and "\n" not in str(e.value)
            assert "is missing" not in str(e.value) and "no snapshot" not in str(e.value)


def test_a_store_killed_while_the_newest_snapshot_is_looked_up_says_so(tmp_path, monkeypatch, data_home):
    """Killed after the listing, while the manifests are read: before, each snapshot was skipped as
    unreadable and the answer was "no snapshot of task ...; record one"."""
    from ego2web_replay.snapshots.objcache import ObjectCache
    from ego2web_replay.snapshots.objstore import StoreUnreachable
    from ego2web_replay.testing.s3server import S3Server

    with S3Server() as server:
        for name, value in server.env(EGO2WEB_REPLAY_STORE_ATTEMPTS="1").items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        root = f"{server.create_bucket('killed')}/p"
        folder = _snapshot(tmp_path / "local")
        upload_snapshot(folder, f"{root}/shop/{folder.name}")
        _forget_cache(data_home)

        class KillsTheStore(ObjectCache):
            def manifest(self, remote):
                server.stop()
                return super().manifest(remote)

        with pytest.raises(StoreUnreachable) as e:
            latest(root, "shop", cache=KillsTheStore())
    assert f"the object store at {server.url} is unreachable" in str(e.value) and "record one" not in str(e.value)
