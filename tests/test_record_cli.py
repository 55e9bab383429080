"""``ego2web-replay record``: end to end against the local test site, failures, bad inputs, SIGKILL.

Every recording proxy here runs ``--guard loopback``: no request leaves the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.snapshots import Snapshot, iter_records, list_snapshots, verify_snapshot

pytestmark = pytest.mark.slow

EXE = Path(sys.executable).with_name("ego2web-replay")


def cli_env(data_home: Path) -> dict[str, str]:
    """Environment for a CLI subprocess: the test data home (its CA) and this checkout's package."""
    here = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([here, os.environ["PYTHONPATH"]]) if os.environ.get("PYTHONPATH") else here
    return {**os.environ, "EGO2WEB_REPLAY_HOME": str(data_home), "PYTHONPATH": path}


def _task(task_id: str, url: str, *actions: dict) -> dict:
    return {"id": task_id, "instruction": f"record {task_id}", "start_url": url,
            "reference_actions": [{"kind": "goto", "url": url}, *actions]}


def _write_tasks(path: Path, tasks: list[dict]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def _record_args(tasks_file: Path, root: Path, site, *extra: str) -> list[str]:
    return ["record", str(tasks_file), "--snapshots", str(root), "--guard", "loopback",
            "--upstream-ca", str(site.tls.ca_cert), "--action-timeout", "3", *extra]


def _one_line_error(err: str, *needles: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_record_end_to_end_a_failing_task_does_not_stop_the_others(site, data_home, tmp_path, capsys):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [
        _task("shop", site.https_url + "/", {"kind": "wait", "selector": "body[data-ready='1']"},
              {"kind": "click", "selector": "#product-link"}),
        _task("broken", site.https_url + "/", {"kind": "click", "selector": "#no-such-element"}),
        _task("plain", site.http_url + "/static/data.json"),
    ])
    root = tmp_path / "snapshots"
    summary = tmp_path / "record.json"
    proc = subprocess.run([str(EXE), *_record_args(tasks, root, site), "--json", str(summary)], capture_output=True,
                          text=True, env=cli_env(data_home), timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    doc = json.loads(summary.read_text())  # written though a task failed
    assert (doc["recorded"], doc["failed"]) == (2, 1) and doc["root"] == str(root)
    by_task = {t["task_id"]: t for t in doc["tasks"]}
    assert not by_task["broken"]["ok"] and "#no-such-element" in by_task["broken"]["error"]
    assert by_task["shop"]["ok"] and by_task["shop"]["exchanges"] > 1 and by_task["shop"]["snapshot"].startswith(str(root))
    assert "Traceback" not in out
    assert "FAIL broken: task broken: step 1 (click" in out and "#no-such-element" in out
    assert out.count("ok   ") == 2 and "ok   shop:" in out and "ok   plain:" in out
    _one_line_error(proc.stderr.rstrip().splitlines()[-1], "1 of 3 task(s) failed to record")  # after progress
    infos = {i.task_id: i for i in list_snapshots(root)}
    assert set(infos) == {"shop", "broken", "plain"}
    assert infos["shop"].complete and infos["plain"].complete and not infos["broken"].complete
    shop = Snapshot.open(infos["shop"].path)
    urls = {e.url for e in shop.entries()}
    assert site.https_url + "/" in urls and site.https_url + "/product/42" in urls
    assert site.https_url + "/static/logo.png" in urls
    assert all(u.startswith(("https://127.0.0.1", "http://127.0.0.1", "https://localhost", "http://localhost"))
               for u in urls), urls
    assert shop.manifest.screenshots and (shop.path / shop.manifest.screenshots[0]).is_file()
    # the second load of each page, in a throw-away context, is noted for learning and not archived
    reloads = json.loads((shop.path / "volatile.json").read_text())["reloads"]
    assert {r[1] for r in reloads} >= {site.https_url + "/", site.https_url + "/product/42"}
    assert [e.url for e in shop.entries()].count(site.https_url + "/") == 1 and shop.manifest.settings["second_load"]
    # the snapshot CLI agrees
    capsys.readouterr()
    assert main(["snapshot", "list", "--snapshots", str(root)]) == 0
    listed = capsys.readouterr().out
    assert "shop" in listed and "plain" in listed and "broken" in listed
    assert main(["snapshot", "show", str(shop.path)]) == 0
    assert "shop" in capsys.readouterr().out
    assert main(["snapshot", "verify", str(shop.path)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {shop.path}")
    assert main(["snapshot", "verify", str(infos["broken"].path)]) == 1
    _one_line_error(capsys.readouterr().err, str(infos["broken"].path), "problem(s) found")


def test_task_option_selects(site, tmp_path, capsys):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [
        _task("one", site.http_url + "/static/data.json"),
        _task("two", site.http_url + "/static/style.css"),
    ])
    root = tmp_path / "snapshots"
    assert main(_record_args(tasks, root, site, "--task", "two", "--compression", "gz")) == 0
    (info,) = list_snapshots(root)
    assert info.task_id == "two" and info.complete and info.manifest.archive == "archive.warc.gz"
    assert verify_snapshot(info.path).ok
    assert info.manifest.settings["engine"] == "fast"  # the default recording proxy
    assert main(_record_args(tasks, tmp_path / "mitm", site, "--task", "one", "--engine", "mitmproxy")) == 0
    (mitm,) = list_snapshots(tmp_path / "mitm")
    assert mitm.complete and mitm.manifest.settings["engine"] == "mitmproxy" and mitm.manifest.exchanges >= 1
    capsys.readouterr()
    assert main(_record_args(tasks, root, site, "--task", "three")) == 1
    _one_line_error(capsys.readouterr().err, "three")


def test_malformed_task_file_names_file_task_and_field(site, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(_task("good", site.http_url + "/")) + "\n"
                     + json.dumps({"id": "bad", "instruction": "x", "start_url": "ftp://nope"}) + "\n")
    root = tmp_path / "snapshots"
    assert main(_record_args(tasks, root, site)) == 1
    _one_line_error(capsys.readouterr().err, str(tasks), "line 2", "'bad'", "start_url")
    assert not root.exists() or list_snapshots(root) == []
    tasks.write_text('{"id": "x", "instruction": \n')
    assert main(_record_args(tasks, root, site)) == 1
    _one_line_error(capsys.readouterr().err, str(tasks), "line 1", "not valid JSON")
    assert main(_record_args(tmp_path / "missing.jsonl", root, site)) == 1
    _one_line_error(capsys.readouterr().err, "missing.jsonl", "not found")


def test_unwritable_snapshots_folder(site, tmp_path, capsys):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [_task("t", site.http_url + "/")])
    blocker = tmp_path / "somefile"
    blocker.write_text("a regular file, so nothing can be created under it\n")
    assert main(_record_args(tasks, blocker / "snaps", site)) == 1
    _one_line_error(capsys.readouterr().err, "snapshots folder", str(blocker / "snaps"), "not writable")


# -- SIGKILL mid-recording ---------------------------------------------------------

IMAGES = 30
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
       b"\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef"
       b"\x00\x00\x00\x00IEND\xaeB`\x82")


SERVED = 4  # images answered at once; the others wait until the test has killed the recorder


class _SlowHandler(BaseHTTPRequestHandler):
    """A page of many images: the first ``SERVED`` answered at once, every later one held until the
    server's ``release`` is set, so the recording cannot finish on its own however slow the machine."""

    server: _SlowServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/":
            imgs = "".join(f'<img src="/img/{n}.png?pad={"x" * 2000}">' for n in range(IMAGES))
            body, ctype = f"<html><body><h1>slow</h1>{imgs}</body></html>".encode(), "text/html"
        elif self.path.startswith("/img/"):
            with self.server.lock:
                self.server.images += 1
                held = self.server.images > SERVED
            if held:
                self.server.release.wait(300)
            body, ctype = PNG + b"\x00" * 4096, "image/png"
        else:
            body, ctype = b"", "text/plain"
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _SlowServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SlowHandler)
        self.lock, self.images, self.release = threading.Lock(), 0, threading.Event()

    def handle_error(self, request: object, client_address: object) -> None:
        # a held image answered once the recorder is dead: no traceback on stderr, where it would be
        # taken for the CLI's own output (``capsys`` reads both)
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@pytest.fixture()
def slow_site():
    server = _SlowServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def _whole_records(archive: Path) -> int:
    try:
        return sum(1 for _ in iter_records(archive, tolerate_truncation=True))
    except Exception:  # noqa: BLE001 - a frame being written; try again
        return 0


