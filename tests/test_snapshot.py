"""Snapshot folders: SnapshotWriter, Snapshot, list/latest, verify, reindex and the CLI."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import SnapshotError
from ego2web_replay.snapshots import (
    Snapshot,
    SnapshotWriter,
    latest_snapshot,
    list_snapshots,
    reindex_snapshot,
    verify_snapshot,
)

CORPUS = Path("/work/shared/corpus/warc")


def _clock(start=datetime(2026, 11, 30, 7, 15)):
    ticks = itertools.count()
    return lambda: start.replace(second=next(ticks) % 60)


def make_snapshot(root: Path, task_id="shop", compression="zst", **kw) -> SnapshotWriter:
    w = SnapshotWriter(root, task_id, compression=compression, clock=_clock(), tools={"chromium": "156"}, **kw)
    w.add_page("http://127.0.0.1:8000/")
    w.writer.write_exchange(url="http://127.0.0.1:8000/", method="GET", request_headers=[], request_body=b"",
                            status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                            response_body=b"<h1>home</h1>")
    w.writer.write_exchange(url="http://127.0.0.1:8000/search", method="POST",
                            request_headers=[("Content-Type", "application/x-www-form-urlencoded")],
                            request_body=b"q=red+shoes", status=200, reason="OK",
                            response_headers=[("Content-Type", "text/html")], response_body=b"<p>3 results</p>")
    # a same-URL revisit of the home page
    w.writer.write_record("revisit", "http://127.0.0.1:8000/", warc_headers=[
        ("WARC-Refers-To-Target-URI", "http://127.0.0.1:8000/"), ("WARC-Refers-To-Date", "2026-11-30T07:15:01Z"),
        ("WARC-Payload-Digest", "sha1:" + "X" * 32)])
    (w.path / "screenshots" / "step-000.png").write_bytes(b"\x89PNG fake")
    w.add_screenshot("screenshots/step-000.png")
    return w


def test_writer_creates_a_complete_snapshot(tmp_path):
    w = make_snapshot(tmp_path, snapshot_id=None)
    manifest = w.finalize()
    assert w.path == tmp_path / "shop" / "20261130T071500Z"
    assert sorted(p.name for p in w.path.iterdir()) == ["archive.warc.zst", "index.cdxj", "manifest.json",
                                                        "screenshots", "volatile.json"]
    assert manifest.records == {"request": 2, "response": 2, "revisit": 1, "warcinfo": 1}
    assert manifest.exchanges == 3 and manifest.payload_bytes == len(b"<h1>home</h1><p>3 results</p>")
    assert manifest.pages == ["http://127.0.0.1:8000/"] and manifest.start_url == "http://127.0.0.1:8000/"
    assert [f.path for f in manifest.files] == ["archive.warc.zst", "index.cdxj", "volatile.json",
                                                "screenshots/step-000.png"]
    assert {"python", "warcio", "zstandard", "ego2web-replay", "chromium"} <= set(manifest.tools)
    assert manifest.source == "record" and manifest.settings["compression"] == "zst"
    on_disk = json.loads((w.path / "manifest.json").read_text())
    assert on_disk["snapshot_id"] == "20261130T071500Z" and on_disk["created_at"].endswith("Z")
    report = verify_snapshot(w.path)
    assert report.ok, report.problems
    assert report.warnings and "not in this snapshot" in report.warnings[0]  # fake revisit digest


def test_snapshot_ids_get_a_suffix_on_collision(tmp_path):
    first = make_snapshot(tmp_path)
    second = make_snapshot(tmp_path)
    first.finalize()
    second.finalize()
    assert second.snapshot_id == "20261130T071500Z-2"
    with pytest.raises(SnapshotError, match="already exists"):
        SnapshotWriter(tmp_path, "shop", snapshot_id="20261130T071500Z")
    with pytest.raises(SnapshotError, match="invalid task id"):
        SnapshotWriter(tmp_path, "../escape")


def test_open_entries_and_resolve(tmp_path):
    w = make_snapshot(tmp_path)
    w.writer.write_record("revisit", "http://127.0.0.1:8000/again", warc_headers=[
        ("WARC-Refers-To-Target-URI", "http://127.0.0.1:8000/"), ("WARC-Refers-To-Date", "2026-11-30T07:15:01Z"),
        ("WARC-Payload-Digest", "sha1:" + "X" * 32)])
    home = w.writer.write_exchange(url="http://127.0.0.1:8000/x", method="GET", request_headers=[],
                                   request_body=b"", status=200, reason="OK", response_headers=[],
                                   response_body=b"<h1>home</h1>")
    w.writer.write_record("revisit", "http://127.0.0.1:8000/x", warc_headers=[
        ("WARC-Refers-To-Target-URI", "http://127.0.0.1:8000/x"), ("WARC-Refers-To-Date", "2026-11-30T07:15:05Z"),
        ("WARC-Payload-Digest", home[0].payload_digest)], http_headers=None)
    w.finalize()
    snap = Snapshot.open(w.path)
    assert snap.archive_path.name == "archive.warc.zst" and snap.manifest.task_id == "shop"
    entries = snap.entries()
    search = next(e for e in entries if e.method == "POST")
    assert search.surt.endswith("/search?__wb_method=post&q=red%20shoes")
    assert snap.resolve(search).payload == b"<p>3 results</p>"
    revisit = next(e for e in entries if e.record_type == "revisit" and e.url.endswith("/x"))
    resolved = snap.resolve(revisit)
    assert (resolved.rec_type, resolved.url, resolved.payload, resolved.http_status) == (
        "revisit", "http://127.0.0.1:8000/x", b"<h1>home</h1>", 200)
    fake = next(e for e in entries if e.record_type == "revisit" and e.url.endswith("/again"))
    with pytest.raises(SnapshotError, match="not in this snapshot"):
        snap.resolve(fake)
    assert Snapshot.open(w.path / "manifest.json").path == w.path


def test_open_errors(tmp_path):
    with pytest.raises(SnapshotError, match="no such snapshot folder"):
        Snapshot.open(tmp_path / "nope")
    w = make_snapshot(tmp_path)
    w.writer.close()  # never finalized: a crashed recorder
    with pytest.raises(SnapshotError, match="manifest.json is missing .the recording did not finish"):
        Snapshot.open(w.path)
    (w.path / "manifest.json").write_text("{not json")
    with pytest.raises(SnapshotError, match="not a valid snapshot manifest"):
        Snapshot.open(w.path)


def test_list_and_latest(tmp_path):
    a = SnapshotWriter(tmp_path, "a", clock=_clock(datetime(2026, 1, 1)))
    a.finalize()
    b = SnapshotWriter(tmp_path, "a", clock=_clock(datetime(2026, 2, 1)))
    b.finalize()
    unfinished = SnapshotWriter(tmp_path, "a", clock=_clock(datetime(2026, 3, 1)))
    unfinished.writer.close()
    SnapshotWriter(tmp_path, "b", clock=_clock(datetime(2025, 1, 1))).finalize()
    infos = list_snapshots(tmp_path)
    assert [(i.task_id, i.snapshot_id, i.complete) for i in infos] == [
        ("a", "20260301T000000Z", False), ("a", "20260201T000000Z", True), ("a", "20260101T000000Z", True),
        ("b", "20250101T000000Z", True)]
    assert latest_snapshot(tmp_path, "a") == b.path
    assert infos[0].problem is None  # unfinished: no manifest at all
    # a manifest that is there but cannot be read is said so, never taken for an unfinished recording
    (b.path / "manifest.json").write_text('{"task_id": "a", "snaps')
    damaged = next(i for i in list_snapshots(tmp_path) if i.snapshot_id == "20260201T000000Z")
    assert not damaged.complete and damaged.problem.startswith("corrupt manifest: ")
    from click.testing import CliRunner

    from ego2web_replay.cli import cli

    listed = CliRunner().invoke(cli, ["snapshot", "list", "--snapshots", str(tmp_path)], env={"COLUMNS": "200"})
    assert "corrupt manifest (snapshot verify says more)" in listed.output and "unfinished" in listed.output
    assert latest_snapshot(tmp_path, "a") == a.path
    with pytest.raises(SnapshotError, match="no snapshot of task 'zzz'"):
        latest_snapshot(tmp_path, "zzz")
    with pytest.raises(SnapshotError, match="snapshots folder not found"):
        list_snapshots(tmp_path / "none")


def test_verify_reports_tampering(tmp_path):
    w = make_snapshot(tmp_path, compression="none")
    w.finalize()
    archive = w.path / "archive.warc"
    data = archive.read_bytes()
    archive.write_bytes(data.replace(b"<h1>home</h1>", b"<h1>HOME</h1>"))
    report = verify_snapshot(w.path)
    assert not report.ok
    assert any("WARC-Payload-Digest does not match" in p for p in report.problems)
    assert any("archive.warc: sha256 differs from the manifest" in p for p in report.problems)
    index = w.path / "index.cdxj"
    index.write_text(index.read_text().replace('"offset": "', '"offset": "1'))
    problems = verify_snapshot(w.path).problems
    assert any("no whole record starts there" in p for p in problems)
    assert any("records are not in the index" in p for p in problems)


def test_truncated_archive_is_reported_and_reindex_recovers(tmp_path):
    w = make_snapshot(tmp_path)
    w.finalize()
    archive = w.path / "archive.warc.zst"
    entries = Snapshot.open(w.path).entries()
    last = max(entries, key=lambda e: e.offset)
    with open(archive, "r+b") as fh:
        fh.truncate(last.offset + 7)
    report = verify_snapshot(w.path)
    assert f"archive truncated at byte {last.offset} after 5 whole records" in report.problems
    assert report.truncated_at == last.offset
    assert reindex_snapshot(w.path) == len(entries) - 1
    problems = verify_snapshot(w.path).problems
    assert problems == [f"archive truncated at byte {last.offset} after 5 whole records",
                        "archive.warc.zst: sha256 differs from the manifest (file changed)"]


KILL_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ego2web_replay.snapshots import SnapshotWriter
    w = SnapshotWriter(Path(sys.argv[1]), "killed")
    print(w.path, flush=True)
    i = 0
    while True:
        w.writer.write_exchange(url=f"http://127.0.0.1/r{i}", method="GET", request_headers=[], request_body=b"",
                                status=200, reason="OK", response_headers=[], response_body=b"x" * 300000)
        i += 1
        print(i, flush=True)
""")


