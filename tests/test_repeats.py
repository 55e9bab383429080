"""Repeats: pass@k and the variance of repeated episodes, against hand-computed values.

The estimator and the summaries are checked on their own, then through
``compare`` on a real DuckDB file built from run folders with repeats (one
verdict a judge error). ``test_repeats_run.py`` runs a real agent K times.
"""

from __future__ import annotations

import json
from math import sqrt
from pathlib import Path

import duckdb
import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import AgentSpec, episode_dir, episode_folder_name, parse_episode_folder
from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_suite
from ego2web_replay.tracking.compare import compare, csv_text
from ego2web_replay.tracking.ingest import ingest
from ego2web_replay.tracking.repeats import mode_repeats
from ego2web_replay.tracking.schema import migrate
from ego2web_replay.tracking.stats import pass_at_k


def test_pass_at_k_is_the_unbiased_estimator():
    # 1 - C(n-c, k) / C(n, k), worked by hand
    assert pass_at_k(3, 2, 1) == pytest.approx(2 / 3)
    assert pass_at_k(3, 2, 2) == pytest.approx(1.0)        # C(1, 2) = 0
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)      # 1 - C(2,2)/C(3,2) = 1 - 1/3
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)        # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)        # 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_mode_repeats_by_hand():
    # task a: 2 of 3, task b: 0 of 3, task c: 1 of 2 (one repeat without a verdict)
    m = mode_repeats("live", {"a": [(0, True), (1, True), (2, False)], "b": [(0, False), (1, False), (2, False)],
                              "c": [(0, False), (2, True)]})
    assert (m.tasks, m.samples, m.min_samples, m.max_samples) == (3, 8, 2, 3)
    assert m.mean_rate == pytest.approx((2 / 3 + 0 + 1 / 2) / 3)
    # pass@1 = mean rate; pass@2: a 1, b 0, c 1 - C(1,2)/C(2,2) = 1
    assert m.pass_at_k == pytest.approx({1: (2 / 3 + 0.5) / 3, 2: 2 / 3})
    assert [t.variance for t in m.per_task] == pytest.approx([2 / 9, 0.0, 0.25])
    assert m.mean_task_variance == pytest.approx((2 / 9 + 0.25) / 3)
    # suite rate per repeat index: r0 1/3, r1 1/2 (c has no r1), r2 1/3
    assert m.repeat_rates == pytest.approx([1 / 3, 1 / 2, 1 / 3])
    mean = (1 / 3 + 1 / 2 + 1 / 3) / 3
    assert m.repeat_std == pytest.approx(sqrt(((1 / 3 - mean) ** 2 * 2 + (1 / 2 - mean) ** 2) / 2))


def test_one_repeat_has_no_spread():
    m = mode_repeats("frozen", {"a": [(0, True)], "b": [(0, False)]})
    assert m.pass_at_k == {1: 0.5} and m.repeat_std is None and m.mean_task_variance == 0.0


def test_episode_folders_name_their_repeat(tmp_path):
    assert episode_folder_name("frozen", 0) == "frozen" and episode_folder_name("live", 3) == "live-r3"
    assert episode_dir(tmp_path, "t", "live", 2) == tmp_path / "episodes" / "t" / "live-r2"
    assert parse_episode_folder("frozen") == ("frozen", 0) and parse_episode_folder("live-r12") == ("live", 12)
    for bad in ("frozen.partial", "live-r2.partial", "live-r0", "live-r", "other", "live-rx"):
        assert parse_episode_folder(bad) is None


# (task, mode) -> outcomes of repeats 0, 1, 2 (None: the judge could not decide)
OUTCOMES = {
    ("t1", "live"): [True, True, False], ("t1", "frozen"): [True, False, False],
    ("t2", "live"): [False, False, False], ("t2", "frozen"): [True, True, True],
    ("t3", "live"): [True, None, True], ("t3", "frozen"): [True, True, True],
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "knowledge", "t3": "knowledge"})
    eps = []
    for (task, mode), outcomes in OUTCOMES.items():
        for r, ok in enumerate(outcomes):
            eps.append(EpisodeSpec(task, mode, {} if ok is None else {"rule": ok},
                                   verdict_errors={"rule": "no reply"} if ok is None else {}, repeat=r))
    make_run(tmp_path / "runs", "rep", AgentSpec(name="openai", model="m"), eps, suite=suite)
    path = tmp_path / "r.duckdb"
    ingest(path, [tmp_path / "runs"])
    return path


