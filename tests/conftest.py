"""Shared fixtures: one data folder, one project CA, one test site and one Chromium per session.

Every proxy a test starts runs the upstream guard in ``loopback`` mode, so no
request from the test suite can leave the machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="ego2web-test-home-"))
os.environ["EGO2WEB_REPLAY_HOME"] = str(_HOME)
os.environ["EGO2WEB_REPLAY_DB"] = str(_HOME / "default.duckdb")  # what CLI commands write by default
os.environ.pop("OPENAI_BASE_URL", None)
os.environ.pop("OPENAI_API_KEY", None)


@pytest.fixture(scope="session")
def data_home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def ca(data_home):
    from ego2web_replay.proxy import project_ca

    return project_ca()


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    from ego2web_replay.testing.site import TestSite

    s = TestSite(tmp_path_factory.mktemp("site")).start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def playwright():
    """The session's one Playwright driver (a second sync Playwright in one thread would clash)."""
    from ego2web_replay.browser import acquire_playwright, release_playwright

    pw = acquire_playwright()
    yield pw
    release_playwright()


@pytest.fixture(scope="session")
def chromium(ca, playwright):
    """One Chromium for the session; each test gives its context its own proxy."""
    from ego2web_replay.browser import BrowserSession

    b = BrowserSession(spki=ca.spki, per_context_proxy=True, playwright=playwright).start()
    yield b
    b.close()


@pytest.fixture()
def loopback_options(site):
    """mitmproxy options every test proxy uses: loopback-only guard, trust the site's test CA."""
    return {"guard_mode": "loopback", "ssl_verify_upstream_trusted_ca": str(site.tls.ca_cert)}


def pytest_sessionfinish(session, exitstatus):
    """Remove the session's data folder after a green run (kept after a failure, or with
    EGO2WEB_KEEP_TEST_HOME=1, for a look at what the tests wrote)."""
    if exitstatus == 0 and not os.environ.get("EGO2WEB_KEEP_TEST_HOME"):
        shutil.rmtree(_HOME, ignore_errors=True)
    elif _HOME.exists():
        print(f"\nthe test data folder is kept: {_HOME}")


def pytest_collection_modifyitems(config, items):
    """Tests that start Chromium or the proxy against the site are 'slow' (deselect with -m 'not slow')."""
    for item in items:
        if {"chromium", "site", "recorded"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def s3_server():
    """One real S3-compatible server (moto's) on 127.0.0.1 for the session, started and stopped here."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from ego2web_replay.testing.s3server import S3Server

    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture()
def s3(s3_server, monkeypatch, request):
    """A fresh bucket on the session's S3 server, with the AWS variables pointing at it; yields its URL."""
    import re

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") + f"-{id(request) % 10000}"
    return s3_server.create_bucket(bucket)


@pytest.fixture(scope="session")
def frozen_mug(tmp_path_factory, ca):
    """The demo's mug task recorded from the demo site on 127.0.0.1, which is then stopped:
    ``suite``, ``root``, ``snapshots`` (the folder) and ``site_url`` (where it was)."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import load_tasks

    root = tmp_path_factory.mktemp("frozen-mug")
    with DemoSite() as site:
        suite = load_tasks(write_demo_suite(root / "suite", site.url, ["shop-mug-price"]))
        r = record_task(suite.get("shop-mug-price"), root / "snapshots", RecordOptions(guard="loopback"), ca=ca)
        assert r.ok, r.error
    return {"root": root, "suite": suite, "snapshots": root / "snapshots", "site_url": site.url}
