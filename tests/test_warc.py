"""WARC writing and reading: ArchiveWriter, iter_records, read_record, scan_archive, framing."""

from __future__ import annotations

import gzip
import io
import itertools
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from ego2web_replay.errors import ArchiveError
from ego2web_replay.snapshots.framing import iter_units
from ego2web_replay.snapshots.reader import digest_problems, iter_records, read_record, scan_archive
from ego2web_replay.snapshots.warc import ArchiveWriter, chunk_body

CORPUS = Path("/work/shared/corpus/warc")
BIG = random.Random(7).randbytes(5 * 1024 * 1024)
HTML_GZ = gzip.compress(b"<html><body>" + b"hello " * 500 + b"</body></html>", mtime=0)
WARCIO = Path(sys.executable).parent / "warcio"


def _ids():
    counter = itertools.count(1)
    return lambda: f"<urn:uuid:00000000-0000-4000-8000-{next(counter):012d}>"


def _clock():
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 30, 7, 15, 0, 0).replace(microsecond=next(ticks) * 1000)


def write_sample(path: Path, compression: str) -> list:
    """Four exchanges: gzip-encoded chunked HTML, a JSON POST, a 5 MB binary, an HTTP/2 exchange."""
    locations = []
    with ArchiveWriter(path, compression=compression, clock=_clock(), id_factory=_ids(),
                       warcinfo={"software": "ego2web-replay test"}) as w:
        locations += w.write_exchange(
            url="http://127.0.0.1:8000/page?x=1", method="GET",
            request_headers=[("Host", "127.0.0.1:8000"), ("Accept-Encoding", "gzip")], request_body=b"",
            status=200, reason="OK",
            response_headers=[("Content-Type", "text/html"), ("Content-Encoding", "gzip"),
                              ("Transfer-Encoding", "chunked")],
            response_body=HTML_GZ, ip="127.0.0.1",
        )
        locations += w.write_exchange(
            url="http://127.0.0.1:8000/api/search", method="POST",
            request_headers=[("Host", "127.0.0.1:8000"), ("Content-Type", "application/json")],
            request_body=b'{"q": "red shoes", "page": {"n": 2}}',
            status=201, reason="Created", response_headers=[("Content-Type", "application/json")],
            response_body=b'{"ok": true}',
        )
        locations += w.write_exchange(
            url="http://127.0.0.1:8000/big.bin", method="GET", request_headers=[], request_body=b"",
            status=200, reason="OK", response_headers=[("Content-Type", "application/octet-stream"),
                                                       ("Content-Length", "999")],
            response_body=BIG,
        )
        locations += w.write_exchange(
            url="https://shop.example:8443/cart", method="GET",
            request_headers=[(":method", "GET"), (":authority", "shop.example:8443"), ("user-agent", "t")],
            request_body=b"", status=404, reason="", http_version="HTTP/2.0",
            response_headers=[(":status", "404"), ("content-type", "text/plain")], response_body=b"gone",
            date=datetime(2026, 11, 30, 7, 16, tzinfo=UTC),
        )
    return locations


@pytest.fixture(params=["zst", "gz", "none"])
def sample(request, tmp_path):
    ext = {"zst": ".warc.zst", "gz": ".warc.gz", "none": ".warc"}[request.param]
    path = tmp_path / f"archive{ext}"
    return path, write_sample(path, request.param)