def test_killed_recorder_is_reported(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(tmp_path)], stdout=subprocess.PIPE, env=env)
    assert child.stdout is not None
    folder = Path(child.stdout.readline().decode().strip())
    done, deadline = 0, time.monotonic() + 30
    while done < 10 and time.monotonic() < deadline:
        done = int(child.stdout.readline() or 0)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    report = verify_snapshot(folder)
    assert not report.ok
    assert "manifest.json is missing: the recording did not finish (or was killed)" in report.problems
    assert report.records >= 1 + 2 * done
    if report.truncated_at is not None:
        assert f"archive truncated at byte {report.truncated_at} after {report.records} whole records" in (
            report.problems)
    assert reindex_snapshot(folder) >= done
    assert [i.complete for i in list_snapshots(tmp_path)] == [False]


# -- CLI -------------------------------------------------------------------------


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_import_list_show_verify_index(tmp_path, capsys):
    root = tmp_path / "snaps"
    code, out, _ = _run(capsys, "snapshot", "import", str(CORPUS / "pywb/example.warc.gz"), "--task", "ex",
                        "--snapshots", str(root), "--id", "s1")
    assert code == 0 and "imported 3 captures" in out
    folder = root / "ex" / "s1"
    code, out, _ = _run(capsys, "snapshot", "list", "--snapshots", str(root))
    assert code == 0 and "ex" in out and "s1" in out and "import" in out
    code, out, _ = _run(capsys, "snapshot", "list", "--snapshots", str(root), "--json", "-")
    (listed,) = json.loads(out)
    assert code == 0 and listed["snapshot_id"] == "s1" and listed["complete"] and listed["manifest"]["exchanges"] == 3
    code, out, _ = _run(capsys, "snapshot", "show", str(folder))
    assert code == 0 and "index      3 entries (response 2, revisit 1)" in out
    code, out, _ = _run(capsys, "snapshot", "show", str(folder), "--json")
    assert code == 0 and json.loads(out)["index_entries"] == {"response": 2, "revisit": 1}
    code, out, _ = _run(capsys, "snapshot", "verify", str(folder))
    assert code == 0 and out.startswith("ok: ")
    code, out, _ = _run(capsys, "snapshot", "index", str(folder))
    assert code == 0 and "indexed 3 captures" in out


