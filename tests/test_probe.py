"""Drift probes against the drifting demo site: per-URL statuses, task status, unreachable hosts."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from ego2web_replay.demo.site import DemoSite
from ego2web_replay.errors import SnapshotError
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.tracking.attribution import _from_probe
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.drift import drift_timeseries, latest_task_status
from ego2web_replay.tracking.probe import (
    probe_snapshots,
    snapshots_to_probe,
    task_status_of,
    visible_text,
)
from ego2web_replay.tracking.sink import TrackingSink


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(root, site: DemoSite, extra_urls):
    sw = SnapshotWriter(root, "drifty")
    for path in ("/shop/item/4", "/wiki/Basil", "/videos/watch?v=pasta42", "/api/price/7", "/shop/item/3"):
        u = urlsplit(path)
        status, ctype, body, _ = site.route("GET", u.path, parse_qs(u.query), b"")
        sw.writer.write_exchange(url=site.url + path, method="GET", request_headers=[], request_body=b"",
                                 status=status, reason="", response_headers=[("Content-Type", ctype)],
                                 response_body=body, date=datetime(2026, 1, 1))
        if "html" in ctype:
            sw.add_page(site.url + path)
    for url in extra_urls:
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200,
                                 reason="OK", response_headers=[("Content-Type", "text/html")],
                                 response_body=b"<html><body>old page</body></html>", date=datetime(2026, 1, 1))
        sw.add_page(url)
    sw.finalize()
    return sw.path


def test_text_helpers():
    assert visible_text(b"<html><script>x=1</script><p>Hello <b>you</b></p></html>", "text/html") == "Hello you"


def test_probe_reports_each_url_and_never_crashes(tmp_path, data_home):
    unreachable = f"http://127.0.0.1:{_closed_port()}/gone"
    offsite = "http://offsite.example/page"
    with DemoSite() as site:
        snap = _snapshot(tmp_path / "snaps", site, [unreachable, offsite])
        site.drift()
        seen = {}
        probe_id, rows = probe_snapshots([snap], archive_root=tmp_path / "probes", guard="loopback", timeout=5,
                                         on_task=lambda t, s, p: seen.update({t: s}))
    assert not (tmp_path / "t.duckdb").exists()  # the probe only returns its rows; the caller stores them
    TrackingSink(tmp_path / "t.duckdb").probed(rows)
    by_url = {r.url.replace(site.url, ""): r for r in rows}
    assert by_url["/shop/item/4"].url_status == "gone" and by_url["/shop/item/4"].status_now == 404
    assert by_url["/wiki/Basil"].url_status == "unchanged" and by_url["/wiki/Basil"].digest_equal
    assert by_url["/videos/watch?v=pasta42"].url_status == "blocked"
    assert by_url["/api/price/7"].url_status == "changed" and by_url["/api/price/7"].text_similarity < 1
    assert by_url["/shop/item/3"].url_status == "unchanged"
    assert by_url[unreachable].url_status == "error" and "unreachable" in by_url[unreachable].error
    assert by_url[offsite].url_status == "error" and "guard" in by_url[offsite].error
    assert seen == {"drifty": "blocked"} and all(r.task_status == "blocked" for r in rows)
    # the probe is archived as a snapshot of its own
    assert list((tmp_path / "probes" / "drifty").glob("*/manifest.json"))
    series = drift_timeseries(tmp_path / "t.duckdb")
    overall = series.series("overall")["all"]
    assert len(overall) == 1 and overall[0].probe_id == probe_id and overall[0].errors == 2


def test_task_status_is_the_worst_main_document():
    from ego2web_replay.tracking.probe import UrlProbe

    mk = lambda s, main=True: UrlProbe("u", 200, 200, None, None, s, main)  # noqa: E731
    assert task_status_of([mk("unchanged"), mk("changed")]) == "changed"
    assert task_status_of([mk("changed"), mk("gone", main=False)]) == "changed"
    assert task_status_of([mk("gone"), mk("blocked")]) == "blocked"
    # a task none of whose pages could be fetched is unknown, never unchanged ...
    assert task_status_of([mk("error"), mk("error", main=False)]) == "unknown"
    # ... or unreachable, when every fetch failed to reach the site
    down = lambda main=True: UrlProbe("u", 200, None, None, None, "error", main, "unreachable: refused")  # noqa: E731
    refused = UrlProbe("u", 200, None, None, None, "error", True, "not probed: the upstream guard refused this host")
    assert task_status_of([down(), down(main=False)]) == "unreachable"
    assert task_status_of([down(), refused]) == "unknown"
    assert task_status_of([mk("error"), mk("changed", main=False)]) == "changed"
    # a change seen only in a JSON response: the page stands, its data moved
    assert task_status_of([mk("unchanged"), mk("changed", main=False)]) == "changed"
    assert task_status_of([mk("unchanged"), mk("gone", main=False)]) == "changed"
    assert task_status_of([mk("unchanged"), mk("unchanged", main=False), mk("error", main=False)]) == "unchanged"


def test_probe_of_a_site_that_is_down_is_unreachable(tmp_path, data_home):
    with DemoSite() as site:
        snap = _snapshot(tmp_path / "snaps", site, [])
    # the site is gone now: nothing can be fetched
    seen = {}
    _, rows = probe_snapshots([snap], archive_root=tmp_path / "probes", guard="loopback", timeout=3,
                              on_task=lambda t, s, p: seen.update({t: s}))
    assert seen == {"drifty": "unreachable"} and {r.url_status for r in rows} == {"error"}
    assert all(r.task_status == "unreachable" and r.error.startswith("unreachable") for r in rows)
    # stored, the latest status and the drift report say so too, and no URL counts as changed
    db = tmp_path / "t.duckdb"
    TrackingSink(db).probed(rows)
    with read_connection(db) as con:
        assert latest_task_status(con)["drifty"].status == "unreachable"
        # a flip explained by this probe is attributed to the site being down, not left unknown
        at = rows[0].probed_at
        a = _from_probe(con, "drifty", at, at, timedelta(hours=1))
    assert a is not None and (a.source, a.status) == ("probe", "unreachable") and "could not be reached" in a.note
    (point,) = drift_timeseries(db).series("task")["drifty"]
    assert point.task_status == "unreachable" and point.errors == point.urls and point.fraction_changed is None


def test_probe_that_the_guard_refused_everywhere_is_unknown(tmp_path, data_home):
    # every page is off loopback and the guard lets the probe ask none: no evidence the site is down
    sw = SnapshotWriter(tmp_path / "snaps", "offsite")
    for url in ("http://offsite.example/a", "http://offsite.example/b"):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200,
                                 reason="OK", response_headers=[("Content-Type", "text/html")],
                                 response_body=b"<html><body>page</body></html>", date=datetime(2026, 1, 1))
        sw.add_page(url)
    sw.finalize()
    seen = {}
    _, rows = probe_snapshots([sw.path], archive_root=tmp_path / "probes", guard="loopback", timeout=3,
                              on_task=lambda t, s, p: seen.update({t: s}))
    assert seen == {"offsite": "unknown"} and len(rows) == 2 and all("guard" in r.error for r in rows)


def test_snapshots_to_probe_errors(tmp_path):
    with pytest.raises(SnapshotError):
        snapshots_to_probe([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SnapshotError, match="no snapshots"):
        snapshots_to_probe([tmp_path / "empty"])
