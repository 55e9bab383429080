"""Drift attribution end to end, on real third-party apps (Datasette, MkDocs, Flask-Login) on 127.0.0.1:
recorded with Chromium through the recording proxy, drifted, run live and frozen, judged by the rule
judge, tracked in a real DuckDB file and compared. Each flip is attributed from the live episode's own
archive as a person labels it (the cases of ``benchmarks/bench_drift.py``)."""

from __future__ import annotations

import pytest

from ego2web_replay.testing.drift_pipeline import PIPELINE_CASES, run_pipeline_cases
from ego2web_replay.testing.thirdparty import available

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(map(available, ("datasette", "mkdocs", "flask_login"))),
                                 reason="needs the dev extra (datasette, mkdocs, flask-login)")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, data_home):
    return {o.case.id: o for o in run_pipeline_cases(tmp_path_factory.mktemp("drift-pipeline"))}


def test_every_case_is_attributed_from_the_live_archive_as_labelled(outcomes):
    assert set(outcomes) == {c.id for c in PIPELINE_CASES}
    for o in outcomes.values():
        assert (o.status, o.source) == (o.case.label, "live-archive"), (o.case.id, o.status, o.detail)


def test_unreachable_site_is_unreachable_not_unknown(outcomes):
    a = outcomes["mkdocs-unreachable"].attribution
    (cause,) = a.resources
    assert cause.url.endswith("/matching/") and cause.status == "unreachable" and cause.final_page
    assert cause.status_then == 200 and cause.status_now is None and "could not be reached" in cause.detail
    # the drift probe, made after the site went down, says the same
    assert outcomes["mkdocs-unreachable"].probe_status == "unreachable"


def test_sign_in_wall_is_blocked_not_changed(outcomes):
    cause = outcomes["flask-login-wall"].attribution.resources[0]
    assert cause.url.endswith("/item/7") and cause.status == "blocked" and cause.final_page
    assert (cause.status_then, cause.status_now) == (200, 302) and "sign-in wall" in cause.detail
    assert "/login?next=" in cause.detail
    # the probe, which does not follow redirects, says the same
    assert outcomes["flask-login-wall"].probe_status == "blocked"


def test_soft_404_is_gone_from_the_live_archive_as_the_probe_says(outcomes):
    o = outcomes["mkdocs-soft-404"]
    cause = o.attribution.resources[0]
    assert cause.url.endswith("/coverage/") and cause.status == "gone" and cause.final_page
    assert (cause.status_then, cause.status_now) == (200, 200) and "soft 404" in cause.detail
    assert o.probe_status == "gone"


def test_change_seen_only_in_json_is_changed_at_the_task_level_of_the_probe(outcomes):
    o = outcomes["datasette-json-price"]
    cause = o.attribution.resources[0]
    assert cause.url.endswith("/shop/products/6.json?_shape=array") and cause.kind == "xhr"
    assert [(f.path, f.old, f.new) for f in cause.fields] == [("[0].price", 39.0, 44.0)]
    page = [s for u, s in o.probe_urls.items() if u.endswith("/assets/price.html")]
    json_ = [s for u, s in o.probe_urls.items() if ".json" in u]
    assert page == ["unchanged"] and json_ == ["changed"]
    assert o.probe_status == "changed"


def test_agent_caused_flip_on_an_unchanged_site_is_unchanged(outcomes):
    o = outcomes["datasette-agent-mistake"]
    # Datasette's pages differ in their query timings from fetch to fetch: volatile, not a change
    assert o.attribution.resources == [] and o.probe_status == "unchanged"