def test_cli_errors_are_one_line(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.warc.gz"
    corrupt.write_bytes(b"\x1f\x8b\x08\x00garbage" * 10)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    cases = [
        (["snapshot", "verify", str(tmp_path / "missing")], "no such snapshot folder"),
        (["snapshot", "show", str(tmp_path / "missing")], "no such snapshot folder"),
        (["snapshot", "import", str(tmp_path / "missing.warc"), "--task", "t", "--snapshots", str(tmp_path)],
         "file not found"),
        (["snapshot", "import", str(corrupt), "--task", "t", "--snapshots", str(tmp_path / "s")],
         "corrupt gzip member at byte 0"),
        (["snapshot", "import", str(CORPUS / "pywb/example.warc.gz"), "--task", "t", "--snapshots",
          str(not_a_dir / "sub")], "check that the snapshots folder is writable"),
        (["snapshot", "list", "--snapshots", str(tmp_path / "none")], "snapshots folder not found"),
    ]
    for args, message in cases:
        code, out, err = _run(capsys, *args)
        assert code == 1, args
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "s" / "t").exists() or not any((tmp_path / "s" / "t").iterdir())


def test_cli_verify_prints_problems_and_fails(tmp_path, capsys):
    w = make_snapshot(tmp_path)
    w.finalize()
    (w.path / "manifest.json").unlink()
    code, out, err = _run(capsys, "snapshot", "verify", str(w.path))
    assert code == 1
    assert "problem: manifest.json is missing" in out
    assert err.startswith("error: ") and "1 problem(s) found" in err


def test_naive_and_aware_clocks_agree(tmp_path):
    aware = SnapshotWriter(tmp_path, "t", clock=lambda: datetime(2026, 5, 1, 12, tzinfo=UTC))
    assert aware.snapshot_id == "20260501T120000Z"
    assert aware.finalize().created_at == datetime(2026, 5, 1, 12, tzinfo=UTC)
