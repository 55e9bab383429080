"""CDXJ indexing: keys and fields against pywb's golden indexes, POST keys, read/write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ego2web_replay.errors import ArchiveError
from ego2web_replay.snapshots.cdxj import (
    IndexEntry,
    build_index,
    post_query,
    read_index,
    request_body_query,
    write_index,
)
from ego2web_replay.snapshots.reader import normalize_digest, read_record, sha1_digest
from ego2web_replay.snapshots.warc import ArchiveWriter

CORPUS = Path("/work/shared/corpus/warc")


def _fields(entries, full=True):
    if full:
        return {(e.surt, e.timestamp, e.url, e.digest, e.offset, e.length, e.mime, e.status) for e in entries}
    return {(e.surt, e.timestamp, e.url, e.digest, e.offset, e.length) for e in entries}


@pytest.mark.parametrize("name", ["iana", "dupes", "post-test"])
def test_matches_pywb_golden_index(name):
    golden = read_index(CORPUS / f"pywb/{name}.cdxj")
    ours = build_index(CORPUS / f"pywb/{name}.warc.gz")
    assert _fields(ours) == _fields(golden)
    assert {e.filename for e in ours} == {f"{name}.warc.gz"}


def test_matches_old_style_golden_index():
    # example.cdxj predates the mime/status fields
    assert _fields(build_index(CORPUS / "pywb/example.warc.gz"), full=False) == _fields(
        read_index(CORPUS / "pywb/example.cdxj"), full=False)


def test_url_agnostic_revisit_keeps_its_target():
    golden = read_index(CORPUS / "pywb/url-agnost-example.cdxj")
    revisit = build_index(CORPUS / "pywb/example-url-agnostic-revisit.warc.gz")
    orig = build_index(CORPUS / "pywb/example-url-agnostic-orig.warc.gz")
    assert _fields(revisit + orig) == _fields(golden)
    (entry,) = revisit
    assert entry.record_type == "revisit" and entry.mime == "warc/revisit"
    assert (entry.refers_to_uri, entry.refers_to_date) == ("http://example.iana.org/", "20130702195402")
    assert IndexEntry.from_line(entry.to_line()) == entry


def test_post_keys_multipart_json_and_binary():
    entries = build_index(CORPUS / "cdxj-indexer/post-test-more.warc")
    assert sorted(e.surt for e in entries) == [
        "org,httpbin)/post?__wb_method=post&__wb_post_data=c29tzwnodw5rlwvuy29kzwrkyxrh",
        "org,httpbin)/post?__wb_method=post&a=json-data",
        "org,httpbin)/post?__wb_method=post&another=more^data&test=some+data",
    ]
    assert {e.method for e in entries} == {"POST"}
    assert {e.request_body_query for e in entries} == {
        "test=some+data&another=more%5Edata", "a=json-data", "__wb_post_data=c29tZWNodW5rLWVuY29kZWRkYXRh"}


def test_post_query_conventions():
    assert post_query("POST", "application/x-www-form-urlencoded", b"A=1&B=%5B%5D&C=3") == "__wb_method=post&A=1&B=[]&C=3"
    assert post_query("POST", "application/json", b'{"a": {"b": 1, "c": [2, 3]}, "b": true}') == (
        "__wb_method=post&b=1&c=2&c.2_=3&b.2_=True")
    assert post_query("PUT", "application/octet-stream", b"\x00\x01") == "__wb_method=put&__wb_post_data=AAE="
    assert post_query("DELETE", None, b"x") == "__wb_method=delete"
    assert post_query("POST", "text/plain", b"not json") == "__wb_method=post&__wb_post_data=bm90IGpzb24="
    assert post_query("POST", "application/json", b"{broken") == "__wb_method=post"
    multipart = (b"--XyZ\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\nred shoes\r\n"
                 b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.bin\"\r\n\r\n\x01\x02\r\n"
                 b"--XyZ--\r\n")
    assert request_body_query("multipart/form-data; boundary=XyZ", multipart) == "q=red+shoes&f=%01%02"
    assert len(request_body_query("application/x-www-form-urlencoded", b"a=" + b"x" * 9000)) == 4096
    # a long GraphQL body: the query text first, its variables past the cut; the form names the whole body
    query = "query Dashboard { " + "field " * 1000 + "}"
    fiction, travel = (json.dumps({"query": query, "variables": {"genre": g}}).encode() for g in ("fiction", "travel"))
    forms = [request_body_query("application/json", body) for body in (fiction, travel)]
    assert forms[0] != forms[1] and all(len(f) == 4096 and "&__wb_body_sha256=" in f for f in forms)
    assert request_body_query("application/json", fiction) == forms[0]  # (the same body: the same form)


def test_index_of_our_own_archive_resolves_every_record(tmp_path):
    path = tmp_path / "archive.warc.zst"
    with ArchiveWriter(path) as w:
        get = w.write_exchange(url="http://127.0.0.1:9/a?z=1&b=2", method="GET", request_headers=[],
                               request_body=b"", status=200, reason="OK",
                               response_headers=[("Content-Type", "text/html; charset=utf-8")],
                               response_body=b"<p>a</p>")
        post = w.write_exchange(url="http://127.0.0.1:9/api", method="POST",
                                request_headers=[("Content-Type", "application/json")],
                                request_body=b'{"q": "x y"}', status=200, reason="OK",
                                response_headers=[], response_body=b"{}")
        res = w.write_record("resource", "http://127.0.0.1:9/shot.png", payload=b"PNG", content_type="image/png")
    entries = build_index(path)
    assert [e.surt for e in entries] == [
        "1,0,0,127:9)/a?b=2&z=1", "1,0,0,127:9)/api?__wb_method=post&q=x+y", "1,0,0,127:9)/shot.png"]
    a, api, shot = entries
    assert (a.mime, a.status, a.offset, a.length) == ("text/html", 200, get[0].offset, get[0].length)
    assert (api.method, api.request_body_query, api.offset) == ("POST", "q=x+y", post[0].offset)
    assert (shot.record_type, shot.mime, shot.status, shot.offset) == ("resource", "image/png", 200, res.offset)
    for entry in entries:
        rec = read_record(path, entry.offset, entry.length)
        assert rec.url == entry.url and sha1_digest(rec.payload).split(":")[1] == entry.digest
    index = tmp_path / "index.cdxj"
    write_index(list(reversed(entries)), index)
    lines = index.read_text().splitlines()
    assert lines == sorted(lines, key=str.encode)
    assert read_index(index) == entries


def test_read_index_errors(tmp_path):
    bad = tmp_path / "index.cdxj"
    bad.write_text('com,example)/ 20140101000000 {"url": "http://example.com/", "offset": "0", "length": "1"}\n'
                   "com,example)/ garbage\n")
    with pytest.raises(ArchiveError, match=r"index.cdxj: line 2 is not a valid CDXJ line"):
        read_index(bad)
    with pytest.raises(ArchiveError, match="index not found"):
        read_index(tmp_path / "missing.cdxj")


def test_digests_are_normalized_to_base32_sha1():
    (entry,) = build_index(CORPUS / "pywb/example2.warc.gz")  # warcprox stores sha1 as hex
    assert entry.digest == "G7HRM7BGOKSKMSXZAHMUQTTV53QOFSMK"
    assert normalize_digest("sha1:2jmj7l5rSw0yVb/vlWAYkK/YBwk=") == "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
    assert normalize_digest("sha1:2jmj7l5rSw0yVb_vlWAYkK_YBwk=") == "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
    assert normalize_digest("sha1:3i42h3s6nnfq2msvx7xzkyaysc x5qbyj".replace(" ", "")) == "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
    assert normalize_digest("sha256:abc") == "sha256:abc" and normalize_digest(None) == ""
