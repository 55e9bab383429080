"""Real third-party web applications on 127.0.0.1, as fixtures for fidelity tests.

* :class:`DatasetteSite`: Datasette (PyPI ``datasette``) serving a SQLite
  product table with full-text search (``?_search=``), pagination
  (``?_next=``), facets (``?_facet=category``, ``?category=Kitchen``), sort
  (``?_sort=price``), row pages (``/shop/products/7``) and the same as JSON
  (``.json``), and static files (``--static``) under ``/assets/``. It runs as
  its own process (uvicorn); :meth:`DatasetteSite.execute` changes its data.
* :class:`MkDocsSite`: a documentation site built by MkDocs (PyPI ``mkdocs``)
  with its default theme (client-side search over ``search/search_index.json``),
  served as static files; a missing path gets MkDocs' ``404.html``, with status
  404, or 200 like a host that falls back to it (a soft 404);
  :meth:`MkDocsSite.remove_page` rebuilds it without a page.
* :class:`SignInSite`: a small Flask shop whose pages use Flask-Login's
  ``login_required`` (PyPI ``flask-login``): open while ``walled`` is false,
  then a redirect to its sign-in page.
* :class:`NginxSite`: nginx (Debian's ``nginx-light``) serving a folder of files: ETag and
  Last-Modified, ``Range`` answered with ``206`` (several ranges as ``multipart/byteranges``),
  ``If-Range``; what media players and range-reading libraries meet on the web.

Datasette, MkDocs and Flask-Login need the ``dev`` extra; :func:`available` says whether they are
installed. :func:`nginx_binary` finds nginx (None when it is not installed).
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

from ..httpd import LoopbackHTTPServer

__all__ = ["AppProcess", "DatasetteSite", "MkDocsSite", "NginxSite", "SignInSite", "PRODUCTS", "available",
           "nginx_binary", "proxy_get"]

PRODUCTS = [
    ("walnut coffee", "Kitchen", 12.5), ("walnut tea", "Kitchen", 8.0), ("oak table", "Furniture", 240.0),
    ("camping stove", "Outdoor", 55.0), ("trail tent", "Outdoor", 180.0), ("coffee grinder", "Kitchen", 39.0),
    ("pine chair", "Furniture", 75.0), ("head lamp", "Outdoor", 22.0), ("tea kettle", "Kitchen", 31.0),
    ("walnut shelf", "Furniture", 95.0), ("sleeping bag", "Outdoor", 89.0), ("espresso cups", "Kitchen", 18.0),
    ("garden bench", "Outdoor", 130.0), ("desk lamp", "Furniture", 45.0), ("cast iron pan", "Kitchen", 42.0),
    ("rain jacket", "Outdoor", 110.0), ("book case", "Furniture", 160.0), ("coffee beans", "Kitchen", 14.0),
    ("hiking poles", "Outdoor", 60.0), ("bar stool", "Furniture", 70.0), ("milk frother", "Kitchen", 25.0),
    ("cooler box", "Outdoor", 48.0), ("side table", "Furniture", 85.0), ("tea strainer", "Kitchen", 6.5),
]


def available(module: str) -> bool:
    """Whether a third-party application's package is importable here."""
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def proxy_get(proxy: str, url: str, timeout: float = 20) -> tuple[int, dict[str, str], bytes]:
    """GET an ``http://`` URL through a proxy: status, headers (last value per name) and body."""
    import urllib.error

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    try:
        with opener.open(url, timeout=timeout) as r:
            return r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout_s: float, context: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:  # noqa: S310 - loopback only
                r.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class AppProcess(ABC):
    """A third-party app run as its own process on 127.0.0.1 (``start`` in subclasses; ``stop`` ends it)."""

    __test__ = False
    _proc: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def start(self) -> Self:
        """Launch the app (with :meth:`_launch`) and return once it answers."""

    def _launch(self, cmd: list[str], env: dict[str, str], ready_url: str, timeout_s: float,
                cwd: Path | None = None, context: Any = None) -> None:
        """Start ``cmd`` and wait until ``ready_url`` answers (stopping it if it never does); ``context``:
        the TLS context to ask an ``https://`` one with."""
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        try:
            _wait_http(ready_url, timeout_s, context)
        except OSError:
            self.stop()
            raise

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DatasetteSite(AppProcess):
    """Datasette on ``http://127.0.0.1:<port>/shop/products`` over a product table (page size 5)."""

    def __init__(self, folder: Path, page_size: int = 5, static: Path | None = None,
                 setup: Callable[[sqlite3.Connection], None] | None = None) -> None:
        self.folder = Path(folder)
        self.db = self.folder / "shop.db"
        self.page_size = page_size
        self.static = static
        self.setup = setup  # more tables, when the database is first built (a multi-table suite)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _build(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.db.exists():
            return
        con = sqlite3.connect(self.db)
        con.execute("create table products (id integer primary key, name text, category text, price real)")
        con.executemany("insert into products (name, category, price) values (?, ?, ?)", PRODUCTS)
        con.execute('create virtual table products_fts using fts5(name, content="products", content_rowid="id")')
        con.execute("insert into products_fts (rowid, name) select id, name from products")
        if self.setup is not None:
            self.setup(con)
        con.commit()
        con.close()

    def start(self) -> Self:
        self._build()
        self.port = _free_port()
        exe = Path(sys.executable).parent / "datasette"
        cmd = [str(exe) if exe.exists() else "datasette", "serve", str(self.db), "-h", "127.0.0.1",
               "-p", str(self.port), "--setting", "default_page_size", str(self.page_size),
               "--setting", "suggest_facets", "off"] + (["--static", f"assets:{self.static}"] if self.static else [])
        self._launch(cmd, {**os.environ, "DATASETTE_SECRET": "ego2web-test"}, self.url + "/-/versions.json", 30)
        return self

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Change the served data (Datasette reads the file afresh for every request)."""
        con = sqlite3.connect(self.db)
        try:
            con.execute(sql, params)
            con.commit()
        finally:
            con.close()


_MKDOCS_PAGES = {
    "index.md": "# Replay handbook\n\nStart with [recording](recording.md) or [matching](matching.md).\n",
    "recording.md": "# Recording\n\nRecord a task with the recording proxy. Every exchange is archived.\n",
    "matching.md": "# Matching\n\nA request is matched exactly, canonically, or it is a miss.\n",
    "coverage.md": "# Coverage\n\nGrow a snapshot by merging live runs of the same task.\n",
}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class MkDocsSite(LoopbackHTTPServer):
    """A four-page MkDocs site (default theme, search plugin) served statically on 127.0.0.1.

    A missing path is answered with the site's ``404.html`` and ``not_found_status`` (404; 200 makes
    every missing page a soft 404, as on a host configured to fall back to that page)."""

    __test__ = False
    thread_name = "mkdocs-site"

    def __init__(self, folder: Path, not_found_status: int = 404) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.site_dir = self.folder / "site"
        self.not_found_status = not_found_status
        self.pages = dict(_MKDOCS_PAGES)

    def make_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        directory, site = str(self.site_dir), self

        class Handler(_Quiet):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=directory, **kwargs)

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                page = Path(directory) / "404.html"
                if code != 404 or not page.is_file():
                    return super().send_error(code, message, explain)
                body = page.read_bytes()
                self.send_response(site.not_found_status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        return Handler

    def remove_page(self, name: str) -> None:
        """Rebuild the site without the page ``name`` (e.g. ``coverage.md``)."""
        self.pages.pop(name)
        (self.folder / "docs" / name).unlink()
        shutil.rmtree(self.site_dir)
        self.build()

    def build(self) -> None:
        if (self.site_dir / "index.html").exists():
            return
        docs = self.folder / "docs"
        docs.mkdir(parents=True, exist_ok=True)
        for name, text in self.pages.items():
            (docs / name).write_text(text, "utf-8")
        (self.folder / "mkdocs.yml").write_text(
            "site_name: Replay handbook\nuse_directory_urls: true\n"
            "theme:\n  name: mkdocs\n  highlightjs: false\nnav:\n"
            + "".join(f"  - {n.removesuffix('.md')}: {n}\n" for n in self.pages), "utf-8")
        exe = Path(sys.executable).parent / "mkdocs"
        subprocess.run([str(exe) if exe.exists() else "mkdocs", "build", "-q", "-f", str(self.folder / "mkdocs.yml"),
                        "-d", str(self.site_dir)], check=True, capture_output=True, timeout=120)

    def start(self, port: int | None = None) -> Self:
        self.build()
        return super().start(port)


class SignInSite(LoopbackHTTPServer):
    """A Flask shop on 127.0.0.1 (werkzeug's threaded server): ``/`` lists :data:`PRODUCTS`, ``/item/<n>``
    shows one, ``/login`` is the sign-in form. Item pages are ``login_required`` (Flask-Login); while
    ``walled`` is false the check is off (``LOGIN_DISABLED``), after that they redirect to ``/login?next=...``."""

    __test__ = False
    thread_name = "signin-site"

    def __init__(self) -> None:
        super().__init__()
        self.app = self._make_app()

    @property
    def walled(self) -> bool:
        return not self.app.config["LOGIN_DISABLED"]

    @walled.setter
    def walled(self, value: bool) -> None:
        self.app.config["LOGIN_DISABLED"] = not value

    @staticmethod
    def _make_app() -> Any:
        from flask import Flask, render_template_string
        from flask_login import LoginManager, login_required

        app = Flask("ego2web_signin_site")
        app.config.update(SECRET_KEY="ego2web-test", LOGIN_DISABLED=True)
        logins = LoginManager(app)
        logins.login_view = "login"
        logins.user_loader(lambda user_id: None)
        page = ("<!doctype html><html><head><meta charset='utf-8'><title>{{ title }} - Corner Shop</title></head>"
                "<body><header><a href='/'>Corner Shop</a></header><main>{{ main|safe }}</main>"
                "<footer><p>Corner Shop, prices in dollars.</p></footer></body></html>")

        @app.route("/")
        def index() -> str:
            items = "".join(f"<li><a href='/item/{i}'>{name}</a></li>" for i, (name, _, _) in enumerate(PRODUCTS, 1))
            return render_template_string(page, title="Shop", main=f"<h1>Shop</h1><ul>{items}</ul>")

        @app.route("/item/<int:n>")
        @login_required
        def item(n: int) -> str:
            name, category, price = PRODUCTS[n - 1]
            return render_template_string(page, title=name, main=f"<h1 id='name'>{name}</h1><p>{category}</p>"
                                          f"<p>Price: <span id='price'>${price:.2f}</span></p>")

        @app.route("/login")
        def login() -> str:
            form = ("<h1>Sign in</h1><form method='post'><label>Email <input name='email'></label>"
                    "<label>Password <input type='password' name='password'></label><button>Sign in</button></form>")
            return render_template_string(page, title="Sign in", main=form)

        return app

    def make_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        from werkzeug.serving import WSGIRequestHandler

        class Quiet(WSGIRequestHandler):
            def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002
                pass

        return Quiet

    def start(self, port: int | None = None) -> Self:
        """Serve the app with werkzeug's own threaded server (not the base class's)."""
        from werkzeug.serving import make_server

        handler: Any = self.make_handler()
        server = make_server("127.0.0.1", self.port if port is None else port, self.app, threaded=True,
                             request_handler=handler)
        self._server, self.port = server, server.server_port  # type: ignore[assignment]  # an HTTPServer too
        self._thread = threading.Thread(target=server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self


def nginx_binary() -> str | None:
    """The nginx executable (PATH, else Debian's ``/usr/sbin/nginx``), or None."""
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


_NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  types {{ text/html html; text/css css; video/mp4 mp4; video/webm webm; application/javascript js; }}
  default_type application/octet-stream;
{gzip}  server {{ listen 127.0.0.1:{port}; root {d}/www; }}
}}
"""
#: nginx compressing as sites commonly configure it: gzip for the clients that ask, with ``Vary``
_NGINX_GZIP = """  gzip on; gzip_vary on; gzip_min_length 1; gzip_types text/css application/javascript;
"""


class NginxSite(AppProcess):
    """nginx on ``http://127.0.0.1:<port>/`` serving ``files`` (name -> bytes) from ``folder/www``, as
    its own foreground process (no master, nothing outside ``folder``); ``gzip``: CSS and JavaScript
    compressed for the clients that ask (``Vary: Accept-Encoding``)."""

    def __init__(self, folder: Path, files: dict[str, bytes], gzip: bool = False) -> None:
        self.folder = Path(folder)
        self.files = files
        self.gzip = gzip  # compress CSS and JS for clients that take gzip (gzip_vary on)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        exe = nginx_binary()
        if exe is None:
            raise FileNotFoundError("nginx is not installed (apt-get install -y nginx-light)")
        for name, data in self.files.items():
            target = self.folder / "www" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (self.folder / "tmp").mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        home = self.folder.resolve()
        conf = home / "nginx.conf"
        conf.write_text(_NGINX_CONF.format(d=home, port=self.port, gzip=_NGINX_GZIP if self.gzip else ""), "utf-8")
        self._launch([exe, "-p", str(home), "-c", str(conf), "-e", str(home / "error.log")], dict(os.environ),
                     self.url + "/" + next(iter(self.files)), 30)
        return self
