"""The subresources a fetched page asks for before any script runs, for ``record --fanout``.

A page the fan-out fetched is replayed later in a real browser, which loads what its markup names:
stylesheets, scripts, images, icons, a video's poster, and the fonts and images its stylesheets name
in turn. :func:`page_assets` reads them from the HTML (``<link rel=stylesheet|icon|preload|
modulepreload|manifest href>``, ``<script src>``, ``<img src>`` and the first ``srcset`` candidate,
``<source src|srcset>`` inside ``<picture>``, ``<video poster>``, ``<input type=image src>``), and
:func:`css_assets` reads a stylesheet's ``url(...)`` and ``@import`` references. Each comes with the
``Sec-Fetch-Dest`` a browser would send, so the capture is made with the request a replay will see.
Media (``<video src>``, ``<audio src>``) is left out: it is fetched in ranges, by the player.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

__all__ = ["page_assets", "css_assets", "ACCEPT"]

#: ``Accept`` per ``Sec-Fetch-Dest``, as Chromium sends it.
ACCEPT = {
    "style": "text/css,*/*;q=0.1",
    "script": "*/*",
    "image": "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8",
    "font": "*/*",
    "manifest": "*/*",
}

_LINK_RELS = {"stylesheet": "style", "icon": "image", "shortcut": "image", "apple-touch-icon": "image",
              "manifest": "manifest", "modulepreload": "script"}
_PRELOAD_AS = {"style": "style", "script": "script", "image": "image", "font": "font"}
_CSS_REF = re.compile(r"""@import\s+(?:url\(\s*)?["']?([^"')\s;]+)|url\(\s*["']?([^"')]+?)["']?\s*\)""", re.I)


def _first_srcset(value: str) -> str:
    """The first candidate URL of a ``srcset`` (the one a plain display picks when no size matches)."""
    first = value.split(",")[0].strip()
    return first.split()[0] if first else ""


class _Assets(HTMLParser):
    def __init__(self, base: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.found: list[tuple[str, str]] = []  # (absolute URL, Sec-Fetch-Dest)
        self._picture = 0

    def _add(self, ref: str, dest: str) -> None:
        ref = ref.strip()
        if ref and not ref.startswith(("data:", "blob:", "javascript:", "#")):
            self.found.append((urljoin(self.base, ref), dest))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "base" and a.get("href"):
            self.base = urljoin(self.base, a["href"])
        elif tag == "link" and a.get("href"):
            rels = a.get("rel", "").lower().split()
            dest = next((_LINK_RELS[r] for r in rels if r in _LINK_RELS), None)
            if "preload" in rels:
                dest = _PRELOAD_AS.get(a.get("as", "").lower())
            if dest:
                self._add(a["href"], dest)
        elif tag == "script" and a.get("src"):
            self._add(a["src"], "script")
        elif tag == "img":
            if a.get("src"):
                self._add(a["src"], "image")
            elif a.get("srcset"):
                self._add(_first_srcset(a["srcset"]), "image")
        elif tag == "picture":
            self._picture += 1
        elif tag == "source" and self._picture and (a.get("srcset") or a.get("src")):
            self._add(_first_srcset(a.get("srcset") or a.get("src", "")), "image")
        elif tag == "video" and a.get("poster"):
            self._add(a["poster"], "image")
        elif tag == "input" and a.get("type", "").lower() == "image" and a.get("src"):
            self._add(a["src"], "image")

    def handle_endtag(self, tag: str) -> None:
        if tag == "picture" and self._picture:
            self._picture -= 1


def page_assets(html: str, url: str) -> list[tuple[str, str]]:
    """(absolute URL, ``Sec-Fetch-Dest``) of what ``html``'s markup loads, each URL once, in page order,
    fragments dropped."""
    parser = _Assets(url)
    try:
        parser.feed(html)
        parser.close()
    except (AssertionError, ValueError):  # markup the parser gives up on: what was found so far
        pass
    return _once(parser.found)


def css_assets(css: str, url: str) -> list[tuple[str, str]]:
    """(absolute URL, ``Sec-Fetch-Dest``) of a stylesheet's imports (``style``) and ``url()`` references
    (``font`` for font files, else ``image``), each once, in order."""
    out = []
    for m in _CSS_REF.finditer(css):
        imported, ref = m.group(1), m.group(2)
        target = (imported or ref or "").strip()
        if not target or target.startswith(("data:", "#")):
            continue
        dest = "style" if imported else (
            "font" if target.lower().split("?")[0].endswith((".woff", ".woff2", ".ttf", ".otf", ".eot")) else "image")
        out.append((urljoin(url, target), dest))
    return _once(out)


def _once(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for link, dest in found:
        link = link.partition("#")[0]
        if link.startswith(("http://", "https://")):
            seen.setdefault(link, dest)
    return list(seen.items())
