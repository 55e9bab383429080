"""``ego2web-replay serve``: connection help and stats, and one-line errors for bad inputs."""

from __future__ import annotations

import shutil
import socket
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import ReplayStats
from ego2web_replay.snapshots import import_warc
from ego2web_replay.snapshots.snapshot import SnapshotWriter

CORPUS = Path("/work/shared/corpus/warc")


@pytest.fixture()
def snap(tmp_path) -> Path:
    sw = SnapshotWriter(tmp_path / "snapshots", "t1")
    sw.writer.write_exchange(url="https://shop.example/", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                             response_body=b"hello", date=datetime(2026, 1, 2, 3, 4, 5))
    sw.finalize()
    return sw.path


def _one_line_error(capsys, code: int, *needles: str) -> str:
    out, err = capsys.readouterr()
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_serve_prints_how_to_connect_and_the_stats(snap, tmp_path, capsys, ca):
    stats = tmp_path / "stats.json"
    code = main(["serve", str(snap), "--port", "0", "--duration", "0.2", "--stats", str(stats)])
    out, err = capsys.readouterr()
    assert code == 0, err
    port = int(out.split("replay proxy   http://127.0.0.1:")[1].split()[0])
    assert port > 0 and f"CA file        {ca.cert_path}" in out
    assert f"CA SPKI pin    {ca.spki}" in out and "captures       1 from 1 snapshot(s)" in out
    assert "misses         answered with HTTP 404" in out
    assert "replay stats: 0 requests: exact 0, canonical 0, fuzzy 0, miss 0" in out
    loaded = ReplayStats.model_validate_json(stats.read_text())
    assert loaded.total == 0 and loaded.snapshots == [str(snap)]
    # the browser-use hint is code the installed browser-use takes, with the loopback bypass removed
    # (without it a site on 127.0.0.1 would be read live, past the replay: issue 11)
    hint = next(line for line in out.splitlines() if line.lstrip().startswith("browser-use"))
    pytest.importorskip("browser_use")
    from browser_use import BrowserProfile
    from browser_use.browser.profile import ProxySettings

    profile = eval(hint.split("browser-use", 1)[1].strip(), {"BrowserProfile": BrowserProfile,  # noqa: S307
                                                             "ProxySettings": ProxySettings})
    for made in (profile.user_data_dir, profile.downloads_path):  # what browser-use made for it in the temp folder
        if made:
            shutil.rmtree(made, ignore_errors=True)
    assert profile.proxy.server == f"http://127.0.0.1:{port}" and profile.proxy.bypass == "<-loopback>"
    assert f"--ignore-certificate-errors-spki-list={ca.spki}" in profile.args


def test_serve_says_what_was_answered_past_a_changing_recorded_series(tmp_path, capsys, ca):
    sw = SnapshotWriter(tmp_path / "snapshots", "poll")
    for i in range(2):
        sw.writer.write_exchange(url="http://shop.example/api/stock", method="GET", request_headers=[],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "text/plain")], response_body=b"%d left" % (9 - i),
                                 date=datetime(2026, 1, 2, 3, 4, 5 + i))
    sw.finalize()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got: list[bytes] = []

    def client() -> None:  # (serve runs on the main thread: it sets a signal handler)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
        got.extend(opener.open("http://shop.example/api/stock", timeout=10).read() for _ in range(3))

    asking = threading.Thread(target=client)
    asking.start()
    code = main(["serve", str(sw.path), "--port", str(port), "--duration", "4"])
    asking.join(30)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert got == [b"9 left", b"8 left", b"8 left"]
    assert "replay stats: 3 requests: exact 3," in out
    assert "answered, but not as recorded for this request: past a changing recorded series 1" in out


def test_unknown_snapshot_path(tmp_path, capsys):
    code = main(["serve", str(tmp_path / "nope"), "--port", "0", "--duration", "0"])
    _one_line_error(capsys, code, str(tmp_path / "nope"), "not found")


