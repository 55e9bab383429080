"""Export: ``.warc.gz`` (warcio check), WACZ (``wacz validate``, pywb replay) and the import round trip."""

from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.snapshots import (
    Snapshot,
    SnapshotWriter,
    import_warc,
    iter_records,
    verify_snapshot,
)
from ego2web_replay.snapshots.export import export_snapshot
from ego2web_replay.testing.pywb import PywbCollection

BIN = Path(sys.executable).parent
BASE = "http://127.0.0.1:8000"


def _clock():
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 30, 7, 15, next(ticks) % 60)


def build_snapshot(root: Path, task_id: str = "shop") -> Path:
    """A small snapshot: pages, a gzip-encoded body, a gzip chunked one, a POST, an image, a same-URL revisit,
    a screenshot."""
    w = SnapshotWriter(root, task_id, clock=_clock(), start_url=f"{BASE}/start", snapshot_id="s1")
    ex = w.writer.write_exchange
    ex(url=f"{BASE}/start", method="GET", request_headers=[], request_body=b"", status=302, reason="Found",
       response_headers=[("Location", "/")], response_body=b"")
    home = ex(url=f"{BASE}/", method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
              response_headers=[("Content-Type", "text/html")], response_body=b"<html><h1>home</h1></html>")
    ex(url=f"{BASE}/app.js", method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
       response_headers=[("Content-Type", "application/javascript"), ("Content-Encoding", "gzip")],
       response_body=gzip.compress(b"console.log('hi');" * 50, mtime=0))
    ex(url=f"{BASE}/logo.png", method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
       response_headers=[("Content-Type", "image/png")], response_body=bytes(range(256)) * 8)
    ex(url=f"{BASE}/feed", method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
       response_headers=[("Content-Type", "application/json"), ("Content-Encoding", "gzip"),
                         ("Transfer-Encoding", "chunked")],  # sent chunked: archived chunked
       response_body=gzip.compress(b'{"items": [1, 2, 3]}' * 40, mtime=0))
    ex(url=f"{BASE}/search", method="POST", request_headers=[("Content-Type", "application/x-www-form-urlencoded")],
       request_body=b"q=red+shoes", status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
       response_body=b"<p>3 results</p>")
    w.writer.write_record("revisit", f"{BASE}/", warc_headers=[
        ("WARC-Refers-To-Target-URI", f"{BASE}/"), ("WARC-Refers-To-Date", "2026-11-30T07:15:01Z"),
        ("WARC-Payload-Digest", home[0].payload_digest)])
    w.add_page(f"{BASE}/")
    w.add_page(f"{BASE}/search")
    (w.path / "screenshots" / "step-000.png").write_bytes(b"\x89PNG fake")
    w.add_screenshot("screenshots/step-000.png")
    w.finalize()
    return w.path


def capture_key(snap: Snapshot) -> list[tuple]:
    """What must survive a round trip: every capture, its metadata and the bytes served for it."""
    out = []
    for e in snap.entries():
        r = snap.resolve(e)
        out.append((e.surt, e.timestamp, e.url, e.mime, e.digest, e.status, e.method, e.record_type,
                    r.http_status, tuple(r.http_headers or ()), r.payload))
    return sorted(out, key=repr)


@pytest.fixture()
def snap_path(tmp_path) -> Path:
    return build_snapshot(tmp_path / "snaps")