def test_compare_uses_per_task_rates_and_reports_pass_at_k(db):
    (g,) = compare(db).groups
    # t3's errored live repeat is not a sample: t3 stays, with 2 live samples
    assert g.judge_errors == 1 and g.judge_error_tasks == [] and g.max_repeats == 3
    assert g.paired == 3  # tasks, not task × repeat
    live = {"t1": 2 / 3, "t2": 0.0, "t3": 1.0}
    frozen = {"t1": 1 / 3, "t2": 1.0, "t3": 1.0}
    assert g.live_rate == pytest.approx(sum(live.values()) / 3)
    assert g.frozen_rate == pytest.approx(sum(frozen.values()) / 3)
    # paired per task: t1 live higher, t2 frozen higher, t3 equal (both)
    assert g.counts.model_dump() == {"both": 1, "live_only": 1, "frozen_only": 1, "neither": 0}
    assert g.mcnemar_p == 1.0
    flips = {f.task_id: (f.direction, f.live_rate, f.frozen_rate) for f in g.flips}
    assert flips == {"t1": ("live only", pytest.approx(2 / 3), pytest.approx(1 / 3)),
                     "t2": ("frozen only", 0.0, 1.0)}
    overall = g.categories[-1]
    assert (overall.live_successes, overall.live_samples, overall.frozen_successes, overall.frozen_samples) == \
        (4, 8, 7, 9)
    by_mode = {m.mode: m for m in g.repeats}
    lv, fz = by_mode["live"], by_mode["frozen"]
    # live: t1 2/3, t2 0/3, t3 2/2
    assert lv.pass_at_k == pytest.approx({1: (2 / 3 + 0 + 1) / 3, 2: (1 + 0 + 1) / 3})
    assert fz.pass_at_k == pytest.approx({1: (1 / 3 + 1 + 1) / 3, 2: (2 / 3 + 1 + 1) / 3, 3: 1.0})
    assert lv.mean_task_variance == pytest.approx((2 / 9) / 3)
    assert lv.repeat_rates == pytest.approx([2 / 3, 1 / 2, 1 / 3])
    assert fz.repeat_rates == pytest.approx([1.0, 2 / 3, 2 / 3])
    assert fz.repeat_std == pytest.approx(sqrt(((1 - 7 / 9) ** 2 + 2 * (2 / 3 - 7 / 9) ** 2) / 2))
    assert len(g.frozen_episodes) == 9 and {e.repeat for e in g.frozen_episodes} == {0, 1, 2}
    row = next(r for r in csv_text(compare(db)).splitlines()[1:] if ",overall," in r)
    assert row.endswith(",8,9,3,0,0,0,frozen: m1; live: m1")  # live, frozen samples, max repeats, episode errors,
    # shared episodes, the judge models of each mode


def test_a_task_without_any_judged_repeat_in_a_mode_is_left_out(tmp_path):
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    eps = [EpisodeSpec("t1", m, {"rule": True}, repeat=r) for m in ("live", "frozen") for r in (0, 1)]
    eps += [EpisodeSpec("t2", "live", verdict_errors={"rule": "x"}, repeat=r) for r in (0, 1)]
    eps += [EpisodeSpec("t2", "frozen", {"rule": False}, repeat=r) for r in (0, 1)]
    make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), eps, suite=suite)
    ingest(tmp_path / "d.duckdb", [tmp_path / "runs"])
    (g,) = compare(tmp_path / "d.duckdb").groups
    assert g.judge_errors == 2 and g.judge_error_tasks == ["t2"] and g.paired == 1 and not g.flips


