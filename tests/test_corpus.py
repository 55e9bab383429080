"""Interoperability: every WARC / WACZ of the shared corpus imports, verifies and resolves."""

from __future__ import annotations

from pathlib import Path

import pytest

from ego2web_replay.snapshots import Snapshot, import_warc, iter_records, verify_snapshot
from ego2web_replay.snapshots.reader import sha1_digest

CORPUS = Path("/work/shared/corpus/warc")
FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and (".warc" in p.name or p.suffix == ".wacz"))

# Fixtures that are broken on purpose upstream; `warcio check` reports the same records.
EXPECTED_DIGEST_FAILURES = {
    "warcio/example-digest.warc": "request record",  # a deliberately wrong payload digest
    "pywb/example-extra.warc": "response record",  # an 'HTTPX/1.1' status line
    "cdxj-indexer/missing-http.warc.gz": "response record",  # digest of a payload that is not stored
}


def test_corpus_is_there():
    assert len(FILES) == 27


@pytest.mark.parametrize("src", FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_corpus_file_imports_and_verifies(src, tmp_path):
    snap = import_warc(src, "corpus", tmp_path, snapshot_id="s")
    source_records = _count_records(src)
    assert sum(snap.manifest.records.values()) == source_records + 1  # + our warcinfo
    report = verify_snapshot(snap.path)
    expected = EXPECTED_DIGEST_FAILURES.get(str(src.relative_to(CORPUS)))
    if expected:
        assert len(report.problems) == 1 and expected in report.problems[0]
        assert "WARC-Payload-Digest does not match" in report.problems[0]
    else:
        assert report.ok, report.problems
    for entry in snap.entries():
        record = snap.record(entry)
        assert record.url == entry.url and record.offset == entry.offset
        if entry.record_type != "revisit" or snap.find_original(entry) is not None:
            assert _payload_digests(snap.resolve(entry)) & {entry.digest} or expected


def _payload_digests(record) -> set[str]:
    return {sha1_digest(record.stored_payload).split(":")[1], sha1_digest(record.payload).split(":")[1]}


def _count_records(src: Path) -> int:
    if src.suffix == ".wacz":
        import tempfile
        import zipfile

        with zipfile.ZipFile(src) as zf, tempfile.TemporaryDirectory() as tmp:
            total = 0
            for name in zf.namelist():
                if name.startswith("archive/"):
                    total += sum(1 for _ in iter_records(Path(zf.extract(name, tmp))))
            return total
    return sum(1 for _ in iter_records(src))


def _all_revisits_resolve(snap: Snapshot) -> int:
    count = 0
    for entry in snap.entries():
        if entry.record_type != "revisit":
            continue
        resolved = snap.resolve(entry)
        assert resolved.rec_type == "revisit" and resolved.url == entry.url
        assert entry.digest in _payload_digests(resolved)
        assert resolved.http_status is not None
        count += 1
    return count


def test_same_url_revisits_resolve(tmp_path):
    snap = import_warc([CORPUS / "pywb/iana.warc.gz", CORPUS / "pywb/dupes.warc.gz"], "iana", tmp_path)
    assert _all_revisits_resolve(snap) == 123 + 9
    fonts = [e for e in snap.entries() if e.url.endswith("Inconsolata.otf")]
    payloads = {snap.resolve(e).payload for e in fonts}
    assert len(fonts) == 5 and len(payloads) == 1 and len(payloads.pop()) > 30000
    for name in ("pywb/example.warc.gz", "warcio/example.warc.gz"):
        assert _all_revisits_resolve(import_warc(CORPUS / name, "ex", tmp_path)) == 1


def test_url_agnostic_revisit_resolves_across_files(tmp_path):
    snap = import_warc([CORPUS / "pywb/example-url-agnostic-revisit.warc.gz",
                        CORPUS / "pywb/example-url-agnostic-orig.warc.gz"], "agnostic", tmp_path)
    assert verify_snapshot(snap.path).warnings == []
    revisit = next(e for e in snap.entries() if e.record_type == "revisit")
    original = snap.find_original(revisit)
    assert original is not None and original.url == "http://example.iana.org/"
    resolved = snap.resolve(revisit)
    assert resolved.url == "http://test@example.com/"
    assert resolved.payload == snap.record(original).payload and b"Example Domain" in resolved.payload
    assert _all_revisits_resolve(snap) == 1
    # alone, the revisit cannot be resolved, and verify says so as a warning
    alone = import_warc(CORPUS / "pywb/example-url-agnostic-revisit.warc.gz", "alone", tmp_path)
    report = verify_snapshot(alone.path)
    assert report.ok and "cannot be replayed" in report.warnings[0]


def test_chunked_odd_method_missing_reason_and_resource(tmp_path):
    chunked = import_warc(CORPUS / "warcio/example-iana.org-chunked.warc", "c", tmp_path)
    (entry,) = chunked.entries()
    record = chunked.resolve(entry)
    assert record.chunked and record.payload.startswith(b"<!doctype html>")
    assert record.payload.rstrip().endswith(b"</html>") and len(record.payload) < len(record.stored_payload)

    extra = import_warc(CORPUS / "pywb/example-extra.warc", "x", tmp_path)
    methods = sorted(e.method for e in extra.entries())
    assert methods == ["GET", "GET", "GET", "GETX"]
    getx = next(e for e in extra.entries() if e.method == "GETX")
    assert "__wb_method=getx" in getx.surt

    missing = import_warc(CORPUS / "pywb/missing-status-text.warc", "m", tmp_path)
    (entry,) = missing.entries()
    record = missing.resolve(entry)
    assert (entry.status, record.http_status, record.http_reason) == (302, 302, "")
    assert record.http_header("Location") == "http://www.iana.org/badst"

    resource = import_warc(CORPUS / "pywb/httpbin-resource.warc.gz", "r", tmp_path)
    (entry,) = resource.entries()
    assert entry.record_type == "resource" and resource.resolve(entry).http_headers is None


def test_dictionary_zstd_import_keeps_payloads(tmp_path):
    dict_snap = import_warc(CORPUS / "derived/derived_iana.dict.warc.zst", "d", tmp_path)
    gz_snap = import_warc(CORPUS / "pywb/iana.warc.gz", "g", tmp_path)
    a = {(e.surt, e.timestamp, e.digest) for e in dict_snap.entries()}
    b = {(e.surt, e.timestamp, e.digest) for e in gz_snap.entries()}
    assert a == b and len(a) == 171
    assert _all_revisits_resolve(dict_snap) == 123


def test_wacz_pages_and_gz_output(tmp_path):
    snap = import_warc(CORPUS / "py-wacz/valid_signed_example_1.wacz", "w", tmp_path, compression="gz")
    assert snap.archive_path.name == "archive.warc.gz"
    assert snap.manifest.pages == ["https://example.com/"] and snap.manifest.start_url == "https://example.com/"
    assert verify_snapshot(snap.path).ok
