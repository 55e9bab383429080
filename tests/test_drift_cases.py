"""The labelled drift cases: they load, cover every kind the issue names, and are scored honestly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ego2web_replay.errors import Ego2WebError
from ego2web_replay.testing.drift_cases import evaluate, load_drift_cases

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "benchmarks" / "drift_cases.yaml"


def test_labelled_set_covers_the_kinds_of_drift():
    cases = load_drift_cases(CASES)
    kinds = " | ".join(c.kind for c in cases)
    for kind in ("price change in JSON", "delisted item", "soft 404", "redesign with the same facts",
                 "redesign that moves the answer", "CAPTCHA wall", "access denied", "only mentions CAPTCHA",
                 "rotating ad", "timestamp", "sign-in wall"):
        assert kind in kinds, kind
    assert len({c.id for c in cases}) == len(cases)
    assert {c.label for c in cases} == {"unchanged", "changed", "gone", "blocked"}


def test_soft_404_captcha_mention_and_volatile_cases_are_classified_as_labelled():
    ev = evaluate([c for c in load_drift_cases(CASES)
                   if c.id in ("soft-404", "soft-404-echo", "captcha-mention-added", "captcha-article-edited",
                               "captcha-article-unchanged", "robot-headline", "rotating-ad", "clock-timestamp",
                               "query-timing", "csrf-token", "json-volatile")])
    assert ev.cases == 11 and ev.mistakes == []


def test_sign_in_walls_and_not_found_pages_of_unknown_sites_are_classified_as_labelled():
    ev = evaluate([c for c in load_drift_cases(CASES)
                   if c.id in ("login-redirect", "accounts-login-redirect", "login-form-in-place", "sign-in-link-added",
                               "locale-redirect", "soft-404-heading", "soft-404-no-reference", "not-found-in-headline")])
    assert ev.cases == 8 and ev.mistakes == []


def test_evaluation_arithmetic(tmp_path):
    cases = load_drift_cases(CASES)
    pick = {c.id: c for c in cases}
    # two cases labelled 'gone', one of them relabelled 'changed' to force one known mistake
    wrong = pick["soft-404"]
    wrong.label = "changed"
    ev = evaluate([pick["delisted-404"], wrong, pick["json-price"]])
    assert ev.correct == 2 and [m[0] for m in ev.mistakes] == ["soft-404"]
    assert ev.per_label["gone"] == (0.5, 1.0, 1)  # two classified gone, one of them labelled gone
    assert ev.per_label["changed"] == (1.0, 0.5, 2)
    assert ev.per_label["blocked"] == (None, None, 0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {id: x, kind: y, label: moved, url: 'https://a/', old: {body: a}, new: {body: b}}\n")
    with pytest.raises(Ego2WebError, match="case x: label 'moved'"):
        load_drift_cases(bad)


def test_benchmark_script_prints_precision_and_recall():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_drift.py"), "--no-write", "--no-pipeline"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "precision" in r.stdout and "recall" in r.stdout and "cases classified as labelled" in r.stdout