def test_gz_passes_warcio_check_and_reads_with_warcio(tmp_path):
    path = tmp_path / "a.warc.gz"
    write_sample(path, "gz")
    result = subprocess.run([str(WARCIO), "check", "-v", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("digest pass") == 9
    with open(path, "rb") as fh:
        records = [(r.rec_type, r.content_stream().read() if r.rec_type == "response" else None)
                   for r in ArchiveIterator(fh)]
    assert [t for t, _ in records] == ["warcinfo"] + ["response", "request"] * 4
    # warcio decodes Content-Encoding; our payload is the encoded wire body
    assert records[1][1] == gzip.decompress(HTML_GZ)
    assert records[5][1] == BIG


def test_records_read_back(sample):
    path, locations = sample
    records = list(iter_records(path))
    assert [r.rec_type for r in records] == ["warcinfo"] + ["response", "request"] * 4
    by_offset = {r.offset: r for r in records}
    for loc in locations:
        rec = by_offset[loc.offset]
        assert (rec.length, rec.record_id, rec.url, rec.payload_digest) == (
            loc.length, loc.record_id, loc.url, loc.payload_digest)
        assert digest_problems(rec) == []
    html, html_req, post, post_req, big, _, h2, h2_req = records[1:]
    assert html.payload == HTML_GZ and html.ip == "127.0.0.1"
    # sent chunked: stored as received (chunked again, no Content-Length added), read back de-chunked
    assert html.chunked and html.http_header("Transfer-Encoding") == "chunked"
    assert html.http_header("Content-Length") is None and html.stored_payload == chunk_body(HTML_GZ)
    assert html.http_header("Content-Encoding") == "gzip"
    assert html_req.concurrent_to == [html.record_id]
    assert (post.http_status, post.http_reason) == (201, "Created")
    assert post_req.http_method == "POST" and post_req.payload == b'{"q": "red shoes", "page": {"n": 2}}'
    assert post_req.http_header("Content-Length") == "36"
    assert big.payload == BIG and big.http_header("Content-Length") == str(len(BIG))
    assert (h2.http_protocol, h2.http_status, h2.http_reason) == ("HTTP/1.1", 404, "Not Found")
    assert all(not k.startswith(":") for k, _ in h2.http_headers)
    assert h2.date == "2026-11-30T07:16:00Z"
    assert h2_req.http_target == "/cart" and h2_req.http_header("Host") == "shop.example:8443"
    assert records[0].headers["WARC-Filename"] == path.name
    assert records[1].headers.items()[0] == ("WARC-Type", "response")
    assert html.date.startswith("2026-11-30T07:15:00.") and html.headers.get("WARC-Date") == html.date


def test_zst_and_gz_hold_the_same_records(tmp_path):
    write_sample(tmp_path / "a.warc.zst", "zst")
    write_sample(tmp_path / "a.warc.gz", "gz")
    zst = list(iter_records(tmp_path / "a.warc.zst"))
    gz = list(iter_records(tmp_path / "a.warc.gz"))
    assert len(zst) == len(gz) == 9
    for a, b in zip(zst, gz, strict=True):
        assert a.payload == b.payload and a.http_headers == b.http_headers
        assert [h for h in a.headers.items() if h[0] != "WARC-Filename"] == [
            h for h in b.headers.items() if h[0] != "WARC-Filename"]


def test_each_zstd_frame_is_standalone_with_size_and_checksum(tmp_path):
    path = tmp_path / "a.warc.zst"
    write_sample(path, "zst")
    data = path.read_bytes()
    with open(path, "rb") as fh:
        units = list(iter_units(fh, path))
    assert len(units) == 9 and sum(u.length for u in units) == len(data)
    for unit in units:
        frame = data[unit.offset : unit.offset + unit.length]
        params = zstandard.get_frame_parameters(frame)
        assert params.content_size == len(unit.data) and params.has_checksum
        assert zstandard.ZstdDecompressor().decompress(frame) == unit.data
        assert unit.data.startswith(b"WARC/1.1\r\n") and unit.data.endswith(b"\r\n\r\n")


def test_same_clock_and_ids_give_identical_bytes(tmp_path):
    for comp in ("zst", "gz"):
        first, second = tmp_path / "1" / f"a.{comp}", tmp_path / "2" / f"a.{comp}"
        write_sample(first, comp)
        write_sample(second, comp)
        assert first.read_bytes() == second.read_bytes()


def test_read_record_at_each_offset(sample):
    path, locations = sample
    for loc in locations:
        rec = read_record(path, loc.offset, loc.length)
        assert (rec.record_id, rec.url, rec.rec_type) == (loc.record_id, loc.url, loc.record_type)
    with pytest.raises(ArchiveError, match="the index says"):
        read_record(path, locations[0].offset, locations[0].length + 1)
    with pytest.raises(ArchiveError, match="past the end"):
        read_record(path, path.stat().st_size)


def test_reopening_appends_without_a_second_warcinfo(tmp_path):
    path = tmp_path / "a.warc.zst"
    write_sample(path, "zst")
    size = path.stat().st_size
    with ArchiveWriter(path, clock=_clock(), id_factory=_ids()) as w:
        loc = w.write_record("resource", "urn:test:note", payload=b"note", content_type="text/plain")
    assert loc.offset == size
    records = list(iter_records(path))
    assert [r.rec_type for r in records].count("warcinfo") == 1
    assert records[-1].payload == b"note" and records[-1].content_type == "text/plain"


def test_revisit_record(tmp_path):
    path = tmp_path / "a.warc.gz"
    with ArchiveWriter(path, compression="gz", clock=_clock(), id_factory=_ids()) as w:
        w.write_record("revisit", "http://127.0.0.1/x", warc_headers=[
            ("WARC-Refers-To-Target-URI", "http://127.0.0.1/y"), ("WARC-Refers-To-Date", "2026-01-01T00:00:00Z"),
            ("WARC-Payload-Digest", "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ")])
    rec = list(iter_records(path))[-1]
    assert rec.rec_type == "revisit" and rec.refers_to_target_uri == "http://127.0.0.1/y"
    assert rec.headers["WARC-Profile"].endswith("/warc/1.1/revisit/identical-payload-digest")
    assert subprocess.run([str(WARCIO), "check", str(path)]).returncode == 0


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_write_failure_raises_archive_error():
    import gc

    with pytest.raises(ArchiveError, match="cannot write to the archive"):
        ArchiveWriter(Path("/dev/full"), compression="none")
    gc.collect()  # no file was left open to fail again when it is collected


def test_writing_after_close_raises(tmp_path):
    w = ArchiveWriter(tmp_path / "a.warc.zst")
    w.close()
    with pytest.raises(ArchiveError, match="closed"):
        w.write_record("resource", "urn:x", payload=b"x")


@pytest.mark.parametrize("comp", ["zst", "gz", "none"])
def test_truncated_tail_is_reported(tmp_path, comp):
    path = tmp_path / f"a.{comp}"
    locations = write_sample(path, comp)
    cut = locations[4]  # the big response: cut in its middle
    with open(path, "r+b") as fh:
        fh.truncate(cut.offset + cut.length // 2)
    scan = scan_archive(path)
    assert (scan.truncated_at, scan.whole_records, scan.error) == (cut.offset, 5, None)
    with pytest.raises(ArchiveError, match=f"truncated at byte {cut.offset} after 5 whole records"):
        list(iter_records(path))
    stream = iter_records(path, tolerate_truncation=True)
    assert [r.offset for r in stream] == [r.offset for r in scan.records]
    assert stream.truncated_at == cut.offset and stream.whole_records == 5


def test_corrupt_data_names_file_and_offset(tmp_path):
    for comp in ("zst", "gz", "none"):
        path = tmp_path / f"a.{comp}"
        locations = write_sample(path, comp)
        data = bytearray(path.read_bytes())
        start = locations[2].offset
        data[start : start + 16] = b"\x00garbage-garbage"
        path.write_bytes(bytes(data))
        with pytest.raises(ArchiveError, match=rf"{path.name}.*byte {start}"):
            list(iter_records(path))
        scan = scan_archive(path)
        assert scan.whole_records == 3 and str(start) in (scan.error or "")


def test_missing_archive():
    with pytest.raises(ArchiveError, match="not found"):
        list(iter_records(Path("/nonexistent/a.warc.zst")))


KILL_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ego2web_replay.snapshots.warc import ArchiveWriter
    w = ArchiveWriter(Path(sys.argv[1]))
    body = bytes(range(256)) * 2000
    i = 0
    while True:
        w.write_exchange(url=f"http://127.0.0.1/r{i}", method="GET", request_headers=[], request_body=b"",
                         status=200, reason="OK", response_headers=[], response_body=body + str(i).encode())
        i += 1
        print(i, flush=True)
""")


def test_sigkill_leaves_whole_records(tmp_path):
    path = tmp_path / "killed.warc.zst"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(path)], stdout=subprocess.PIPE, env=env)
    assert child.stdout is not None
    done = 0
    deadline = time.monotonic() + 30
    while done < 25 and time.monotonic() < deadline:
        done = int(child.stdout.readline() or 0)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert done >= 25
    scan = scan_archive(path, check_digests=True)
    assert scan.error is None and scan.digest_problems == []
    assert scan.whole_records >= 1 + 2 * done  # every acknowledged exchange is whole
    for info in scan.records:
        assert read_record(path, info.offset, info.length).record_id == info.record_id
    if scan.truncated_at is not None:
        assert scan.truncated_at == scan.records[-1].offset + scan.records[-1].length


def test_corpus_zstd_with_and_without_dictionary_match_gzip():
    plain = list(iter_records(CORPUS / "pywb/iana.warc.gz"))
    for name in ("derived_iana.warc.zst", "derived_iana.dict.warc.zst"):
        records = list(iter_records(CORPUS / "derived" / name))
        assert len(records) == len(plain) == 343
        for a, b in zip(records, plain, strict=True):
            assert (a.record_id, a.rec_type, a.payload, a.http_headers) == (
                b.record_id, b.rec_type, b.payload, b.http_headers)
        dict_file = CORPUS / "derived" / name
        last = records[-1]
        assert read_record(dict_file, last.offset, last.length).payload == last.payload


def test_corpus_chunked_odd_method_and_missing_reason():
    chunked = [r for r in iter_records(CORPUS / "warcio/example-iana.org-chunked.warc") if r.rec_type == "response"][0]
    assert chunked.chunked and chunked.payload.startswith(b"<!doctype html>") and b"\r\n0\r\n" not in chunked.payload
    assert digest_problems(chunked) == []
    methods = [r.http_method for r in iter_records(CORPUS / "pywb/example-extra.warc") if r.rec_type == "request"]
    assert methods == ["GET", "GETX"]
    (missing,) = iter_records(CORPUS / "pywb/missing-status-text.warc")
    assert (missing.http_status, missing.http_reason) == (302, "")


def test_empty_gzip_members_are_skipped(tmp_path):
    empty = gzip.compress(b"", mtime=0)
    source = (CORPUS / "pywb/example.warc.gz").read_bytes()
    path = tmp_path / "padded.warc.gz"
    path.write_bytes(empty + source + empty + empty)
    assert len(list(iter_records(path))) == len(list(iter_records(CORPUS / "pywb/example.warc.gz")))


def test_plain_stream_reader_handles_io_bytes():
    with open(CORPUS / "pywb/example-extra.warc", "rb") as fh:
        units = list(iter_units(io.BufferedReader(fh), CORPUS / "pywb/example-extra.warc"))
    assert [u.offset for u in units][:2] == [0, 1991]


# -- a payload from a file: written in pieces --------------------------------------------------------
def _write_one(path: Path, compression: str, body, chunked: bool, dedup: int | None = None) -> list:
    head = [("Content-Type", "application/octet-stream")] + ([("Transfer-Encoding", "chunked")] if chunked else [])
    locations = []
    with ArchiveWriter(path, compression=compression, clock=_clock(), id_factory=_ids(), dedup_min_size=dedup) as w:
        for url in ("http://127.0.0.1:8000/a.bin", "http://127.0.0.1:8000/b.bin"):
            payload = body() if callable(body) else body
            locations += w.write_exchange(url=url, method="GET", request_headers=[("Host", "127.0.0.1:8000")],
                                          request_body=b"", status=200, reason="OK", response_headers=head,
                                          response_body=payload)
    return locations


def _spool(data: bytes):
    import tempfile

    spool = tempfile.SpooledTemporaryFile(max_size=1 << 20)  # noqa: SIM115 - closed with the test
    spool.write(data)
    return spool


@pytest.mark.parametrize("compression", ["zst", "gz", "none"])
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("dedup", [None, 1024], ids=["all", "dedup"])
def test_a_payload_from_a_file_is_written_in_pieces_into_the_same_records(tmp_path, compression, chunked, dedup):
    body = BIG + b"x" * (2 << 20)
    name = f"a.warc.{compression}"  # the same name (in the warcinfo record) for both
    whole = _write_one(tmp_path / "whole" / name, compression, body, chunked, dedup)
    pieces = _write_one(tmp_path / "pieces" / name, compression, lambda: _spool(body), chunked, dedup)
    assert [(x.record_type, x.payload_digest) for x in whole] == [(x.record_type, x.payload_digest) for x in pieces]
    a, b = ([(r.headers.items(), r.block) for r in iter_records(tmp_path / way / name)] for way in ("whole", "pieces"))
    assert a == b  # the same headers (digests and lengths included) and blocks
    assert [x.record_type for x in pieces].count("revisit") == (1 if dedup else 0)
    path = tmp_path / "pieces" / name
    assert path.read_bytes() == (tmp_path / "whole" / name).read_bytes(), "not the same archive bytes"
    assert all(not digest_problems(r) for r in iter_records(path))
    if compression == "zst":  # one frame per record, each with its content size and checksum
        data = path.read_bytes()
        with path.open("rb") as fh:
            for unit in iter_units(fh, path):
                params = zstandard.get_frame_parameters(data[unit.offset:unit.offset + 18])
                assert params.content_size == len(unit.data) and params.has_checksum
    else:
        check = subprocess.run([WARCIO, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