def test_sigkill_mid_recording_leaves_whole_records_and_verify_says_so(site, slow_site, data_home, tmp_path,
                                                                      capsys):
    url = f"http://127.0.0.1:{slow_site.server_address[1]}/"
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [_task("slow", url)])
    root = tmp_path / "snapshots"
    log = tmp_path / "record.log"
    # the page's load waits on the held images: no action timeout may end the recording before the kill
    args = _record_args(tasks, root, site, "--action-timeout", "600")
    with open(log, "wb") as sink:
        proc = subprocess.Popen([str(EXE), *args], stdout=sink, stderr=subprocess.STDOUT,
                                env=cli_env(data_home), start_new_session=True)
    try:
        deadline, archive, seen = time.monotonic() + 300, None, 0  # a bound for a hung recorder, not a timing
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(root.glob("slow/*/archive.warc.zst"))
            archive = found[0] if found else None
            # warcinfo + the page (request, response) + a few images
            if archive is not None and (seen := _whole_records(archive)) >= 9:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the recording ended before it could be killed: {log.read_text()}"
        assert archive is not None and seen >= 9, log.read_text()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        # the recorder's Chromium lives on in the session we started for it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    size = archive.stat().st_size
    records = list(iter_records(archive, tolerate_truncation=True))
    assert len(records) >= seen and records[0].rec_type == "warcinfo"
    assert records[0].record_id and all(r.record_id for r in records)
    images = [r for r in records if r.rec_type == "response" and "/img/" in (r.url or "")]
    assert images and all(r.payload.startswith(PNG) and len(r.payload) == len(PNG) + 4096 for r in images)
    assert main(["snapshot", "verify", str(archive.parent)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "problem: manifest.json is missing: the recording did not finish (or was killed)" in out
    _one_line_error(err, str(archive.parent), f"({len(records)} whole records")
    report = verify_snapshot(archive.parent)
    assert report.records == len(records)
    if report.truncated_at is not None:
        assert report.truncated_at < size
        assert f"archive truncated at byte {report.truncated_at} after {len(records)} whole records" in out
    (info,) = list_snapshots(root)
    assert not info.complete
