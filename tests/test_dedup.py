"""Suite-level deduplication (revisits + shared store), zstd dictionaries (IIPC layout), packs."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import zstandard
from test_export import BIN, build_snapshot

from ego2web_replay.cli import main
from ego2web_replay.errors import SnapshotError
from ego2web_replay.snapshots import Snapshot, import_warc, iter_records, verify_snapshot
from ego2web_replay.snapshots.dedup import SHARED_DIR, dedup_snapshots
from ego2web_replay.snapshots.export import export_snapshot
from ego2web_replay.snapshots.framing import DICT_MAGIC
from ego2web_replay.snapshots.pack import pack_suite, unpack_suite

TASKS = ["t1", "t2", "t3", "t4"]


def served(snap: Snapshot) -> list[tuple]:
    """What a replay serves for each capture: key, time, method, then status, headers and payload."""
    out = []
    for e in snap.entries():
        r = snap.resolve(e)
        out.append((e.surt, e.timestamp, e.url, e.digest, e.method, r.http_status, tuple(r.http_headers or ()),
                    r.payload))
    return sorted(out, key=repr)


@pytest.fixture()
def suite_root(tmp_path) -> Path:
    root = tmp_path / "snaps"
    for t in TASKS:
        build_snapshot(root, t)
    (tmp_path / "tasks.jsonl").write_text("".join(
        json.dumps({"id": t, "instruction": "find the shop", "start_url": "http://127.0.0.1:8000/start"}) + "\n"
        for t in TASKS), "utf-8")
    return root


def _sources(root: Path) -> list[Path]:
    return [root / t / "s1" for t in TASKS]


def test_dedup_writes_revisits_that_resolve_to_the_same_bytes(suite_root, tmp_path):
    result = dedup_snapshots(_sources(suite_root), tmp_path / "dedup", min_size=16)
    assert result.stored_payloads == 5 and result.revisits == 4 * 5  # home, app.js, logo, feed, search in each
    for src, out in zip(_sources(suite_root), result.snapshots, strict=True):
        snap = Snapshot.open(out)
        assert served(snap) == served(Snapshot.open(src))
        assert snap.manifest.shared == [f"../../{SHARED_DIR}/{result.store.name}"]
        report = verify_snapshot(out)
        assert report.ok and not report.warnings, (report.problems, report.warnings)
        revisits = [r for r in iter_records(snap.archive_path) if r.rec_type == "revisit"]
        ours = [r for r in revisits if r.headers.get("WARC-Refers-To")]
        assert len(ours) == 5 and all(r.payload == b"" for r in ours)
        for r in ours:
            assert r.headers["WARC-Profile"] == "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
            assert r.refers_to_target_uri and r.refers_to_date and r.http_status
    # the shared payloads are stored once
    store_records = list(iter_records(result.store / "archive.warc.zst"))
    assert len(store_records) == 5 and {r.rec_type for r in store_records} == {"response"}
    # a missing or changed store is a problem, not a silent miss
    (result.store / "index.cdxj").write_text("", "utf-8")
    assert any("sha256 differs" in p for p in verify_snapshot(result.snapshots[0]).problems)
    shutil.rmtree(result.store)
    assert any("missing" in p for p in verify_snapshot(result.snapshots[0]).problems)
    with pytest.raises(SnapshotError, match="shared"):
        Snapshot.open(result.snapshots[0]).resolve(next(e for e in Snapshot.open(result.snapshots[0]).entries()
                                                        if e.record_type == "revisit" and e.url.endswith("logo.png")))


def test_exported_deduplicated_snapshot_stands_alone(suite_root, tmp_path):
    result = dedup_snapshots(_sources(suite_root), tmp_path / "dedup", min_size=16)
    out = export_snapshot(result.snapshots[1], tmp_path / "t2.wacz", "wacz")
    assert out.materialized == 6  # the 5 shared payloads and the snapshot's own revisit of the home page
    shutil.rmtree(result.store)  # the export needs nothing from the suite
    run = subprocess.run([BIN / "wacz", "validate", "-f", out.path], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    back = import_warc(out.path, "t2", tmp_path / "back")
    assert served(back) == served(Snapshot.open(_sources(suite_root)[1]))
    assert verify_snapshot(back.path).ok
    gz = export_snapshot(back.path, tmp_path / "t2.warc.gz", "warc.gz")
    check = subprocess.run([BIN / "warcio", "check", gz.path], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_dictionary_archives_use_the_iipc_layout(suite_root, tmp_path):
    result = dedup_snapshots(_sources(suite_root), tmp_path / "dedup", min_size=16, dictionary=True)
    assert result.dictionary_bytes > 0
    archive = result.snapshots[0] / "archive.warc.zst"
    data = archive.read_bytes()
    assert int.from_bytes(data[:4], "little") == DICT_MAGIC
    size = int.from_bytes(data[4:8], "little")
    dictionary = zstandard.ZstdDecompressor().decompress(data[8 : 8 + size])
    # any reader of the layout: the zstd tool skips the skippable frame and decodes every frame with the dictionary
    (tmp_path / "dict").write_bytes(dictionary)
    plain = subprocess.run(["zstd", "-dc", "-D", tmp_path / "dict", archive], capture_output=True, check=True).stdout
    ours = list(iter_records(archive))
    assert plain.count(b"WARC/1.1\r\n") + plain.count(b"WARC/1.0\r\n") == len(ours)
    assert all(r.block in plain for r in ours)
    # the frames really need the dictionary
    assert subprocess.run(["zstd", "-dc", archive], capture_output=True).returncode != 0
    assert served(Snapshot.open(result.snapshots[0])) == served(Snapshot.open(_sources(suite_root)[0]))
    assert verify_snapshot(result.snapshots[0]).ok


def _flip(pack: Path, member: str, out: Path, where: float) -> None:
    """Copy ``pack`` with one byte flipped in ``member``'s stored data, ``where`` of the way through it."""
    with zipfile.ZipFile(pack) as zf:
        info = zf.getinfo(member)
    raw = bytearray(pack.read_bytes())
    name_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + min(info.compress_size - 1, int(info.compress_size * where))] ^= 0x01
    out.write_bytes(bytes(raw))


