"""Real third-party web applications on 127.0.0.1, as fixtures for fidelity tests.

* :class:`DatasetteSite`: Datasette (PyPI ``datasette``) serving a SQLite
  product table with full-text search (``?_search=``), pagination
  (``?_next=``), facets (``?_facet=category``, ``?category=Kitchen``), sort
  (``?_sort=price``), row pages (``/shop/products/7``) and the same as JSON
  (``.json``). It runs as its own process (uvicorn).
* :class:`MkDocsSite`: a documentation site built by MkDocs (PyPI ``mkdocs``)
  with its default theme (client-side search over ``search/search_index.json``),
  served as static files.
* :class:`NginxSite`: nginx (Debian's ``nginx-light``) serving a folder of files: ETag and
  Last-Modified, ``Range`` answered with ``206`` (several ranges as ``multipart/byteranges``),
  ``If-Range``; what media players and range-reading libraries meet on the web.

Datasette and MkDocs need the ``dev`` extra; :func:`available` says whether they are installed.
:func:`nginx_binary` finds nginx (None when it is not installed).
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

from ..httpd import LoopbackHTTPServer

__all__ = ["DatasetteSite", "MkDocsSite", "NginxSite", "PRODUCTS", "available", "nginx_binary", "proxy_get"]

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


def _wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback only
                r.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _ProcessSite:
    """A server run as its own process on ``http://127.0.0.1:<port>``: launched, awaited, stopped."""

    __test__ = False

    def __init__(self) -> None:
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        raise NotImplementedError

    def _launch(self, cmd: list[str], ready_path: str, env: dict[str, str] | None = None) -> Self:
        """Start ``cmd`` and wait until ``ready_path`` answers (the process is stopped if it never does)."""
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            _wait_http(self.url + ready_path, 30)
        except OSError:
            self.stop()
            raise
        return self

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


class DatasetteSite(_ProcessSite):
    """Datasette on ``http://127.0.0.1:<port>/shop/products`` over a product table (page size 5)."""

    __test__ = False

    def __init__(self, folder: Path, page_size: int = 5) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.db = self.folder / "shop.db"
        self.page_size = page_size

    def _build(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.db.exists():
            return
        con = sqlite3.connect(self.db)
        con.execute("create table products (id integer primary key, name text, category text, price real)")
        con.executemany("insert into products (name, category, price) values (?, ?, ?)", PRODUCTS)
        con.execute('create virtual table products_fts using fts5(name, content="products", content_rowid="id")')
        con.execute("insert into products_fts (rowid, name) select id, name from products")
        con.commit()
        con.close()

    def start(self) -> Self:
        self._build()
        self.port = _free_port()
        exe = Path(sys.executable).parent / "datasette"
        cmd = [str(exe) if exe.exists() else "datasette", "serve", str(self.db), "-h", "127.0.0.1",
               "-p", str(self.port), "--setting", "default_page_size", str(self.page_size),
               "--setting", "suggest_facets", "off"]
        return self._launch(cmd, "/-/versions.json", env={**os.environ, "DATASETTE_SECRET": "ego2web-test"})


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
    """A four-page MkDocs site (default theme, search plugin) served statically on 127.0.0.1."""

    __test__ = False
    thread_name = "mkdocs-site"

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.site_dir = self.folder / "site"

    def make_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        directory = str(self.site_dir)

        class Handler(_Quiet):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=directory, **kwargs)

        return Handler

    def build(self) -> None:
        if (self.site_dir / "index.html").exists():
            return
        docs = self.folder / "docs"
        docs.mkdir(parents=True, exist_ok=True)
        for name, text in _MKDOCS_PAGES.items():
            (docs / name).write_text(text, "utf-8")
        (self.folder / "mkdocs.yml").write_text(
            "site_name: Replay handbook\nuse_directory_urls: true\n"
            "theme:\n  name: mkdocs\n  highlightjs: false\nnav:\n"
            + "".join(f"  - {n.removesuffix('.md')}: {n}\n" for n in _MKDOCS_PAGES), "utf-8")
        exe = Path(sys.executable).parent / "mkdocs"
        subprocess.run([str(exe) if exe.exists() else "mkdocs", "build", "-q", "-f", str(self.folder / "mkdocs.yml"),
                        "-d", str(self.site_dir)], check=True, capture_output=True, timeout=120)

    def start(self, port: int | None = None) -> Self:
        self.build()
        return super().start(port)


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
  types {{ text/html html; video/mp4 mp4; video/webm webm; application/javascript js; }}
  default_type application/octet-stream;
  server {{ listen 127.0.0.1:{port}; root {d}/www; }}
}}
"""


class NginxSite(_ProcessSite):
    """nginx on ``http://127.0.0.1:<port>/`` serving ``files`` (name -> bytes) from ``folder/www``, as
    its own foreground process (no master, nothing outside ``folder``)."""

    def __init__(self, folder: Path, files: dict[str, bytes]) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.files = files

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
        conf.write_text(_NGINX_CONF.format(d=home, port=self.port), "utf-8")
        return self._launch([exe, "-p", str(home), "-c", str(conf), "-e", str(home / "error.log")],
                            "/" + next(iter(self.files)))
