"""The demo, reduced to three tasks, runs end to end: drifted tasks fail live and still pass frozen,
and the flips are attributed to drift."""

from __future__ import annotations

import pytest

from ego2web_replay.demo.run import run_demo
from ego2web_replay.demo.site import DemoSite

pytestmark = pytest.mark.slow


def test_demo_site_drifts():
    site = DemoSite()
    status, _, body, _ = site.route("GET", "/shop/item/4", {}, b"")
    assert status == 200 and b"Crunchy Corn Snack" in body
    site.drift()
    assert site.route("GET", "/shop/item/4", {}, b"")[0] == 404
    assert b"$14.49" in site.route("GET", "/api/price/7", {}, b"")[2]
    assert b"Verify you are human" in site.route("GET", "/videos/watch", {"v": ["pasta42"]}, b"")[2]


def test_demo_end_to_end_reduced(tmp_path, data_home):
    lines: list[str] = []
    result = run_demo(tmp_path / "demo", workers=2,
                      task_ids=["shop-mug-price", "video-uploader", "shop-bottle-cart"], say=lines.append)
    assert result.judge == "rule"
    assert any("offline rule judge" in line for line in lines)
    (group,) = result.comparison.groups
    assert group.paired == 3
    assert group.frozen_rate == 1.0 and group.live_rate == pytest.approx(1 / 3)
    flips = {f.task_id: f for f in group.flips}
    assert set(flips) == {"shop-mug-price", "video-uploader"}
    assert all(f.direction == "frozen only" for f in flips.values())
    assert flips["shop-mug-price"].drift_status == "changed"
    assert flips["video-uploader"].drift_status == "blocked"
    assert result.drift["shop-bottle-cart"] in ("unchanged", "changed")
    assert group.counts.both == 1 and group.flagged_episodes == 0
    assert (result.report / "index.html").exists()
    # before the drift, live and frozen agreed on every task
    import json

    for task in ("shop-mug-price", "video-uploader", "shop-bottle-cart"):
        for mode in ("live", "frozen"):
            v = json.loads((result.runs[0] / "episodes" / task / mode / "verdicts" / "rule.json").read_text())
            assert v["success"], (task, mode, v["thoughts"])


def test_demo_summary_rate_when_nothing_could_be_judged():
    from ego2web_replay.commands.demo import _rate

    assert _rate(None) == "–"  # every verdict errored: no rate, not a crash
    assert (_rate(1 / 3), _rate(1.0)) == ("33%", "100%")