def test_folder_that_is_not_a_snapshot(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    code = main(["serve", str(tmp_path / "plain"), "--port", "0", "--duration", "0"])
    _one_line_error(capsys, code, "manifest.json is missing")


def test_corrupt_index(snap, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(snap, bad)
    (bad / "index.cdxj").write_text("this is not a cdxj line\n")
    code = main(["serve", str(bad), "--port", "0", "--duration", "0"])
    line = _one_line_error(capsys, code)
    assert "index" in line.lower()


def test_empty_snapshot(tmp_path, capsys):
    # a corpus file of request records only: imports fine, holds nothing to serve
    empty = import_warc(CORPUS / "warcio/example-digest.warc", "digest", tmp_path)
    code = main(["serve", str(empty.path), "--port", "0", "--duration", "0"])
    _one_line_error(capsys, code, "nothing to replay", str(empty.path))


def test_port_in_use(snap, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = main(["serve", str(snap), "--port", str(port), "--duration", "0"])
    _one_line_error(capsys, code, f"port {port}", "in use")


def test_bad_miss_policy(snap, capsys):
    code = main(["serve", str(snap), "--port", "0", "--duration", "0", "--miss", "sometimes"])
    _one_line_error(capsys, code, "miss policy", "sometimes")
    code = main(["serve", str(snap), "--port", "0", "--duration", "0", "--miss", "999"])
    _one_line_error(capsys, code, "999")


def test_unwritable_stats_file_fails_before_serving(snap, tmp_path, capsys):
    (tmp_path / "somefile").write_text("a regular file\n")
    target = tmp_path / "somefile" / "stats.json"
    code = main(["serve", str(snap), "--port", "0", "--duration", "0", "--stats", str(target)])
    out, err = capsys.readouterr()
    assert code == 1 and "replay proxy" not in out
    assert err.strip().startswith("error: cannot write the stats file") and str(target) in err
    assert len(err.strip().splitlines()) == 1


def test_verbose_logs_to_stderr_and_quiet_by_default(snap, capsys, ca):
    assert main(["serve", str(snap), "--port", "0", "--duration", "0"]) == 0
    assert "proxy listening on" not in capsys.readouterr().err
    assert main(["-v", "serve", str(snap), "--port", "0", "--duration", "0"]) == 0
    out, err = capsys.readouterr()
    assert "INFO ego2web_replay.replay.front: proxy listening on http://127.0.0.1:" in err and "listening" not in out
    assert f"INFO ego2web_replay.replay.session: snapshot opened: {snap} (" in err
    assert main(["serve", str(snap), "--port", "0", "--duration", "0", "-v"]) == 0  # after the command too
    assert "proxy listening on" in capsys.readouterr().err
    assert main(["serve", str(snap), "--port", "0", "--duration", "0"]) == 0  # the next invocation is quiet again
    assert "proxy listening on" not in capsys.readouterr().err


def test_serve_takes_the_wire_options_and_prints_what_they_refused(snap, tmp_path, capsys, ca):
    import threading

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    got: list[bytes] = []

    def silent_client() -> None:  # connects once the proxy listens, then says nothing
        for _ in range(1000):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=20)
                break
            except ConnectionRefusedError:
                threading.Event().wait(0.01)
        with s:
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        got.append(out)

    client = threading.Thread(target=silent_client)
    client.start()
    code = main(["serve", str(snap), "--port", str(port), "--duration", "3", "--head-timeout", "0.3",
                 "--idle-timeout", "5", "--body-budget", "1", "--max-connections", "50",
                 "--stats", str(tmp_path / "stats.json")])
    client.join(30)
    printed, err = capsys.readouterr()
    assert code == 0, err
    assert got[0].startswith(b"HTTP/1.1 408 ") and b"request head not received within 0.3 s" in got[0]
    assert "proxy bounds (docs/limits.md): timeout-head 1" in printed
    assert ReplayStats.model_validate_json((tmp_path / "stats.json").read_text()).refused == {"timeout-head": 1}


def test_bad_wire_options_are_one_line_errors(snap, capsys, monkeypatch):
    assert main(["serve", str(snap), "--head-timeout", "0"]) == 2  # click's usage error
    assert "Invalid value for '--head-timeout'" in capsys.readouterr().err
    monkeypatch.setenv("EGO2WEB_WIRE_IDLE_TIMEOUT", "soon")
    _one_line_error(capsys, main(["serve", str(snap), "--port", "0", "--duration", "0"]),
                    "EGO2WEB_WIRE_IDLE_TIMEOUT='soon' is not a number")
