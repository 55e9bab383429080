"""What a change classifier needs to know about one HTML page, read in one pass.

:func:`page_facts` parses a document into its title, headings, the visible
text as lines (one per block element), and the structure a challenge page
has: a CAPTCHA widget (reCAPTCHA, hCaptcha, Turnstile, Arkose, GeeTest, or an
element named ``captcha``/``challenge`` by id, class or form field) and a
sign-in form has (a password field). Text
inside scripts, styles, hidden inputs and advertising containers (by id,
class or ``data-ad*`` attributes) is left out: it is not what a reader of the
page compares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["PageFacts", "page_facts"]

_SKIP = {"script", "style", "noscript", "template"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
_BLOCK = {"p", "div", "li", "tr", "td", "th", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
          "header", "footer", "nav", "main", "table", "ul", "ol", "dl", "form", "br", "figure", "figcaption",
          "blockquote", "pre", "aside", "button", "label", "option", "summary", "caption"}
_AD = re.compile(r"(^|[\s_-])(ad|ads|advert\w*|adsbygoogle|sponsor\w*|ad-?slot|ad-?banner|promo-?ad)($|[\s_-])", re.I)
_WIDGET_SRC = re.compile(r"recaptcha|hcaptcha\.com|challenges\.cloudflare\.com|turnstile|arkoselabs|funcaptcha|"
                         r"geetest|captcha-delivery\.com|perimeterx|px-captcha", re.I)
_WIDGET_NAME = re.compile(r"captcha|challenge|turnstile|px-block", re.I)


@dataclass
class PageFacts:
    """The parts of a page the classifier reads."""

    title: str = ""
    headings: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    widget: str | None = None  # what marks a challenge widget, if any
    links: int = 0
    password: bool = False  # the page has a password field (a sign-in form)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def words(self) -> int:
        return sum(len(line.split()) for line in self.lines)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.facts = PageFacts()
        self._stack: list[tuple[str, bool]] = []  # (tag, hides its content)
        self._hidden = 0
        self._line: list[str] = []
        self._in_title = False
        self._heading: list[str] | None = None

    def _flush(self) -> None:
        text = " ".join(" ".join(self._line).split())
        if text:
            self.facts.lines.append(text)
        self._line = []

    def _widget(self, tag: str, attrs: dict[str, str]) -> None:
        if self.facts.widget:
            return
        if tag in ("script", "iframe") and _WIDGET_SRC.search(attrs.get("src", "")):
            self.facts.widget = f"{tag} from {attrs['src'][:80]}"
        elif "data-sitekey" in attrs:
            self.facts.widget = f"<{tag} data-sitekey>"
        else:
            for name in ("id", "class", "name"):
                value = attrs.get(name, "")
                if value and _WIDGET_NAME.search(value):
                    self.facts.widget = f'<{tag} {name}="{value[:40]}">'
                    return

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        self._widget(tag, attrs)
        if tag == "title":
            self._in_title = True
        if tag == "a":
            self.facts.links += 1
        if tag == "input" and attrs.get("type", "").lower() == "password":
            self.facts.password = True
        if tag in _BLOCK:
            self._flush()
        if tag in ("h1", "h2") and self._heading is None and not self._hidden:
            self._heading = []
        if tag in _VOID:
            return
        hides = tag in _SKIP or _is_ad(attrs)
        self._stack.append((tag, hides))
        self._hidden += hides

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in ("h1", "h2") and self._heading is not None:
            heading = " ".join(" ".join(self._heading).split())
            if heading:
                self.facts.headings.append(heading)
            self._heading = None
        if tag in _BLOCK:
            self._flush()
        for i in range(len(self._stack) - 1, -1, -1):  # close up to the matching open tag
            if self._stack[i][0] == tag:
                for _, hides in self._stack[i:]:
                    self._hidden -= hides
                del self._stack[i:]
                break

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.facts.title += data
            return
        if self._hidden or any(t in ("script", "style") for t, _ in self._stack[-1:]):
            return
        self._line.append(data)
        if self._heading is not None:
            self._heading.append(data)


def _is_ad(attrs: dict[str, str]) -> bool:
    if any(k.startswith("data-ad") for k in attrs):
        return True
    return any(_AD.search(attrs.get(k, "")) for k in ("id", "class"))


def page_facts(html: str) -> PageFacts:
    """Parse one HTML document (never raises on bad markup)."""
    p = _Parser()
    try:
        p.feed(html)
        p.close()
    except (AssertionError, ValueError):  # html.parser gives up on some broken markup
        pass
    p._flush()
    p.facts.title = " ".join(p.facts.title.split())
    return p.facts