def test_compare_json_and_table_show_repeats(db, capsys):
    assert main(["compare", "--db", str(db), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    reps = {m["mode"]: m for m in data["groups"][0]["repeats"]}
    assert reps["frozen"]["pass_at_k"]["3"] == 1.0 and reps["live"]["per_task"][0]["task_id"] == "t1"
    assert main(["compare", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "repeats (per-task rates, pass@k, variance)" in out and "pass@3" in out


def test_report_shows_repeats_and_one_page_per_repeat(db, tmp_path):
    from ego2web_replay.tracking.report import build_report

    summary = build_report(db, tmp_path / "report", iterations=50)
    assert summary.episode_pages == 18
    index = (tmp_path / "report" / "index.html").read_text("utf-8")
    assert "pass@3" in index and "2/3 (66.7%)" in index
    assert (tmp_path / "report" / "episodes" / "rep" / "t1-live-r2.html").is_file()


def test_migration_7_gives_older_rows_repeat_0(tmp_path):
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    migrate(con, target=6)
    con.execute("INSERT INTO episodes (run_id, task_id, mode, ingested_at) VALUES ('r', 't', 'live', now())")
    assert migrate(con, target=7) == [7]
    assert con.execute("SELECT repeat_index FROM episodes").fetchall() == [(0,)]
    con.close()


def test_a_flip_is_explained_by_the_repeat_it_is_about(tmp_path):
    """Live failed in repeat 1 only (frozen always passed): the flip is that repeat's, and a pair diff
    of another repeat's archive never explains it."""
    from datetime import UTC, datetime

    from ego2web_replay.tracking.attribution import attach_attributions
    from ego2web_replay.tracking.pairdiff import PairDiff, ResourceDiff
    from ego2web_replay.tracking.pairdiff_store import record_pair_diffs

    suite = make_suite(tmp_path / "suite.json", {"t": "shopping"})
    eps = [EpisodeSpec("t", "live", {"rule": ok}, repeat=r, snapshot_id=f"L{r}")
           for r, ok in enumerate([True, False, False])]
    eps += [EpisodeSpec("t", "frozen", {"rule": True}, repeat=r) for r in range(3)]
    make_run(tmp_path / "runs", "rep", AgentSpec(name="openai", model="m"), eps, suite=suite)
    db = tmp_path / "r.duckdb"
    ingest(db, [tmp_path / "runs"])

    def diff_of(live_id: str, status: str) -> PairDiff:
        at = datetime(2026, 11, 30, tzinfo=UTC)
        return PairDiff(task_id="t", run_id="rep", live_snapshot=f"/x/{live_id}", live_snapshot_id=live_id,
                        frozen_snapshot="/x/s1", frozen_snapshot_id="s1", live_at=at, diffed_at=at, status=status,
                        resources=[ResourceDiff(url="https://t.example/p0", kind="document", status=status)])

    def flip():
        (g,) = compare(db).groups
        (f,) = g.flips
        attach_attributions(db, [g])
        return f

    f = flip()
    assert (f.direction, f.live_repeat, f.frozen_repeat) == ("frozen only", 1, 0)
    record_pair_diffs(db, [diff_of("L0", "gone")])  # repeat 0 passed: its archive is not the failure's
    f = flip()
    assert f.attribution.source == "none" and f.drift_status == "unknown"
    record_pair_diffs(db, [diff_of("L1", "changed")])
    f = flip()
    assert f.attribution.source == "live-archive" and f.drift_status == "changed"


def test_a_repeat_that_could_not_run_is_no_sample_and_is_counted_on_its_own(tmp_path, capsys):
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    eps = [EpisodeSpec(t, "live", {"rule": True}, repeat=r) for t in ("t1", "t2") for r in (0, 1, 2)]
    eps += [EpisodeSpec("t1", "frozen", {"rule": True}, repeat=0),
            EpisodeSpec("t1", "frozen", {"rule": False}, repeat=1, answer=None, screenshots=0,
                        end_reason="infra_error", error="node lost"),  # a stale "failure" verdict
            EpisodeSpec("t1", "frozen", {"rule": False}, repeat=2)]
    eps += [EpisodeSpec("t2", "frozen", {"rule": True}, repeat=r) for r in (0, 1, 2)]
    make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), eps, suite=suite)
    db = tmp_path / "d.duckdb"
    ingest(db, [tmp_path / "runs"])
    (g,) = compare(db).groups
    frozen = next(m for m in g.repeats if m.mode == "frozen")
    assert (frozen.episode_errors, frozen.judge_errors, frozen.samples, frozen.min_samples) == (1, 0, 5, 2)
    t1 = next(t for t in frozen.per_task if t.task_id == "t1")
    assert (t1.n, t1.successes) == (2, 1)  # repeats 0 and 2 only
    assert frozen.pass_at_k == {1: pytest.approx(0.75), 2: pytest.approx(1.0)}  # (1/2 + 1) / 2; both pass at 2
    assert g.episode_errors == 1 and g.paired == 2 and g.frozen_rate == pytest.approx(0.75)
    assert main(["compare", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "episode errors" in text and "1 (infra_error 1)" in text
