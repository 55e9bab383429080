"""compare: paired live/frozen statistics from a database built from real run folders."""

from __future__ import annotations

import csv
import json
from datetime import timedelta
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import TrackingError
from ego2web_replay.models import AgentSpec
from ego2web_replay.testing.tracking import T0, EpisodeSpec, make_run, make_suite
from ego2web_replay.tracking.compare import compare, csv_text
from ego2web_replay.tracking.drift import ProbeResult, record_probe
from ego2web_replay.tracking.ingest import ingest

# task: (category, live success, frozen success)
OUTCOMES = {
    "t1": ("shopping", True, True), "t2": ("shopping", True, False), "t3": ("shopping", True, False),
    "t4": ("shopping", False, False), "t5": ("knowledge", True, True), "t6": ("knowledge", False, True),
    "t7": ("knowledge", True, False), "t8": ("knowledge", True, True),
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    suite = make_suite(tmp_path / "suite.json", {t: c for t, (c, _, _) in OUTCOMES.items()} | {"t9": "shopping"})
    runs = tmp_path / "runs"
    a = AgentSpec(name="openai", model="gpt-x")
    # an older run with other outcomes: must be ignored in favour of the newest
    make_run(runs, "old", a, [EpisodeSpec("t1", m, {"rule": False}) for m in ("live", "frozen")],
             suite=suite, started_at=T0 - timedelta(days=3))
    eps = []
    for t, (_, lv, fz) in OUTCOMES.items():
        eps.append(EpisodeSpec(t, "live", {"rule": lv, "ego2web": lv}))
        eps.append(EpisodeSpec(t, "frozen", {"rule": fz, "ego2web": True}, miss=3 if t == "t2" else 0))
    eps.append(EpisodeSpec("t9", "live", {"rule": True}))  # unpaired
    make_run(runs, "new", a, eps, suite=suite)
    make_run(runs, "b", AgentSpec(name="scripted"), [EpisodeSpec("t1", m, {"rule": True}) for m in ("live", "frozen")],
             suite=suite)
    path = tmp_path / "c.duckdb"
    ingest(path, [runs])
    at = T0 + timedelta(hours=2)  # the live runs started at T0
    rows = [
        ProbeResult(probe_id="p0", probed_at=T0 - timedelta(days=5), task_id="t2", url="https://t2.example/",
                    url_status="unchanged", task_status="unchanged"),
        ProbeResult(probe_id="p1", probed_at=at, task_id="t2", url="https://t2.example/", url_status="changed",
                    task_status="changed"),
        ProbeResult(probe_id="p1", probed_at=at, task_id="t3", url="https://t3.example/", url_status="gone"),
        ProbeResult(probe_id="p1", probed_at=at, task_id="t3", url="https://t3.example/a", url_status="unchanged"),
        ProbeResult(probe_id="p1", probed_at=at, task_id="t6", url="https://t6.example/", url_status="unchanged",
                    task_status="unchanged"),
        # a probe that could fetch nothing: the site refused every connection (it was down)
        ProbeResult(probe_id="p1", probed_at=at, task_id="t7", url="https://t7.example/", url_status="error",
                    error="unreachable: connection refused"),
        # a month later the site has drifted: it must not rewrite how the older run is attributed
        ProbeResult(probe_id="p9", probed_at=T0 + timedelta(days=30), task_id="t6", url="https://t6.example/",
                    url_status="gone", task_status="gone"),
        ProbeResult(probe_id="p9", probed_at=T0 + timedelta(days=30), task_id="t7", url="https://t7.example/",
                    url_status="changed", task_status="changed"),
    ]
    record_probe(path, rows)
    return path


def test_compare_against_hand_computed_values(db: Path) -> None:
    result = compare(db, iterations=500, seed=1)
    assert [(g.agent, g.judge) for g in result.groups] == [
        ("openai:gpt-x", "ego2web"), ("openai:gpt-x", "rule"), ("scripted", "rule")]
    g = result.groups[1]
    assert g.paired == 8 and g.live_unpaired == 1 and g.frozen_unpaired == 0
    assert (g.counts.both, g.counts.live_only, g.counts.frozen_only, g.counts.neither) == (3, 3, 1, 1)
    assert g.live_rate == 0.75 and g.frozen_rate == 0.5 and g.difference == 0.25
    assert g.mcnemar_p == pytest.approx(0.625)  # 2 * (C(4,0) + C(4,1)) / 16
    assert g.ci_low is not None and g.ci_high is not None and g.ci_low <= 0.25 <= g.ci_high
    cats = {c.category: (c.n, c.live_rate, c.frozen_rate) for c in g.categories}
    assert cats == {"shopping": (4, 0.75, 0.25), "knowledge": (4, 0.75, 0.75), "overall": (8, 0.75, 0.5)}
    # frozen scores with their misses: t2 missed 3 of 16 requests
    flagged = [e for e in g.frozen_episodes if e.flagged]
    assert [(e.task_id, e.misses, e.requests) for e in flagged] == [("t2", 3, 16)]
    assert flagged[0].miss_rate == pytest.approx(3 / 16) and len(flagged[0].missed_urls) == 3
    assert g.frozen_miss_rate == pytest.approx(3 / (16 + 7 * 13))
    assert g.frozen_mean_score == 0.5 and g.flagged_episodes == 1
    flips = {f.task_id: (f.direction, f.drift_status, f.attribution.source, f.attribution.probe_id)
             for f in g.flips if f.attribution}
    assert flips == {"t2": ("live only", "changed", "probe", "p1"), "t3": ("live only", "gone", "probe", "p1"),
                     "t6": ("frozen only", "unchanged", "probe", "p1"), "t7": ("live only", "unreachable", "probe", "p1")}
    t3 = next(f for f in g.flips if f.task_id == "t3")
    assert [(r.url, r.status) for r in t3.attribution.resources] == [("https://t3.example/", "gone")]
    # with a narrower window, none of those probes is near enough to the runs
    narrow = compare(db, judges=["rule"], agents=["openai:gpt-x"], iterations=50, probe_window=timedelta(hours=1))
    assert {(f.drift_status, f.attribution.source) for f in narrow.groups[0].flips} == {("unknown", "none")}
    # the newest run wins over the older one for t1
    assert all(e.run_id == "new" for e in g.frozen_episodes)
    # bootstrap interval is stable under the fixed seed
    again = compare(db, iterations=500, seed=1).groups[1]
    assert (again.ci_low, again.ci_high) == (g.ci_low, g.ci_high)


def test_filters_and_unknown_names(db: Path) -> None:
    result = compare(db, agents=["scripted"], judges=["rule"], iterations=50)
    assert [(g.agent, g.judge, g.counts.both) for g in result.groups] == [("scripted", "rule", 1)]
    with pytest.raises(TrackingError, match=r"unknown agent 'nobody'; known agents: openai:gpt-x, scripted"):
        compare(db, agents=["nobody"])
    with pytest.raises(TrackingError, match=r"unknown judge 'x'; known judges: ego2web, rule"):
        compare(db, judges=["x"])


def test_csv_rows(db: Path) -> None:
    rows = list(csv.DictReader(csv_text(compare(db, agents=["openai:gpt-x"], judges=["rule"], iterations=50))
                               .splitlines()))
    assert [r["category"] for r in rows] == ["knowledge", "shopping", "overall"]
    overall = rows[-1]
    assert (overall["both"], overall["live_only"], overall["frozen_only"], overall["neither"]) == ("3", "3", "1", "1")
    assert float(overall["mcnemar_p"]) == pytest.approx(0.625)
    assert rows[1]["difference"] == "0.5" and rows[1]["mcnemar_p"] == ""


def test_compare_cli(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_csv = tmp_path / "c.json", tmp_path / "c.csv"
    code = main(["compare", "--db", str(db), "--judge", "rule", "--json", str(out_json), "--csv", str(out_csv),
                 "--iterations", "100"])
    text = capsys.readouterr().out
    assert code == 0
    assert "live vs frozen" in text and "live/frozen flips" in text and "unknown" in text
    data = json.loads(out_json.read_text())
    t3 = next(f for f in data["groups"][0]["flips"] if f["task_id"] == "t3")
    assert t3["attribution"]["source"] == "probe"
    assert {k: t3["attribution"]["resources"][0][k] for k in ("url", "status")} == {
        "url": "https://t3.example/", "status": "gone"}
    assert "detail" in t3["attribution"]["resources"][0]
    assert data["groups"][0]["counts"] == {"both": 3, "live_only": 3, "frozen_only": 1, "neither": 1}
    assert out_csv.read_text().startswith("agent,judge,category")
    assert main(["compare", "--db", str(db), "--agent", "ghost"]) == 1
    err = capsys.readouterr().err
    assert "unknown agent 'ghost'" in err and err.count("\n") == 1
    assert main(["compare", "--db", str(tmp_path / "missing.duckdb")]) == 1
    err = capsys.readouterr().err
    assert "ingest" in err and err.count("\n") == 1


def test_judge_errors_are_neither_success_nor_failure(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping", "t3": "knowledge"})
    a = AgentSpec(name="openai", model="gpt-x")
    eps = [EpisodeSpec("t1", "live", {"ego2web": True}),
           EpisodeSpec("t1", "frozen", verdict_errors={"ego2web": "judge endpoint rejected the request"}),
           EpisodeSpec("t2", "live", {"ego2web": True}), EpisodeSpec("t2", "frozen", {"ego2web": False}),
           EpisodeSpec("t3", "live", {"ego2web": True}), EpisodeSpec("t3", "frozen", {"ego2web": True})]
    make_run(tmp_path / "runs", "r", a, eps, suite=suite)
    path = tmp_path / "e.duckdb"
    ingest(path, [tmp_path / "runs"])
    (g,) = compare(path).groups
    assert g.judge_errors == 1 and g.judge_error_tasks == ["t1"]
    assert g.paired == 2 and g.live_rate == 1.0 and g.frozen_rate == 0.5  # t1 counts nowhere
    assert [f.task_id for f in g.flips] == ["t2"]  # not t1: an unmade verdict is no "live only" flip
    assert g.counts.live_only == 1 and g.counts.both == 1
    row = next(r for r in csv.DictReader(csv_text(compare(path)).splitlines()) if r["category"] == "overall")
    assert row["judge_errors"] == "1"


def test_compare_json_and_csv_to_stdout(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["compare", "--db", str(db), "--judge", "rule", "--iterations", "50"]
    assert main([*base, "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert data["groups"][0]["counts"]["both"] == 3
    assert not (tmp_path / "-").exists()
    out_json = tmp_path / "c.json"
    assert main([*base, "--csv", "-", "--json", str(out_json)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("agent,judge,category") and captured.err.strip() == f"wrote {out_json}"
    assert json.loads(out_json.read_text())["groups"][0]["counts"]["both"] == 3
    assert main([*base, "--csv", "-", "--json", "-"]) == 2
    assert "both want stdout" in capsys.readouterr().err


def test_modality_is_a_compare_column(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping"})
    eps = [EpisodeSpec("t1", m, {"rule": True}) for m in ("live", "frozen")]
    make_run(tmp_path / "runs", "a", AgentSpec(name="openai", model="x", input_modality="captions"), eps, suite=suite)
    make_run(tmp_path / "runs", "b", AgentSpec(name="scripted"), eps, suite=suite)
    path = tmp_path / "m.duckdb"
    ingest(path, [tmp_path / "runs"])
    got = {g.agent: g.modality for g in compare(path).groups}
    assert got == {"openai:x": "captions", "scripted": "none"}
    rows = list(csv.DictReader(csv_text(compare(path)).splitlines()))
    assert {(r["agent"], r["modality"]) for r in rows} == {("openai:x", "captions"), ("scripted", "none")}


def test_episodes_that_could_not_run_are_judged_by_no_judge_and_counted_apart(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A frozen setup_error and infra_error: the real rule judge refuses them (saying why), and compare, the
    CSV, the text tables and the report count them as episode errors, in no rate, pair or flip, even where
    a verdict written before judges refused them says "failure"."""
    from ego2web_replay.judge.run import judge_run
    from ego2web_replay.judge.verdicts import read_verdict
    from ego2web_replay.tracking.report import build_report

    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"id": t, "instruction": f"Do {t}", "category": "shopping",
                                  "start_url": f"https://{t}.example/", "expected_answer": "42"}
                                 for t in ("t1", "t2", "t3", "t4")]), "utf-8")
    lost = "no snapshot of task 't1' under s3://b/p; record one"
    eps = [EpisodeSpec(t, "live", {"rule": True}) for t in ("t1", "t2", "t3", "t4")]
    eps += [EpisodeSpec("t1", "frozen", {"rule": False}, answer=None, screenshots=0, end_reason="setup_error",
                        error=lost),  # judged "failure" before: what judges used to write
            EpisodeSpec("t2", "frozen", {"rule": False}, answer="41"),
            EpisodeSpec("t3", "frozen", {"rule": False}, answer=None, screenshots=0, end_reason="infra_error",
                        error="the worker process died"),
            EpisodeSpec("t4", "frozen", {"rule": True})]
    run = make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), eps, suite=suite)

    def check(path: Path) -> None:
        (g,) = compare(path, judges=["rule"]).groups
        assert g.episode_errors == 2 and g.episode_error_reasons == {"infra_error": 1, "setup_error": 1}
        assert g.episode_error_tasks == ["t1", "t3"] and g.judge_errors == 0 and g.judge_error_tasks == []
        assert g.paired == 2 and g.live_rate == 1.0 and g.frozen_rate == 0.5  # t2 and t4 only
        assert [f.task_id for f in g.flips] == ["t2"]  # t1 and t3 are no "live only" flips
        assert g.frozen_validity is not None and g.frozen_validity.episode_errors == 2
        assert g.frozen_validity.episodes == 2 and g.frozen_validity.success_rate == 0.5
        row = next(r for r in csv.DictReader(csv_text(compare(path, judges=["rule"])).splitlines())
                   if r["category"] == "overall")
        assert row["episode_errors"] == "2" and row["judge_errors"] == "0"

    ingest(tmp_path / "stale.duckdb", [tmp_path / "runs"])
    check(tmp_path / "stale.duckdb")  # the old "failure" verdicts count nowhere either

    verdicts = judge_run(run, "rule", progress=False)
    assert sum(v.error is None for v in verdicts) == 6
    v1 = read_verdict(run / "episodes" / "t1" / "frozen", "rule")
    assert v1 is not None and v1.episode_error == "setup_error" and not v1.success
    assert v1.error == f"not judged: the episode could not run (setup_error: {lost}); it is not the agent's failure"
    v3 = read_verdict(run / "episodes" / "t3" / "frozen", "rule")
    assert v3 is not None and v3.episode_error == "infra_error" and "the worker process died" in (v3.error or "")
    # every judge inherits it: the rubric judge (these tasks have no rubric) errs on the episodes that ran,
    # and refuses the two that could not run for that reason, not for the missing rubric
    rubric = {(v.task_id, v.mode): v for v in judge_run(run, "rubric", progress=False)}
    assert {k for k, v in rubric.items() if v.episode_error} == {("t1", "frozen"), ("t3", "frozen")}
    assert all("has no rubric" in (v.error or "") for v in rubric.values() if not v.episode_error)
    path = tmp_path / "judged.duckdb"
    ingest(path, [tmp_path / "runs"])
    check(path)

    (r,) = compare(path, judges=["rubric"]).groups  # the others are the rubric judge's own errors
    assert (r.episode_errors, r.judge_errors, r.paired) == (2, 6, 0)
    assert main(["compare", "--db", str(path)]) == 0
    assert "2 (infra_error 1, setup_error 1)" in capsys.readouterr().out
    out = build_report(path, tmp_path / "report", iterations=50)
    index = out.index.read_text("utf-8")
    assert "<th>episode errors</th>" in index and "2 (infra_error 1, setup_error 1)" in index
    assert "rule: not judged" in index and index.count('class="flag"') >= 2
    page = (out.out_dir / "episodes" / "r" / "t1-frozen.html").read_text("utf-8")
    assert "episode error: could not run" in page and "not judged" in page and ">failure<" not in page


def test_judge_errors_show_as_errors_and_no_pairs_say_so(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """In the report a verdict the judge could not make reads "judge error", never ✗ or failure; a group
    with no paired task has no McNemar p (None in JSON, empty in CSV, "no paired task" in the tables),
    not p = 1."""
    from ego2web_replay.tracking.report import build_report, episode_page_path

    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    eps = [EpisodeSpec("t1", "live", {"ego2web": True}),
           EpisodeSpec("t1", "frozen", verdict_errors={"ego2web": "judge endpoint refused the request (HTTP 401)"}),
           EpisodeSpec("t2", "live", {"ego2web": True}), EpisodeSpec("t2", "frozen", {"ego2web": False})]
    make_run(tmp_path / "runs", "r", AgentSpec(name="openai", model="gpt-x"), eps, suite=suite)
    make_run(tmp_path / "runs", "l", AgentSpec(name="scripted"),  # live only: nothing to pair
             [EpisodeSpec(t, "live", {"ego2web": True}) for t in ("t1", "t2")], suite=suite)
    path = tmp_path / "j.duckdb"
    ingest(path, [tmp_path / "runs"])
    groups = {g.agent: g for g in compare(path).groups}
    paired, lone = groups["openai:gpt-x"], groups["scripted"]
    assert paired.paired == 1 and paired.mcnemar_p == 1.0 and paired.judge_errors == 1  # t2: a real test
    assert lone.paired == 0 and lone.live_unpaired == 2 and lone.mcnemar_p is None
    rows = {r["agent"]: r for r in csv.DictReader(csv_text(compare(path)).splitlines()) if r["category"] == "overall"}
    assert rows["scripted"]["mcnemar_p"] == "" and rows["openai:gpt-x"]["mcnemar_p"] == "1.0"
    assert main(["compare", "--db", str(path), "--json", "-"]) == 0
    doc = {g["agent"]: g for g in json.loads(capsys.readouterr().out)["groups"]}
    assert doc["scripted"]["mcnemar_p"] is None
    assert main(["compare", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip("│┃ ").startswith("scripted"))  # the summary table
    assert "no paired task" in line
    report = build_report(path, tmp_path / "report", iterations=50)
    index = report.index.read_text("utf-8")
    assert "no paired task" in index
    listed = [ln for ln in index.split("<tr") if "ego2web: " in ln]  # the episode list's rows
    (t1_frozen,) = [ln for ln in listed if "t1-frozen.html" in ln]
    assert "judge error" in t1_frozen and "✗" not in t1_frozen
    (t2_frozen,) = [ln for ln in listed if "t2-frozen.html" in ln]
    assert "ego2web: ✗" in t2_frozen  # a failure is still a failure
    page = (report.out_dir / episode_page_path("r", "t1", "frozen")).read_text("utf-8")
    assert "judge error" in page and "HTTP 401" in page and ">failure<" not in page
