"""Recording a task against the local test site (HTTP and HTTPS) captures every exchange exactly."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from ego2web_replay.actions import Action
from ego2web_replay.recorder.addon import REDACTED, redact_headers
from ego2web_replay.recorder.session import RecordOptions, record_task
from ego2web_replay.redaction import MARK
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import Snapshot
from ego2web_replay.snapshots.verify import verify_snapshot
from ego2web_replay.tasks import Task
from ego2web_replay.testing.site import BIG_SIZE

pytestmark = pytest.mark.slow


def _task(base: str, task_id: str) -> Task:
    return Task(id=task_id, instruction="Find snack 42's calories", start_url=base + "/",
                reference_actions=[
                    Action(kind="goto", url=base + "/"),
                    Action(kind="wait", selector="body[data-ready='1']"),
                    Action(kind="click", selector="#product-link"),
                    Action(kind="answer", answer="150 kcal"),
                ])


def _wire_by_path(site):
    assert site.settle(), "the site still serves a connection after the recording ended"
    return Counter((e.method, e.path.split("?")[0], e.status, e.sha256) for e in site.wire)


@pytest.fixture(scope="module", params=["https", "http", "https-mitmproxy"])
def recorded(request, site, ca, tmp_path_factory):
    """One recording per scheme with the fast engine (the default), and one through mitmproxy."""
    scheme, _, engine = request.param.partition("-")
    base = site.https_url if scheme == "https" else site.http_url
    root = tmp_path_factory.mktemp(f"snap-{request.param}")
    site.clear_log()
    opts = RecordOptions(guard="loopback", upstream_ca=site.tls.ca_cert, compression="zst", engine=engine or "fast")
    result = record_task(_task(base, f"T-{request.param}"), root, opts, ca=ca)
    return result, _wire_by_path(site), base


def test_every_exchange_captured_with_wire_bytes(recorded):
    result, wire, base = recorded
    assert result.ok, result.error
    snap = Snapshot.open(result.snapshot)
    import hashlib

    archived = Counter()
    for entry in snap.entries():  # responses, and revisits of payloads recorded earlier in the session
        rec = snap.resolve(entry)
        path = rec.url[len(base):].split("?")[0] or "/"
        archived[(rec.http_header("X-Orig-Method") or "GET", path, rec.http_status,
                  hashlib.sha256(rec.payload).hexdigest())] += 1
    # compare by path/status/body (the request method is checked through the request records below)
    strip = lambda c: Counter({(k[1], k[2], k[3]): v for k, v in c.items()})  # noqa: E731
    assert strip(archived) == strip(wire)
    assert result.manifest.exchanges == sum(wire.values())
    paths = {k[1] for k in wire}
    for p in ("/", "/static/style.css", "/static/app.js", "/static/logo.png", "/static/font.ttf", "/api/price",
              "/api/cart", "/static/data.json", "/chunked", "/big.bin", "/old-product", "/product/42", "/missing",
              "/api/broken"):
        assert p in paths, p


def test_records_linked_and_bodies_as_on_the_wire(recorded):
    result, _, base = recorded
    snap = Snapshot.open(result.snapshot)
    records = list(iter_records(snap.archive_path))
    assert records[0].rec_type == "warcinfo"
    by_id = {r.record_id: r for r in records}
    responses = [r for r in records if r.rec_type == "response"]
    revisits = [r for r in records if r.rec_type == "revisit"]
    requests = [r for r in records if r.rec_type == "request"]
    assert len(requests) == len(responses) + len(revisits)
    # the font is loaded twice: stored once, then a revisit of the first capture (identical payload digest)
    font = sorted((r for r in responses + revisits if r.url.endswith("/static/font.ttf")), key=lambda r: r.offset)
    assert [r.rec_type for r in font] == ["response", "revisit"]
    assert font[1].refers_to_target_uri == font[0].url and font[1].payload_digest == font[0].payload_digest
    assert font[1].refers_to == font[0].record_id and font[1].refers_to_date == font[0].date
    assert font[1].headers.get("WARC-Profile", "").endswith("/revisit/identical-payload-digest")
    assert font[1].http_status == 200 and font[1].payload == b""
    for req in requests:
        assert req.concurrent_to and req.concurrent_to[0] in by_id
        assert by_id[req.concurrent_to[0]].url == req.url
    for r in responses:
        assert r.payload_digest and r.block_digest and r.ip == "127.0.0.1"
        assert r.date and r.date.endswith("Z") and "+00:00" not in r.date
        if r.url.endswith(("/chunked", "/chunked-page")):  # sent chunked: kept chunked, no length added
            assert r.chunked and r.http_header("Transfer-Encoding") == "chunked"
            assert r.http_header("Content-Length") is None
        else:
            assert r.http_header("Transfer-Encoding") is None
            assert int(r.http_header("Content-Length")) == len(r.payload)
    gz = next(r for r in responses if r.url.endswith("/static/data.json"))
    assert gz.http_header("Content-Encoding") == "gzip" and gz.payload[:2] == b"\x1f\x8b"
    chunked = next(r for r in responses if r.url.endswith("/chunked"))
    assert chunked.payload == b"chunk-" * 700
    big = next(r for r in responses if r.url.endswith("/big.bin"))
    assert len(big.payload) == BIG_SIZE
    redirect = next(r for r in responses if r.url.endswith("/old-product"))
    assert redirect.http_status == 302 and redirect.http_header("Location") == "/product/42"
    product = next(r for r in responses if r.url.endswith("/product/42"))
    assert product.http_header("Set-Cookie").startswith(f"session={MARK};")  # the name kept, the value gone
    post = next(r for r in requests if r.url.endswith("/api/cart"))
    assert post.http_method == "POST" and b'"ts":' in post.payload
    # the browser sent the session cookie back; the archive keeps only a redacted value
    later = [r for r in requests if r.http_header("Cookie")]
    assert later and all(r.http_header("Cookie") == f"session={MARK}" for r in later)


def test_snapshot_verifies_and_index_resolves(recorded):
    result, _, _ = recorded
    report = verify_snapshot(result.snapshot)
    assert report.ok, report.problems
    snap = Snapshot.open(result.snapshot)
    for e in snap.entries():
        rec = snap.record(e)
        assert rec.url == e.url
    assert result.manifest.pages[-1].endswith("/product/42")
    assert len(result.manifest.screenshots) >= 3
    assert "chromium" in result.manifest.tools and "mitmproxy" in result.manifest.tools
    assert result.blocked.get("not-allowed", 0) == 0


def test_redact_headers():
    h = [("Authorization", "Bearer x"), ("cookie", "a=b"), ("Accept", "*/*"), ("Proxy-Authorization", "Basic y")]
    assert redact_headers(h) == [("Authorization", REDACTED), ("cookie", f"a={MARK}"), ("Accept", "*/*"),
                                 ("Proxy-Authorization", REDACTED)]


def test_gz_format_passes_warcio_check(site, ca, tmp_path):
    opts = RecordOptions(guard="loopback", upstream_ca=site.tls.ca_cert, compression="gz")
    task = Task(id="Tgz", instruction="x", start_url=site.http_url + "/product/42")
    result = record_task(task, tmp_path, opts, ca=ca)
    assert result.ok, result.error
    archive = result.snapshot / "archive.warc.gz"
    out = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v", str(archive)], capture_output=True,
                         text=True)
    if "No module named" in out.stderr:
        out = subprocess.run([str(__import__("pathlib").Path(sys.executable).with_name("warcio")), "check", "-v",
                              str(archive)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "digest pass" in out.stdout


def test_failed_write_stops_recording(site, ca, tmp_path):
    """A writer that fails makes the recording fail loudly; nothing passes unrecorded."""
    import urllib.error
    import urllib.request

    from ego2web_replay.guard import UpstreamGuard
    from ego2web_replay.proxy import ProxyServer
    from ego2web_replay.recorder.addon import Recorder

    class Broken:
        def write_exchange(self, **kw):
            raise OSError(28, "No space left on device")

    rec = Recorder(Broken())
    with ProxyServer([UpstreamGuard(), rec], ca=ca, options={"guard_mode": "loopback"}) as proxy:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))
        with pytest.raises(OSError):
            opener.open(site.http_url + "/product/42", timeout=10).read()
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(site.http_url + "/", timeout=10)
        assert e.value.code == 502
    assert rec.failed and "No space left" in rec.failed and rec.exchanges == 0


def test_untrusted_certificate_is_a_clear_error(site, ca, tmp_path):
    """Without --upstream-ca the test site's certificate is not trusted: the error names the certificate
    problem and the option, at once, instead of a click timing out on the proxy's error page."""
    task = Task(id="untrusted", instruction="x", start_url=site.https_url + "/",
                reference_actions=[Action(kind="goto", url=site.https_url + "/"),
                                   Action(kind="click", selector="#product-link")])
    started = time.monotonic()
    result = record_task(task, tmp_path / "snaps", RecordOptions(guard="loopback", action_timeout_s=120), ca=ca)
    assert not result.ok and result.error is not None
    assert "certificate" in result.error and "--upstream-ca" in result.error and "127.0.0.1" in result.error
    assert "step 1" not in result.error  # it stopped at the goto, before the click could time out
    assert time.monotonic() - started < 60  # a goto or click that timed out would take 120 s
