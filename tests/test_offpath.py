"""Off the recorded path, replay misses instead of serving another page (Datasette, a real app).

Datasette (PyPI) serves a SQLite product table: full-text search ``_search=``,
pagination ``_next=``, facets, sort and a JSON API. A few pages are recorded
through the recording proxy, the app is stopped, and the replay is asked for
the recorded requests, reordered and cache-busted variants, and for requests
that leave the recorded path.
"""

from __future__ import annotations

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.tasks import Task
from ego2web_replay.testing.thirdparty import DatasetteSite, available, proxy_get

pytestmark = pytest.mark.skipif(not available("datasette"), reason="datasette is in the dev extra")

RECORDED = [
    "/shop/products?_search=walnut+coffee",
    "/shop/products",
    "/shop/products?_next=5",
    "/shop/products?_facet=category&category=Outdoor",
    "/shop/products.json?_sort=price&_=1712345678901",
    "/shop/products/7.json",
]


def _last(replay: Replay) -> str:
    return replay.stats().log[-1].outcome


@pytest.fixture(scope="module")
def datasette_snapshot(tmp_path_factory, ca):
    folder = tmp_path_factory.mktemp("datasette")
    with DatasetteSite(folder / "app") as app:
        task = Task(id="shop", instruction="find walnut coffee", start_url=app.url + RECORDED[0])
        live_bodies = {}
        with LiveRecording(task, folder / "snapshots", RecordOptions(guard="loopback"), ca=ca) as live:
            for path in RECORDED:
                status, _, body = proxy_get(live.proxy_url, app.url + path)
                assert status == 200, path
                live_bodies[path] = body
        base = app.url
    assert live.ok, live.error
    return live.snapshot_path, base, live_bodies


def test_recorded_path_served_exactly_and_off_path_is_a_miss(datasette_snapshot, ca):
    snap, base, live = datasette_snapshot
    with Replay([snap], ca=ca, guard_mode="loopback", freeze=False) as replay:  # byte-exact HTML
        for path in RECORDED:
            status, headers, body = proxy_get(replay.proxy_url, base + path)
            assert (status, _last(replay), body) == (200, "exact", live[path]), path
            assert "X-Ego2Web-Replay" not in headers  # a hit is served as archived, with no added header
        same = {
            "/shop/products?category=Outdoor&_facet=category": "/shop/products?_facet=category&category=Outdoor",
            "/shop/products.json?_=1799999999999&_sort=price": "/shop/products.json?_sort=price&_=1712345678901",
        }
        for path, recorded in same.items():
            status, headers, body = proxy_get(replay.proxy_url, base + path)
            assert (status, _last(replay), body) == (200, "canonical", live[recorded]), path
        off_path = [
            "/shop/products?_search=walnut+tea",  # another search term
            "/shop/products?_next=15",  # another page
            "/shop/products?_facet=category&category=Kitchen",  # another facet value
            "/shop/products.json?_sort=name",  # another sort order
            "/shop/products/8.json",  # another id
        ]
        for path in off_path:
            status, headers, body = proxy_get(replay.proxy_url, base + path)
            assert (status, headers["X-Ego2Web-Replay"]) == (404, "miss"), path
            assert body not in live.values()
        stats = replay.stats()
    assert (stats.exact, stats.canonical, stats.fuzzy, stats.miss) == (len(RECORDED), 2, 0, len(off_path))


def test_nearest_capture_only_when_asked_and_counted_apart(datasette_snapshot, ca):
    snap, base, live = datasette_snapshot
    with Replay([snap], ca=ca, guard_mode="loopback", fuzzy=True) as replay:
        status, headers, body = proxy_get(replay.proxy_url, base + "/shop/products?_search=walnut+tea")
        stats = replay.stats()
    assert (status, headers["X-Ego2Web-Replay"]) == (200, "fuzzy")
    assert (stats.fuzzy, stats.miss) == (1, 0)
