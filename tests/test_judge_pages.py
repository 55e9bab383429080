"""Archived pages for judges: HTML to text, and the snapshot adapter.

``ego2web_replay.snapshots`` is written on another branch; until it is merged
the adapter is exercised against a small stand-in with the same documented
API (``Snapshot.open``, ``.entries()``, ``.resolve(entry)``).
"""

from __future__ import annotations

import gzip
import sys
import types
from dataclasses import dataclass

import brotli
import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.pages import (
    ChainPages,
    DictPages,
    SnapshotPages,
    html_to_text,
    normalize_url,
)


def test_html_to_text_skips_scripts_and_keeps_blocks():
    html = ("<html><head><title>Acme &amp; Co</title><style>p{}</style></head><body>"
            "<script>var x='hidden'</script><h1>Kettle</h1><p>Price:   <b>$20</b></p><ul><li>blue</li></ul>")
    assert html_to_text(html) == "Acme & Co\nKettle\nPrice: $20\nblue"


def test_normalize_and_dict_and_chain():
    assert normalize_url("HTTPS://Shop.Test/a/#frag") == "https://shop.test/a"
    pages = ChainPages([DictPages({"https://a.test/": "plain text"}), DictPages({"https://b.test/x": "<p>B</p>"})])
    assert pages.get_text("https://a.test") == "plain text"
    assert pages.get_text("https://b.test/x#top") == "B"
    assert pages.get_text("https://c.test/") is None


@dataclass
class _Entry:
    url: str
    mime: str
    status: int
    body: bytes
    headers: list[tuple[str, str]]


@dataclass
class _Record:
    payload: bytes
    http_headers: list[tuple[str, str]]


class _Snapshot:
    store: dict[str, list[_Entry]] = {}

    def __init__(self, entries):
        self._entries = entries

    @classmethod
    def open(cls, path):
        return cls(cls.store[str(path)])

    def entries(self):
        return iter(self._entries)

    def resolve(self, entry):
        return _Record(entry.body, entry.headers)


@pytest.fixture
def snapshot_module(monkeypatch, tmp_path):
    pkg = types.ModuleType("ego2web_replay.snapshots")
    mod = types.ModuleType("ego2web_replay.snapshots.snapshot")
    mod.Snapshot = _Snapshot
    pkg.snapshot = mod
    monkeypatch.setitem(sys.modules, "ego2web_replay.snapshots", pkg)
    monkeypatch.setitem(sys.modules, "ego2web_replay.snapshots.snapshot", mod)
    d = tmp_path / "snap"
    d.mkdir()
    html = "<title>Café</title><p>Prix 5 £</p>".encode("latin-1")
    _Snapshot.store[str(d)] = [
        _Entry("https://s.test/gz", "text/html", 200, gzip.compress(b"<p>gzipped page</p>"),
               [("Content-Encoding", "gzip"), ("Content-Type", "text/html")]),
        _Entry("https://s.test/br", "text/html", 200, brotli.compress(b"<p>brotli page</p>"),
               [("Content-Encoding", "br")]),
        _Entry("https://s.test/latin", "text/html", 200, html,
               [("Content-Type", "text/html; charset=iso-8859-1")]),
        _Entry("https://s.test/img", "image/png", 200, b"\x89PNG", []),
        _Entry("https://s.test/gone", "text/html", 404, b"<p>not found</p>", []),
    ]
    return d


def test_snapshot_pages_decode_archived_bodies(snapshot_module):
    pages = SnapshotPages([snapshot_module])
    assert pages.get_text("https://s.test/gz") == "gzipped page"
    assert pages.get_text("https://s.test/br/") == "brotli page"
    assert pages.get_text("https://s.test/latin") == "Café\nPrix 5 £"
    assert pages.get_text("https://s.test/img") is None
    assert pages.get_text("https://s.test/gone") is None
    assert pages.get_text("https://elsewhere.test/") is None


def test_snapshot_pages_errors(snapshot_module, tmp_path):
    with pytest.raises(JudgeError, match="snapshot folder not found"):
        SnapshotPages([tmp_path / "missing"]).get_text("https://s.test/gz")
