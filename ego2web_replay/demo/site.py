"""The bundled demo "live" site: a small shop, an encyclopedia and a video page, on 127.0.0.1.

It has product images, a search, an XHR-driven price (with a cache-buster),
a JSON POST (add to cart, with a timestamp field) and a few pages in an
encyclopedia and a video site. :meth:`DemoSite.drift` switches it to a drifted
version, as live sites drift: a product is delisted (gone from the listing,
its page answers 404, while the search index, as search indexes do, still
lists it), a price changes, a page is redesigned, and the video site puts up
a CAPTCHA wall.
"""

from __future__ import annotations

import html
import json
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..httpd import LoopbackHTTPServer
from ..png import png_bytes

__all__ = ["DemoSite", "PRODUCTS"]

PRODUCTS: dict[int, dict[str, Any]] = {
    1: {"name": "Salted Pretzel Bites", "kcal": 110, "price": "$2.99", "rgb": (180, 120, 60)},
    3: {"name": "Blue Water Bottle", "kcal": 0, "price": "$9.50", "rgb": (40, 90, 200)},
    4: {"name": "Crunchy Corn Snack", "kcal": 150, "price": "$3.49", "rgb": (230, 190, 30)},
    5: {"name": "Green Apple Chips", "kcal": 130, "price": "$4.10", "rgb": (90, 180, 70)},
    7: {"name": "Red Ceramic Mug", "kcal": 0, "price": "$12.99", "rgb": (200, 30, 40)},
}
WIKI = {
    "Old_Harbour_Lighthouse": ("Old Harbour Lighthouse", "A cast-iron lighthouse at the mouth of the old harbour.",
                               {"Built": "1874", "Height": "31 m", "Status": "Museum"}),
    "Basil": ("Basil", "Basil is a culinary herb of the family Lamiaceae.",
              {"Scientific name": "Ocimum basilicum", "Family": "Lamiaceae"}),
    "Espresso": ("Espresso", "A concentrated coffee brewed by forcing hot water through ground beans.",
                 {"Origin": "Italy"}),
}
VIDEOS = {"pasta42": ("Fresh pasta in ten minutes", "Chef Marta", "2026-03-14", (240, 200, 120)),
          "bike7": ("Fixing a bike chain", "Wheel Works", "2025-11-02", (60, 60, 60))}

CSS = """body{font-family:sans-serif;margin:0;background:#f7f7f7;color:#222}
header{background:#234;color:#fff;padding:10px 16px}header a{color:#fff;margin-right:14px}
main{padding:16px}.card{display:inline-block;width:170px;margin:6px;padding:8px;background:#fff;border:1px solid #ddd}
.infobox{float:right;border:1px solid #aaa;background:#fff;padding:8px}.captcha{border:2px solid #c00;padding:20px}
"""

SHOP_JS = """(async () => {
  const el = document.getElementById('price');
  if (el) {
    const r = await fetch('/api/price/' + el.dataset.item + '?_=' + Date.now());
    const j = await r.json();
    el.textContent = j.price;
  }
  const btn = document.getElementById('add-to-cart');
  if (btn) btn.addEventListener('click', async () => {
    const r = await fetch('/api/cart', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({item: Number(btn.dataset.item), qty: 1, ts: Date.now()})});
    const j = await r.json();
    document.getElementById('cart').textContent = j.count + ' item(s) in cart';
  });
  document.body.setAttribute('data-ready', '1');
})();
"""


def _page(title: str, body: str, *, script: bool = False) -> bytes:
    js = '<script src="/static/shop.js" defer></script>' if script else ""
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<link rel="stylesheet" href="/static/site.css">{js}</head><body>'
            '<header><a href="/">Demo Web</a><a href="/shop">Shop</a><a href="/wiki/Main_Page">Encyclopedia</a>'
            f'<a href="/videos">Videos</a></header><main>{body}</main></body></html>').encode()


