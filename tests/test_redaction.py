"""Credentials never archived: the redactor's rules, then every secret kind sent by a real browser.

The browser test records a loopback site that hands out and asks for credentials
(Set-Cookie, a response token header, an X-Api-Key request header, tokens in query
strings and so in Referer, a password in a form and in a JSON body, URL userinfo),
runs the scripted agent live and frozen with a database, and then looks for every
secret in every file, in the decompressed archives and in every database table.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ego2web_replay.actions import Action
from ego2web_replay.redaction import MARK, REDACTED, Redactor, sensitive_name

SECRETS = {
    "query_token": "SECRETqtoken111", "query_key": "SECRETqkey222", "header_key": "SECREThkey333",
    "cookie": "SECRETcookie444", "resp_header": "SECRETresp555", "form_password": "SECRETform666",
    "json_password": "SECRETjson777", "userinfo": "SECRETuser888", "fragment": "SECRETfrag999",
}


# -- the rules --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["token", "access_token", "accessToken", "api_key", "api-key", "apiKey", "key",
                                  "auth", "password", "passwd", "session", "PHPSESSID", "client_secret", "sig",
                                  "X-Amz-Signature", "X-Amz-Credential", "jwt"])
def test_credential_names(name):
    assert sensitive_name(name)


@pytest.mark.parametrize("name", ["q", "page", "keyword", "keywords", "author", "monkey", "id", "sort", "lang"])
def test_ordinary_names(name):
    assert not sensitive_name(name)


def test_urls_headers_and_bodies():
    r = Redactor.make(params=["code"], headers=["X-Custom-Secret"])
    assert r.url("https://u:pw@shop.example/a?q=mug&token=abc&code=42#access_token=zz&x=1") == \
        f"https://{MARK}@shop.example/a?q=mug&token={MARK}&code={MARK}#access_token={MARK}&x=1"
    plain = "https://shop.example/a?q=mug&page=2"
    assert r.url(plain) is plain  # untouched URLs stay byte-identical (matching keys unchanged)
    assert r.url(r.url("https://x.example/?sig=1")) == r.url("https://x.example/?sig=1")  # idempotent
    h = r.header_list([("Set-Cookie", "session=abc; Path=/; HttpOnly"), ("Cookie", "a=1; theme=dark"),
                       ("X-Api-Key", "k"), ("x-custom-secret", "s"), ("Referer", "https://a.example/?token=t"),
                       ("Accept", "*/*")])
    assert h == [("Set-Cookie", f"session={MARK}; Path=/; HttpOnly"), ("Cookie", f"a={MARK}; theme={MARK}"),
                 ("X-Api-Key", REDACTED), ("x-custom-secret", REDACTED),
                 ("Referer", f"https://a.example/?token={MARK}"), ("Accept", "*/*")]
    assert r.body("application/x-www-form-urlencoded", b"user=bob&password=hunter2") == \
        f"user=bob&password={MARK}".encode()
    body = json.loads(r.body("application/json", b'{"user": "bob", "auth": {"password": "p", "n": [{"token": 1}]}}'))
    assert body == {"user": "bob", "auth": {"password": MARK, "n": [{"token": MARK}]}}
    assert r.body("application/json", b'{"q": "mug"}') == b'{"q": "mug"}'
    assert r.body("application/json", b"[" * 100_000) == b"[" * 100_000  # unparsable: unchanged, no crash
    assert r.text("failed at https://a.example/x?token=t (net::ERR)") == f"failed at https://a.example/x?token={MARK} (net::ERR)"
    keep = Redactor.make(keep_credentials=True)
    assert keep.url("https://u:p@a.example/?token=t") == "https://u:p@a.example/?token=t"
    assert keep.settings() is None and Redactor.from_settings({"redaction": r.settings()}) == r


# -- a real browser ---------------------------------------------------------------------------------

def _js(secret: str) -> str:
    """A secret as a JS expression that never spells it out (so the archived page itself holds none)."""
    return f"['{secret[:6]}', '{secret[6:]}'].join('')"


LOGIN = f"""<!doctype html><html><head><title>Login</title></head><body><h1>login</h1>
<form id="f" method="POST" action="/account"><input name="user" value="bob">
<input id="pw" name="password" type="password"><button id="go">go</button></form>
<a id="next" href="/next">next</a>
<script>
document.getElementById('pw').value = {_js(SECRETS['form_password'])};
Promise.all([
  fetch('/api/data?api_key=' + {_js(SECRETS['query_key'])} + '&page=1', {{headers: {{'X-Api-Key': {_js(SECRETS['header_key'])}}}}}),
  fetch('/api/login', {{method: 'POST', headers: {{'Content-Type': 'application/json'}},
                        body: JSON.stringify({{user: 'bob', password: {_js(SECRETS['json_password'])}}})}}),
]).then(() => {{ document.body.dataset.ready = '1'; }});
</script></body></html>""".encode()


class CredentialSite:
    """A loopback site that sets and asks for credentials."""

    def __init__(self) -> None:
        from ego2web_replay.httpd import LoopbackHTTPServer

        outer = self

        class Server(LoopbackHTTPServer):
            def make_handler(self) -> type[BaseHTTPRequestHandler]:
                return outer._handler()

        self.server = Server().start()
        self.url = self.server.url

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def _send(self, body: bytes, ctype: str = "text/html", extra=()) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.startswith("/login"):
                    self._send(LOGIN, extra=[("Set-Cookie", f"session={SECRETS['cookie']}; Path=/; HttpOnly"),
                                             ("X-Auth-Token", SECRETS["resp_header"])])
                elif self.path.startswith("/api/"):
                    self._send(b'{"ok": true}', "application/json")
                else:
                    self._send(b"<html><head><title>Next</title></head><body><h1>next</h1></body></html>")

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/api/"):
                    self._send(b'{"ok": true}', "application/json")
                else:
                    self._send(b"<html><head><title>Account</title></head><body><h1 id='a'>42</h1></body></html>")

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def stop(self) -> None:
        self.server.stop()


def _all_text(path: Path) -> str:
    """A file's content as text; archives decompressed, DuckDB files read table by table."""
    if path.suffix == ".zst":
        import zstandard

        with path.open("rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    elif path.suffix == ".gz":
        data = gzip.open(path).read()
    elif path.suffix == ".duckdb":
        import duckdb

        con = duckdb.connect(str(path), read_only=True)
        try:
            rows = []
            for (table,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall():
                rows.append(repr(con.execute(f'SELECT * FROM "{table}"').fetchall()))
            return "\n".join(rows)
        finally:
            con.close()
    else:
        data = path.read_bytes()
    return data.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def credential_run(tmp_path_factory, ca):
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import Task, TaskSuite

    root = tmp_path_factory.mktemp("redaction")
    site = CredentialSite()
    host = site.url.split("://", 1)[1]
    actions = [
        Action(kind="goto", url=f"{site.url}/login?token={SECRETS['query_token']}&q=mug#token={SECRETS['fragment']}"),
        Action(kind="wait", selector="body[data-ready='1']"),
        Action(kind="click", selector="#next"),  # Referer carries the token
        Action(kind="goto", url=f"{site.url}/login?token={SECRETS['query_token']}&q=mug"),
        Action(kind="wait", selector="body[data-ready='1']"),
        Action(kind="click", selector="#go"),  # the form POST with a password
        Action(kind="goto", url=f"http://bob:{SECRETS['userinfo']}@{host}/next"),
        Action(kind="answer", answer="42"),
    ]
    task = Task(id="creds", instruction="log in", start_url=actions[0].url, reference_actions=actions)
    snapshots, runs, db = root / "snapshots", root / "runs", root / "track.duckdb"
    rec = record_task(task, snapshots, RecordOptions(guard="loopback", screenshots=False), ca=ca)
    assert rec.ok, rec.error
    from ego2web_replay.tracking.ingest import record_snapshot

    record_snapshot(db, rec.snapshot)
    settings = RunSettings(mode="both", snapshots_root=str(snapshots), guard="loopback", timeout_s=60,
                           action_timeout_s=10)
    run_dir, results = run_suite(TaskSuite(tasks=[task]), agent_name="scripted", out=runs, settings=settings)
    from ego2web_replay.tracking.ingest import record_run

    record_run(db, run_dir)  # episodes, resources of the live archive, replay stats
    yield {"root": root, "snapshot": rec.snapshot, "run_dir": run_dir, "results": results, "site": site}
    site.stop()


@pytest.mark.slow
def test_no_secret_in_any_file_or_table_and_frozen_replay_serves(credential_run):
    root = credential_run["root"]
    results = credential_run["results"]
    assert [(r.mode, r.end_reason) for r in results] == [("live", "answered"), ("frozen", "answered")], \
        [r.error for r in results]
    frozen = json.loads((credential_run["run_dir"] / "episodes" / "creds" / "frozen" / "trajectory.json").read_text())
    assert frozen["replay"]["miss"] == 0 and frozen["replay"]["exact"] >= 6, frozen["replay"]["missed_urls"]
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix != ".png" and not p.name.endswith(".lock")]
    assert any(p.suffix == ".zst" for p in files) and any(p.suffix == ".duckdb" for p in files)
    leaks = {(name, str(p.relative_to(root))) for p in files for name, secret in SECRETS.items()
             if secret in _all_text(p)}
    assert not leaks
    # the archive says what was there: names kept, values marked
    archive = _all_text(next(credential_run["snapshot"].glob("archive.warc*")))
    for trace in (f"session={MARK}", f"token={MARK}", f"api_key={MARK}", f"password={MARK}",
                  f'"password":"{MARK}"', f"X-Api-Key: {REDACTED}", f"X-Auth-Token: {REDACTED}"):
        assert trace in archive, trace


@pytest.mark.slow
def test_replay_matches_requests_whose_credentials_differ(credential_run, ca):
    from ego2web_replay.replay.session import Replay

    site = credential_run["site"].url
    with Replay([credential_run["snapshot"]], ca=ca) as replay:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url}))
        with opener.open(f"{site}/login?token=another-token&q=mug", timeout=10) as r:
            assert r.status == 200 and b"<h1>login</h1>" in r.read()
        req = urllib.request.Request(f"{site}/api/login", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"user": "bob", "password": "other"}).encode())
        with opener.open(req, timeout=10) as r:
            assert r.status == 200 and replay.stats().log[-1].outcome == "exact"
        with pytest.raises(urllib.error.HTTPError) as miss:  # another page is still a miss
            opener.open(f"{site}/elsewhere?token=another-token", timeout=10)
        assert miss.value.code == 404
    stats = replay.stats()
    assert "another-token" not in json.dumps(stats.model_dump(mode="json"))


@pytest.mark.slow
def test_keep_credentials_keeps_them(ca, tmp_path):
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import Task

    site = CredentialSite()
    try:
        url = f"{site.url}/login?token={SECRETS['query_token']}"
        task = Task(id="keep", instruction="x", start_url=url,
                    reference_actions=[Action(kind="goto", url=url), Action(kind="wait", selector="body[data-ready='1']")])
        rec = record_task(task, tmp_path, RecordOptions(guard="loopback", keep_credentials=True, screenshots=False,
                                                         compression="gz"), ca=ca)
    finally:
        site.stop()
    assert rec.ok, rec.error
    archive = _all_text(next(rec.snapshot.glob("archive.warc*")))
    assert SECRETS["query_token"] in archive and SECRETS["cookie"] in archive and SECRETS["json_password"] in archive
    assert rec.manifest.settings["redaction"] is None
