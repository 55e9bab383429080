"""Pair diff of a live archive against a frozen snapshot, both recorded from the demo site through the real
recording proxy; stored in a real DuckDB file; printed by ``drift diff``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ego2web_replay.cli import cli
from ego2web_replay.demo.site import DemoSite
from ego2web_replay.models import AgentSpec, load_trajectory, save_model
from ego2web_replay.testing.archives import Fetch, record_requests
from ego2web_replay.testing.tracking import EpisodeSpec, make_run
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.pairdiff import diff_pair
from ego2web_replay.tracking.pairdiff_store import load_pair_diff, record_pair_diffs


def _fetches(base: str, stamp: int) -> list[Fetch]:
    shop, item = f"{base}/shop", f"{base}/shop/item/7"
    return [
        Fetch(shop),
        Fetch(f"{base}/img/product/7.png", "image", referer=shop),
        Fetch(f"{base}/static/site.css", "style", referer=shop),
        Fetch(f"{base}/shop/item/4", referer=shop),
        Fetch(f"{base}/videos/watch?v=pasta42", referer=shop),
        Fetch(item, referer=shop),
        Fetch(f"{base}/api/price/7?_={stamp}", "empty", referer=item),
        Fetch(f"{base}/api/cart", "empty", "POST", json.dumps({"item": 7, "qty": 1, "ts": stamp}).encode(),
              "application/json", referer=item),
    ]


@pytest.fixture(scope="module")
def archives(tmp_path_factory, ca):
    root = tmp_path_factory.mktemp("pairdiff")
    with DemoSite() as site:
        frozen = record_requests("demo-task", _fetches(site.url, 1764500000000), root / "snapshots", ca=ca)
        site.drift()
        live = record_requests("demo-task", _fetches(site.url, 1764600000000)
                               + [Fetch(f"{site.url}/wiki/Espresso", referer=f"{site.url}/shop")],
                               root / "live", source="live-run", ca=ca)
        yield {"root": root, "frozen": frozen, "live": live, "url": site.url}


def test_pair_diff_classifies_each_resource(archives):
    base = archives["url"]
    d = diff_pair(archives["live"], archives["frozen"], final_url=f"{base}/shop/item/7", run_id="r1")
    by_url = {r.url.split("?")[0]: r for r in d.resources}
    assert f"{base}/static/site.css" not in by_url  # styles are not compared
    price = by_url[f"{base}/api/price/7"]
    assert (price.kind, price.status) == ("xhr", "changed")
    assert [(f.path, f.old, f.new) for f in price.fields] == [("price", "$12.99", "$14.49")]
    assert price.frozen_url is not None and price.frozen_url != price.url  # paired across the cache-buster
    shop = by_url[f"{base}/shop"]
    assert shop.status == "changed" and "Crunchy Corn Snack" in shop.removed and not shop.added
    assert (by_url[f"{base}/shop/item/4"].status, by_url[f"{base}/shop/item/4"].status_now) == ("gone", 404)
    captcha = by_url[f"{base}/videos/watch"]
    assert captcha.status == "blocked" and "challenge" in captcha.detail
    assert by_url[f"{base}/img/product/7.png"].status == "unchanged"
    assert by_url[f"{base}/api/cart"].status == "unchanged"  # the POST's timestamp field is volatile
    assert by_url[f"{base}/wiki/Espresso"].status == "new"
    assert d.status == "blocked"
    # the agent's final page (the mug's item page) and its price API come first
    first = d.changes()[0]
    assert first.url.startswith(f"{base}/api/price/7") and first.final_page


def test_pair_diff_of_an_unchanged_site_is_unchanged(archives, tmp_path, ca):
    with DemoSite() as site:  # a fresh, undrifted site on another port: compare it with itself
        a = record_requests("t", [Fetch(f"{site.url}/shop/item/3")], tmp_path / "a", ca=ca)
        b = record_requests("t", [Fetch(f"{site.url}/shop/item/3")], tmp_path / "b", source="live-run", ca=ca)
    d = diff_pair(b, a)
    assert d.status == "unchanged" and d.changes() == []


def _run_with_archives(archives, root: Path) -> Path:
    rd = make_run(root, "run-1", AgentSpec(name="scripted"),
                  [EpisodeSpec("demo-task", "live"), EpisodeSpec("demo-task", "frozen")])
    live_ep, frozen_ep = rd / "episodes/demo-task/live", rd / "episodes/demo-task/frozen"
    import shutil

    shutil.copytree(archives["live"], live_ep / "snapshots" / "demo-task" / archives["live"].name)
    traj = load_trajectory(frozen_ep)
    traj.snapshot_path, traj.snapshot_id = str(archives["frozen"]), archives["frozen"].name
    save_model(frozen_ep / "trajectory.json", traj)
    return rd


def test_pair_diffs_stored_in_the_database(archives, tmp_path):
    d = diff_pair(archives["live"], archives["frozen"], run_id="r1", task_id="demo-task")
    db = tmp_path / "t.duckdb"
    assert record_pair_diffs(db, [d, d]) == 2
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM pair_diffs").fetchone()[0] == 1  # replaced, not duplicated
        rows = con.execute("SELECT status, count(*) FROM resource_changes GROUP BY status ORDER BY 1").fetchall()
        back = load_pair_diff(con, "r1", "demo-task")
    assert dict(rows) == {"blocked": 1, "changed": 2, "gone": 1, "new": 1}
    assert back is not None and back.status == "blocked" and len(back.resources) == len(d.resources)


def test_drift_diff_command(archives, tmp_path):
    rd = _run_with_archives(archives, tmp_path / "runs")
    db, out = tmp_path / "cli.duckdb", tmp_path / "diff.json"
    r = CliRunner().invoke(cli, ["drift", "diff", str(rd), "--db", str(db), "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "demo-task: blocked" in r.output
    assert "changed" in r.output and 'price: "$12.99" -> "$14.49"' in r.output
    assert "recorded in" in r.output
    assert json.loads(out.read_text())[0]["task_id"] == "demo-task"
    with read_connection(db) as con:
        assert con.execute("SELECT run_id, status FROM pair_diffs").fetchall() == [("run-1", "blocked")]
    bad = CliRunner().invoke(cli, ["drift", "diff", str(tmp_path / "nope")])
    assert bad.exit_code != 0 and "nope" in bad.output
    # any snapshot of the task: here the live archive itself, so nothing differs
    same = CliRunner().invoke(cli, ["drift", "diff", str(rd), "--against", str(archives["live"]), "--no-db"])
    assert same.exit_code == 0, same.output
    assert "demo-task: unchanged" in same.output and "recorded in" not in same.output
    # a run with no live episode: said, never an empty answer
    frozen_only = make_run(tmp_path / "frozen-runs", "run-2", AgentSpec(name="scripted"),
                           [EpisodeSpec("demo-task", "frozen", verdicts={"rule": True})])
    none = CliRunner().invoke(cli, ["drift", "diff", str(frozen_only), "--no-db"])
    assert none.exit_code == 0 and f"no live episode in {frozen_only} to diff" in none.output


def test_a_site_that_could_not_be_reached_is_unreachable(tmp_path, ca):
    from ego2web_replay.snapshots import Snapshot
    from ego2web_replay.tracking.pairdiff import pair_status

    with DemoSite() as site:
        base = site.url
        fetches = [Fetch(f"{base}/shop/item/7"),
                   Fetch(f"{base}/api/price/7?_=1764500000000", "empty", referer=f"{base}/shop/item/7")]
        frozen = record_requests("demo-task", fetches, tmp_path / "snapshots", ca=ca)
    # the site is down now: the recording proxy archives nothing and lists what it could not reach
    down = record_requests("demo-task", fetches, tmp_path / "live", source="live-run", ca=ca)
    failures = Snapshot.open(down).manifest.upstream_failures
    assert [(f.method, f.url) for f in failures] == [("GET", f.url) for f in fetches]
    assert all(f.error and f.at is not None for f in failures)
    d = diff_pair(down, frozen, final_url=f"{base}/shop/item/7")
    assert d.status == "unreachable" and d.counts()["unreachable"] == 2
    page, price = d.changes()
    assert (page.url, page.kind, page.final_page, page.status_then, page.status_now) == (
        f"{base}/shop/item/7", "document", True, 200, None)
    assert price.kind == "xhr" and "could not be reached" in price.detail
    # a request that failed beside a change that was seen does not hide it; alone, it is the cause
    assert pair_status(["unreachable", "changed"]) == "changed"
    assert pair_status(["unchanged", "unreachable", "new"]) == "unreachable"