def test_warc_gz_export_passes_warcio_check_and_keeps_every_record(snap_path, tmp_path):
    out = tmp_path / "shop.warc.gz"
    result = export_snapshot(snap_path, out, "warc.gz")
    check = subprocess.run([BIN / "warcio", "check", "-v", out], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    source = [(r.rec_type, r.record_id, r.block) for r in iter_records(Snapshot.open(snap_path).archive_path)]
    exported = [(r.rec_type, r.record_id, r.block) for r in iter_records(out)]
    assert exported[:-1] == source and result.records == len(exported) and result.materialized == 0
    meta = json.loads(exported[-1][2])
    assert exported[-1][0] == "metadata" and meta["start_url"] == f"{BASE}/start"
    assert meta["pages"] == [f"{BASE}/", f"{BASE}/search"]
    with open(out, "rb") as fh:  # a gzip member per record
        assert fh.read(2) == b"\x1f\x8b"


def test_wacz_export_validates_with_py_wacz(snap_path, tmp_path):
    out = tmp_path / "shop.wacz"
    export_snapshot(snap_path, out, "wacz")
    run = subprocess.run([BIN / "wacz", "validate", "-f", out], capture_output=True, text=True)
    assert run.returncode == 0 and "is valid" in run.stdout, run.stdout + run.stderr
    with zipfile.ZipFile(out) as zf:
        assert zf.getinfo("archive/data.warc.gz").compress_type == zipfile.ZIP_STORED
        package = json.loads(zf.read("datapackage.json"))
        pages = [json.loads(line) for line in zf.read("pages/pages.jsonl").splitlines()]
        index = zf.read("indexes/index.cdx").decode().splitlines()
        names = set(zf.namelist())
    assert package["mainPageURL"] == f"{BASE}/start" and package["wacz_version"] == "1.1.1"
    assert [p["url"] for p in pages[1:]] == [f"{BASE}/", f"{BASE}/search"] and pages[0]["format"]
    assert len(index) == 7 and all('"filename": "data.warc.gz"' in line for line in index)
    assert {"ego2web/manifest.json", "screenshots/step-000.png"} <= names
    # a tampered WACZ fails validation: the check is real
    tampered = tmp_path / "tampered.wacz"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            dst.writestr(info, data.replace(b"/search", b"/s3arch") if info.filename.startswith("pages/") else data)
    bad = subprocess.run([BIN / "wacz", "validate", "-f", tampered], capture_output=True, text=True)
    assert bad.returncode != 0


@pytest.mark.parametrize("fmt", ["wacz", "warc.gz"])
def test_export_then_import_gives_an_equal_snapshot(snap_path, tmp_path, fmt):
    out = tmp_path / f"shop.{fmt}"
    export_snapshot(snap_path, out, fmt)  # type: ignore[arg-type]
    back = import_warc(out, "shop", tmp_path / "imported", compression="zst")
    orig = Snapshot.open(snap_path)
    assert capture_key(back) == capture_key(orig)
    assert back.manifest.pages == orig.manifest.pages and back.manifest.start_url == orig.manifest.start_url
    assert back.manifest.exchanges == orig.manifest.exchanges
    assert "metadata" not in back.manifest.records  # the manifest record is consumed, not copied
    assert verify_snapshot(back.path).ok


def test_cli_export_and_errors(snap_path, tmp_path, capsys):
    out = tmp_path / "cli.wacz"
    assert main(["snapshot", "export", str(snap_path), "--format", "wacz", "--out", str(out)]) == 0
    assert "exported" in capsys.readouterr().out and zipfile.is_zipfile(out)
    assert main(["snapshot", "export", str(tmp_path / "nope"), "--out", str(tmp_path / "x.wacz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert main(["snapshot", "export", str(snap_path), "--out", str(tmp_path)]) == 1
    assert "is a folder" in capsys.readouterr().err
    assert not (tmp_path / "x.wacz").exists()


def pywb_serves(wacz: Path, work: Path, snap: Snapshot) -> int:
    """Load ``wacz`` into pywb (collection mode, no live collection) and compare every GET capture's bytes."""
    compared = 0
    with PywbCollection(work, wacz) as coll:
        for e in snap.entries():
            if e.method != "GET" or not e.url.startswith("http"):
                continue
            expected = snap.resolve(e)
            status, body = coll.get(e.timestamp, e.url)
            assert (status, body) == (expected.http_status, expected.payload), e.url
            compared += 1
    return compared


@pytest.mark.slow
def test_pywb_replays_the_exported_wacz_byte_exact(snap_path, tmp_path):
    out = tmp_path / "shop.wacz"
    export_snapshot(snap_path, out, "wacz")
    assert pywb_serves(out, tmp_path / "pywb", Snapshot.open(snap_path)) == 6


def test_export_reads_through_the_storage_interface(snap_path, tmp_path):
    from ego2web_replay.snapshots.storage import LocalStorage, copy_snapshot
    from ego2web_replay.testing.storage import MemoryStorage

    mem = MemoryStorage()
    copy_snapshot(LocalStorage(snap_path), mem)
    remote = Snapshot.open(Path("memory/shop/s1"), storage=mem)
    when = lambda: datetime(2026, 12, 1, 9, 0)  # noqa: E731
    for fmt in ("warc.gz", "wacz"):
        a = export_snapshot(snap_path, tmp_path / f"disk.{fmt}", fmt, clock=when)  # type: ignore[arg-type]
        b = export_snapshot(remote, tmp_path / f"mem.{fmt}", fmt, clock=when)  # type: ignore[arg-type]
        assert a.path.read_bytes() == b.path.read_bytes()