def test_pack_unpack_round_trip_and_a_flipped_byte_is_refused(suite_root, tmp_path):
    pack = tmp_path / "suite.pack"
    r = pack_suite(suite_root, pack, tasks_file=tmp_path / "tasks.jsonl", min_size=16)
    assert sorted(r.snapshots) == [f"{t}/s1" for t in TASKS] and r.stored_payloads == 5
    with zipfile.ZipFile(pack) as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("pack.json"))
    assert names[-1] == "pack.json" and "tasks/tasks.jsonl" in names
    assert {f["path"] for f in manifest["files"]} == set(names[:-1])

    dest = tmp_path / "unpacked"
    u = unpack_suite(pack, dest)
    assert u.files_checked == len(names) - 1 and u.tasks_file == dest / "tasks.jsonl"
    for t in TASKS:
        assert served(Snapshot.open(dest / t / "s1")) == served(Snapshot.open(suite_root / t / "s1"))
    with pytest.raises(SnapshotError, match="already exists"):
        unpack_suite(pack, dest)

    archive = next(n for n in names if n.endswith("t3/s1/archive.warc.zst"))
    for member, where in itertools.product((archive, "snapshots/t1/s1/index.cdxj", "pack.json"), (0, 0.5, 1)):
        bad = tmp_path / "bad.pack"
        _flip(pack, member, bad, where)
        fresh = tmp_path / f"fresh-{member.replace('/', '_')}-{where}"
        with pytest.raises(SnapshotError) as err:
            unpack_suite(bad, fresh)
        assert member in str(err.value), str(err.value)
        assert not any(fresh.iterdir())  # nothing placed, no staging left behind


