"""The static HTML report: built from real run folders, opened in real Chromium from a file URL."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import AgentSpec
from ego2web_replay.png import png_bytes
from ego2web_replay.testing.tracking import (
    EpisodeSpec,
    make_run,
    make_snapshot,
    make_suite,
)
from ego2web_replay.tracking.drift import ProbeResult, record_probe
from ego2web_replay.tracking.ingest import ingest
from ego2web_replay.tracking.report import build_report, episode_page_path

CHROMIUM = Path("/usr/lib/chromium/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "knowledge", "t3": "shopping"},
                       videos={"t2": "clips/t2.mp4"})
    frames = tmp_path / "clips" / "t2.mp4.keyframes"  # the judge's keyframe cache beside the video
    frames.mkdir(parents=True)
    for i in range(2):
        (frames / f"kf-{i:03d}.png").write_bytes(png_bytes(4, 4, (0, 0, 200)))
    make_snapshot(tmp_path / "snapshots", "t1", "s1", [("https://shop.example/", 200, "sha1:A")])
    runs = tmp_path / "runs"
    make_run(runs, "run-a", AgentSpec(name="openai", model="gpt-x"), [
        EpisodeSpec("t1", "live", {"ego2web": True, "rule": True}, screenshots=2, keyframes=2),
        EpisodeSpec("t1", "frozen", {"ego2web": False, "rule": True}, miss=2, screenshots=2, keyframes=2),
        EpisodeSpec("t2", "live", {"ego2web": True}), EpisodeSpec("t2", "frozen", {"ego2web": True}),
        EpisodeSpec("t3", "live", {"ego2web": False}), EpisodeSpec("t3", "frozen", {"ego2web": False}),
    ], suite=suite)
    make_run(runs, "run-b", AgentSpec(name="scripted"), [
        EpisodeSpec("t1", "live", {"ego2web": True}), EpisodeSpec("t1", "frozen", {"ego2web": True}),
    ], suite=suite)
    path = tmp_path / "r.duckdb"
    ingest(path, [tmp_path / "snapshots", runs])
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    for i, status in enumerate(["unchanged", "changed", "gone"]):
        record_probe(path, [
            ProbeResult(probe_id=f"p{i}", probed_at=t0 + timedelta(days=7 * i), task_id="t1",
                        url="https://shop.example/", url_status=status),
            ProbeResult(probe_id=f"p{i}", probed_at=t0 + timedelta(days=7 * i), task_id="t2",
                        url="https://wiki.example/a", url_status="unchanged"),
        ])
    return path


def test_report_files(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    summary = build_report(db, out, iterations=200)
    assert summary.episode_pages == 8
    # t1/run-a: 2 screenshots + 2 episode keyframes per mode; 6 others: 1 screenshot each;
    # t2/run-a: 2 video keyframes per mode; the t1 flip (ego2web) page: 2 screenshots per mode side by side
    assert summary.assets == 2 * (2 + 2) + 6 + 2 * 2 + 2 * 2
    from ego2web_replay.tracking.report_flips import flip_page_path

    flip = (out / flip_page_path("openai:gpt-x", "ego2web", "t1", "run-a")).read_text()
    assert flip.count('alt="frozen screenshot') == 2 and flip.count('alt="live screenshot') == 2
    assert "No evidence of what the site looked like" in flip  # these episodes have no archives, no probe near
    index = (out / "index.html").read_text()
    assert 'class="chart-bars"' in index and 'class="chart-lines"' in index
    page = out / episode_page_path("run-a", "t1", "frozen")
    html = page.read_text()
    assert "https://t1.example/missing1" in html  # replay misses
    assert "ego2web thinks no" in html and "rule thinks yes" in html  # each judge's thoughts
    assert "step 1 thought" in html and "goto url=" in html
    assert (page.parent / "t1-frozen_files" / "step-001.png").is_file()
    assert (page.parent / "t1-frozen_files" / "frame-01.png").is_file()
    t2 = (out / episode_page_path("run-a", "t2", "live")).read_text()
    assert 't2-live_files/kf-000.png' in t2 and 't2-live_files/kf-001.png' in t2
    for f in out.rglob("*.html"):
        for ref in re.findall(r'(?:src|href)="([^"]*)"', f.read_text()):
            assert not re.match(r"^[a-z]+:", ref), (f, ref)  # only relative links
            assert (f.parent / ref).exists(), (f, ref)
    # rebuilding replaces, it does not pile up
    assert build_report(db, out, iterations=200).assets == summary.assets


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_report_opens_in_chromium_from_file_url(db: Path, tmp_path: Path, playwright) -> None:
    out = tmp_path / "report"
    build_report(db, out, iterations=200)
    requests: list[str] = []
    p = playwright  # the session's one Playwright (conftest)
    if True:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto((out / "index.html").as_uri())
            page.wait_for_load_state("load")
            bars = page.locator("svg.chart-bars rect.bar")
            assert bars.count() == 2 * 3  # live + frozen for 3 agent × judge groups
            heights = [bars.nth(i).bounding_box()["height"] for i in range(bars.count())]  # type: ignore[index]
            assert max(heights) > 100 and all(h >= 0 for h in heights)
            assert page.locator("svg.chart-lines circle.point").count() == 3 + 2 * 3  # overall + 2 sites
            assert page.locator("svg.chart-lines polyline.line").count() == 3
            bg = page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor")
            assert bg == "rgb(45, 55, 72)"  # the shipped stylesheet is applied
            page.click(f'a[href="{episode_page_path("run-a", "t1", "frozen")}"] >> nth=0')
            page.wait_for_load_state("load")
            widths = page.evaluate("[...document.images].map(i => i.naturalWidth)")
            assert len(widths) == 4 and all(w > 0 for w in widths)
            assert "ego2web thinks no" in page.inner_text("body")
        finally:
            browser.close()
    assert requests, "no requests recorded"
    off = [u for u in requests if not (u.startswith("file://") or u.startswith("data:"))]
    assert off == []


def test_report_cli_and_missing_db(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli-report"
    assert main(["report", "--db", str(db), "--out", str(out), "--iterations", "50"]) == 0
    assert "8 episode pages" in capsys.readouterr().out
    assert (out / "index.html").is_file()
    assert not list(out.glob("charts/*.png"))
    if CHROMIUM.exists():  # --png: each chart drawn by Chromium, at the size its SVG declares
        import struct
        import xml.etree.ElementTree as ET

        assert main(["report", "--db", str(db), "--out", str(out), "--iterations", "50", "--png"]) == 0
        assert "8 chart files" in capsys.readouterr().out  # 4 SVG + 4 PNG
        for svg in sorted(out.glob("charts/*.svg")):
            data = svg.with_suffix(".png").read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
            width, height = struct.unpack(">II", data[16:24])
            root = ET.parse(svg).getroot()
            assert (width, height) == (int(root.get("width")), int(root.get("height"))), svg
    assert main(["report", "--db", str(tmp_path / "none.duckdb"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "ingest" in err and err.count("\n") == 1


def test_charts_show_the_interval_and_tables_and_charts_are_saved(db: Path, tmp_path: Path) -> None:
    """The difference chart carries the paired bootstrap interval compare computes; the comparison is saved
    as CSV (the bytes `compare --csv` writes) and every chart as a standalone SVG file."""
    import xml.etree.ElementTree as ET

    from ego2web_replay.tracking.compare import compare, csv_text

    out = tmp_path / "report"
    summary = build_report(db, out, iterations=300, seed=4)
    comp = compare(db, iterations=300, seed=4)
    assert {p.relative_to(out).as_posix() for p in summary.exports} == {
        "comparison.csv", "runs.csv", "charts/success.svg", "charts/difference.svg", "charts/drift.svg",
        "charts/runs.svg"}
    assert (out / "comparison.csv").read_text("utf-8") == csv_text(comp)
    svg = "{http://www.w3.org/2000/svg}"
    diff = ET.parse(out / "charts" / "difference.svg").getroot()
    intervals = [(float(g.get("data-low")), float(g.get("data-high"))) for g in diff.iter(f"{svg}g")
                 if g.get("class") == "interval"]
    wanted = [(g.ci_low, g.ci_high) for g in comp.groups if g.ci_low is not None]
    assert wanted and intervals == [pytest.approx(w, abs=1e-5) for w in wanted]
    titles = [t.text or "" for t in diff.iter(f"{svg}title")]
    assert any("CI [" in t for t in titles)
    for name in ("success", "drift"):
        assert ET.parse(out / "charts" / f"{name}.svg").getroot().tag == f"{svg}svg"
    index = (out / "index.html").read_text("utf-8")
    assert 'class="chart-diff"' in index and index.count('class="interval"') == len(wanted)