class DemoSite(LoopbackHTTPServer):
    """The demo site; ``drifted`` selects the drifted version."""

    thread_name = "demo-site"

    def __init__(self) -> None:
        super().__init__()
        self.drifted = False

    def drift(self, on: bool = True) -> None:
        """Switch to (or back from) the drifted version of the site."""
        self.drifted = on

    def products(self) -> dict[int, dict[str, Any]]:
        items = {k: dict(v) for k, v in PRODUCTS.items()}
        if self.drifted:
            del items[4]  # delisted
            items[7]["price"] = "$14.49"  # price changed
        return items

    # -- pages -----------------------------------------------------------------
    def route(self, method: str, path: str, query: dict[str, list[str]], body: bytes,
              ) -> tuple[int, str, bytes, dict[str, str]]:
        html_t = "text/html; charset=utf-8"
        products = self.products()
        if path == "/":
            return 200, html_t, _page("Demo Web", "<h1>Demo Web</h1><p>A shop, an encyclopedia and videos.</p>"), {}
        if path == "/static/site.css":
            return 200, "text/css", CSS.encode(), {"Cache-Control": "max-age=300"}
        if path == "/static/shop.js":
            return 200, "application/javascript", SHOP_JS.encode(), {}
        if path.startswith("/img/product/") and path.endswith(".png"):
            pid = int(path.rsplit("/", 1)[1][:-4] or 0)
            if pid in PRODUCTS:
                return 200, "image/png", png_bytes(64, 64, PRODUCTS[pid]["rgb"]), {}
        if path.startswith("/img/video/") and path.endswith(".png"):
            vid = path.rsplit("/", 1)[1][:-4]
            if vid in VIDEOS:
                return 200, "image/png", png_bytes(160, 90, VIDEOS[vid][3]), {}
        if path in ("/shop", "/shop/search"):
            q = (query.get("q") or [""])[0].strip().lower()
            listed = PRODUCTS if path == "/shop/search" else products  # the search index lags behind
            hits = [(k, v) for k, v in listed.items() if not q or q in v["name"].lower()]
            cards = "".join(f'<div class="card"><img src="/img/product/{k}.png" width="64" height="64" alt="">'
                            f'<br><a href="/shop/item/{k}">{html.escape(v["name"])}</a></div>' for k, v in hits)
            form = ('<form action="/shop/search"><input id="q" name="q" placeholder="Search the shop" '
                    f'value="{html.escape(q)}"><button>Search</button></form>')
            note = f"<p>{len(hits)} result(s)</p>" if q else ""
            return 200, html_t, _page("Shop", f"<h1>Shop</h1>{form}{note}{cards or '<p>No products found.</p>'}"), {}
        if path.startswith("/shop/item/"):
            try:
                pid = int(path.rsplit("/", 1)[1])
            except ValueError:
                pid = -1
            if pid not in products:
                return 404, html_t, _page("Not available", "<h1>This product is no longer available</h1>"), {}
            p = products[pid]
            body_html = (f'<h1 id="name">{html.escape(p["name"])}</h1><img src="/img/product/{pid}.png" width="64" '
                         f'height="64" alt=""><p id="calories">{p["kcal"]} kcal per serving</p>'
                         f'<p>Price: <span id="price" data-item="{pid}">…</span></p>'
                         f'<button id="add-to-cart" data-item="{pid}">Add to cart</button> <span id="cart"></span>')
            return 200, html_t, _page(p["name"], body_html, script=True), {}
        if path.startswith("/api/price/"):
            pid = int(path.rsplit("/", 1)[1] or -1)
            if pid not in products:
                return 404, "application/json", b'{"error": "unknown item"}', {"Cache-Control": "no-store"}
            return 200, "application/json", json.dumps({"item": pid, "price": products[pid]["price"]}).encode(), \
                {"Cache-Control": "no-store"}
        if path == "/api/cart" and method == "POST":
            try:
                data = json.loads(body or b"{}")
                item = int(data["item"])
            except (ValueError, KeyError, TypeError):
                return 400, "application/json", b'{"error": "bad request"}', {}
            if item not in products:
                return 404, "application/json", b'{"error": "unknown item"}', {}
            return 200, "application/json", json.dumps({"count": int(data.get("qty", 1)), "item": item}).encode(), {}
        if path == "/wiki/Main_Page":
            if self.drifted:  # redesigned: new layout, the lighthouse link renamed
                links = ('<nav class="portal"><h2>Featured</h2><a href="/wiki/Old_Harbour_Lighthouse">Harbour Light '
                         '(historic)</a> · <a href="/wiki/Basil">Basil</a> · <a href="/wiki/Espresso">Espresso</a></nav>')
            else:
                links = ('<ul><li><a href="/wiki/Old_Harbour_Lighthouse">Old Harbour Lighthouse</a></li>'
                         '<li><a href="/wiki/Basil">Basil</a></li><li><a href="/wiki/Espresso">Espresso</a></li></ul>')
            form = '<form action="/wiki/search"><input id="search" name="q" placeholder="Search"><button>Go</button></form>'
            return 200, html_t, _page("Encyclopedia", f"<h1>Encyclopedia</h1>{form}{links}"), {}
        if path == "/wiki/search":
            q = (query.get("q") or [""])[0].strip().lower()
            found = [(k, v) for k, v in WIKI.items() if q and (q in v[0].lower() or q in v[1].lower())]
            items = "".join(f'<li><a href="/wiki/{k}">{html.escape(v[0])}</a></li>' for k, v in found)
            return 200, html_t, _page("Search", f"<h1>Search results</h1><ul id='results'>{items}</ul>"), {}
        if path.startswith("/wiki/"):
            key = path[len("/wiki/"):]
            if key in WIKI:
                title, lead, box = WIKI[key]
                if self.drifted and key == "Old_Harbour_Lighthouse":
                    rows = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in box.items() if k != "Built")
                    return 200, html_t, _page(title, f"<h1>{title}</h1><p>{lead} Construction date disputed.</p>"
                                                     f"<dl class='facts'>{rows}</dl>"), {}
                rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in box.items())
                return 200, html_t, _page(title, f"<h1>{title}</h1><table class='infobox'>{rows}</table><p>{lead}</p>"), {}
            return 404, html_t, _page("No article", "<h1>No such article</h1>"), {}
        if path == "/videos":
            items = "".join(f'<li><a href="/videos/watch?v={k}">{html.escape(v[0])}</a></li>' for k, v in VIDEOS.items())
            return 200, html_t, _page("Videos", f"<h1>Videos</h1><ul>{items}</ul>"), {}
        if path == "/videos/watch":
            if self.drifted:
                return 200, html_t, _page("Verify you are human", '<div class="captcha"><h1>Verify you are human</h1>'
                                          "<p>Complete the CAPTCHA to continue.</p></div>"), {}
            vid = (query.get("v") or [""])[0]
            if vid not in VIDEOS:
                return 404, html_t, _page("Video unavailable", "<h1>Video unavailable</h1>"), {}
            title, uploader, date, _ = VIDEOS[vid]
            return 200, html_t, _page(title, f'<h1 id="title">{title}</h1><img src="/img/video/{vid}.png" width="320" '
                                             f'height="180" alt=""><p>Uploaded by <b id="uploader">{uploader}</b> on {date}</p>'), {}
        if path == "/favicon.ico":
            return 200, "image/png", png_bytes(16, 16, (35, 51, 68)), {}
        return 404, "text/plain", b"not found", {}

    # -- server ----------------------------------------------------------------
    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True
            server_version = "demo-web/1"

            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, ctype, data, headers = site.route(self.command, url.path, parse_qs(url.query), body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = _do  # noqa: N815

        return Handler