def test_cli_suite_pack_unpack_dedup(suite_root, tmp_path, capsys):
    pack = tmp_path / "cli.pack"
    assert main(["suite", "pack", str(suite_root), "--out", str(pack), "--no-dictionary"]) == 0
    assert "packed 4 snapshots" in capsys.readouterr().out
    assert main(["suite", "unpack", str(pack), "--snapshots", str(tmp_path / "u"), "--json"]) == 0
    unpacked = json.loads(capsys.readouterr().out)
    assert len(unpacked["snapshots"]) == 4 and unpacked["files_checked"] > 8
    assert main(["suite", "dedup", str(suite_root), "--out", str(tmp_path / "d"), "--min-size", "16"]) == 0
    assert "20 revisits" in capsys.readouterr().out
    assert main(["suite", "unpack", str(tmp_path / "nope.pack"), "--snapshots", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "not found" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "notzip.pack").write_bytes(b"hello")
    assert main(["suite", "unpack", str(tmp_path / "notzip.pack"), "--snapshots", str(tmp_path / "x")]) == 1
    assert "not a valid pack" in capsys.readouterr().err


def test_extending_a_deduplicated_snapshot_keeps_its_store(suite_root, tmp_path):
    from ego2web_replay.snapshots.extend import extend_snapshot

    result = dedup_snapshots(_sources(suite_root), tmp_path / "dedup", min_size=16)
    grown = extend_snapshot(result.snapshots[0], [suite_root / "t1" / "s1"], root=tmp_path / "elsewhere")
    snap = Snapshot.open(grown.path)
    assert snap.manifest.shared == [f"../../../dedup/{SHARED_DIR}/{result.store.name}"]
    assert any(e.record_type == "revisit" for e in snap.entries())
    assert served(snap) == served(Snapshot.open(suite_root / "t1" / "s1"))
    report = verify_snapshot(grown.path)
    assert report.ok and not report.warnings, (report.problems, report.warnings)


def test_suite_dedup_and_unpack_build_the_mapped_index_of_large_snapshots(tmp_path, data_home, monkeypatch):
    """A deduplicated or unpacked copy has a new index, so it gets its own mapped index (large
    snapshots replay from it); the copies staged inside `suite pack` get none."""
    from datetime import datetime

    from ego2web_replay.config import data_dir
    from ego2web_replay.snapshots import index_cache
    from ego2web_replay.snapshots.dedup import dedup_snapshots
    from ego2web_replay.snapshots.index_map import map_file
    from ego2web_replay.snapshots.pack import pack_suite, unpack_suite
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    monkeypatch.setattr(index_cache, "_CACHE_MIN_ROWS", 2)  # "large": two captures will do here
    sources = []
    for task in ("a", "b"):
        sw = SnapshotWriter(tmp_path / "src", task, compression="zst", source="record")
        for n in range(3):
            sw.writer.write_exchange(url=f"http://{task}.test/{n}", method="GET", request_headers=[], request_body=b"",
                                     status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                                     response_body=b"same payload everywhere " * 20, date=datetime(2026, 1, 1, 0, 0, n))
        sw.finalize()
        sources.append(sw.path)

    def cached() -> set[str]:
        return {p.name for p in (data_dir() / "index-cache").glob("*.sorted")}

    result = dedup_snapshots(sources, tmp_path / "dedup")
    for snap in result.snapshots:
        assert map_file(snap / "index.cdxj").is_file()

    before = cached()
    pack_suite(tmp_path / "src", tmp_path / "suite.pack")
    assert cached() == before  # nothing mapped for the staged copies
    unpacked = unpack_suite(tmp_path / "suite.pack", tmp_path / "unpacked")
    assert len(unpacked.snapshots) == 2
    for snap in unpacked.snapshots:
        target = map_file(snap / "index.cdxj")
        assert target is not None and target.name in cached() - before
