"""The change classifier: what happened to one resource between two captures.

:func:`classify` takes the frozen capture and the live one of the same request
and says, in this order of precedence:

``new``
    the frozen snapshot has no capture of it.
``blocked``
    the live response is an interstitial that stands in for the page: a
    challenge answer (``cf-mitigated``, ``x-amzn-waf-action`` ... headers), an
    access refusal (401/403/407/429/451 where the capture was fine), or a page
    carrying a challenge widget or a challenge title/heading that *replaced*
    the captured content (short, unlike the capture, under another title).
    A page that merely mentions a CAPTCHA in its text is not blocked.
    A sign-in wall is blocked too: a redirect to a sign-in URL (``/login``,
    ``/signin``, ``/accounts/login`` ...) where the capture was a page, or a
    sign-in form (a password field under a sign-in title or heading) that
    replaced the captured content.
``gone``
    404/410 where the capture was not; a soft 404 (a success status whose
    page is like the site's own not-found page, given as ``not_found``, or,
    when that page is not known or is like the capture too, a short page under
    another title, titled or headed "not found", "404", "does not exist" ...,
    where the capture was not);
    a redirect of a deep URL to the home page.
``changed``
    another status, or content that differs beyond volatile parts: for HTML
    the visible-text lines removed and added, for JSON the leaf fields whose
    values changed (old and new), for images their bytes.
``unchanged``
    the same bytes, the same visible text in other markup, or differences
    only in volatile content: timestamps and
    clock times, "N minutes ago", "took N ms", epoch numbers, long random
    tokens, advertising containers, and JSON fields named like timestamps,
    request ids, nonces or CSRF tokens (``volatile_only`` says so).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, Field

from .pagefacts import PageFacts, page_facts

__all__ = ["ChangeStatus", "CHANGE_STATUSES", "Response", "FieldChange", "Change", "classify", "normalize_text",
           "text_similarity", "is_not_found_page"]

ChangeStatus = Literal["unchanged", "changed", "gone", "new", "blocked"]
CHANGE_STATUSES: tuple[str, ...] = ("unchanged", "changed", "gone", "new", "blocked")

_VOLATILE_TEXT = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}(:\d{2})?(\s*[ap]\.?m\.?)?\b", re.I), "<time>"),
    (re.compile(r"\b\d+\s+(second|minute|hour|day|week|month|year)s?\s+ago\b", re.I), "<ago>"),
    (re.compile(r"\b(took|in|after|within)\s+\d+([.,]\d+)?\s*(ms|milliseconds?|µs|s|secs?|seconds?)\b", re.I),
     r"\1 <duration>"),
    (re.compile(r"\(\s*\d+([.,]\d+)?\s*(ms|milliseconds?|s|secs?|seconds?)\s*\)", re.I), "(<duration>)"),
    (re.compile(r"\b1[5-9]\d{8}(\d{3})?\b"), "<epoch>"),
    (re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{24,}\b"), "<token>"),
]
_VOLATILE_KEY = re.compile(
    r"^(_|t|ts|time|timestamp|now|datetime|date_?time|server_?time|server_?date|generated(_?at)?|rendered(_?at)?|"
    r"fetched_?at|served_?at|updated_?at|last_?updated|took|took_?ms|elapsed\w*|duration_?ms|latency\w*|"
    r"request_?id|req_?id|trace_?id|span_?id|correlation_?id|nonce|csrf\w*|xsrf\w*|\w*_?token|sid|session\w*|"
    r"etag|expires(_?at)?|ttl|cache\w*|ads?|advert\w*|sponsored\w*|impression_?id)$", re.I)
_CHALLENGE_HEADERS = ("cf-mitigated", "x-amzn-waf-action", "x-datadome", "x-px-block", "x-captcha")
_DENIED = {401, 403, 407, 429, 451}
_CHALLENGE_PHRASE = re.compile(
    r"captcha|verify (that )?you are (a )?human|are you a (robot|human)|not a robot|access denied|"
    r"access to this page has been denied|attention required|just a moment|checking your browser|security check|"
    r"unusual traffic|request blocked|pardon our interruption|bot (check|detection|protection)|please verify", re.I)
_SIGN_IN_PATH = re.compile(r"(^|/)(log-?in|log-?on|sign-?in|sign_in|signon|sso|session/new|sessions/new|"
                           r"auth/(login|signin)|oauth2?/authorize|accounts?/(login|signin)|users?/(login|sign_in))"
                           r"(/|$|\.\w+$)", re.I)
_SIGN_IN_PHRASE = re.compile(r"\b(log ?in|sign ?in|log on|sign on|authenticat\w*|password)\b", re.I)
_NOT_FOUND_PHRASE = re.compile(
    r"^\W*(error\W*)?404\b|\bnot found\b|\bcould ?n[o']t (be )?(find|found)\b|\bcan(not|'t) (be )?(find|found)\b|"
    r"\bdoes ?n[o']t exist\b|\bno longer (available|exists)\b|\bno (such )?(page|article|item|product) "
    r"(called|named|exists)\b", re.I)
_AD_URL = re.compile(r"/ads?/|doubleclick|adserver|adsystem|googlesyndication|/banners?/|[?&]ad(id|unit)=", re.I)
_SHORT_PAGE_WORDS = 200
_LIKE = 0.8


@dataclass(frozen=True)
class Response:
    """One archived response, body already content-decoded."""

    url: str
    status: int | None
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    mime: str = ""

    def header(self, name: str) -> str | None:
        lower = name.lower()
        return next((v for k, v in self.headers if k.lower() == lower), None)

    @property
    def media(self) -> str:
        return (self.header("content-type") or self.mime or "").split(";")[0].strip().lower()

    @property
    def is_html(self) -> bool:
        return "html" in self.media or (not self.media and self.body.lstrip()[:15].lower().startswith(b"<!doctype html"))

    @property
    def is_json(self) -> bool:
        return "json" in self.media

    @property
    def ok(self) -> bool:
        return self.status is not None and self.status < 400

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class FieldChange(BaseModel):
    """One JSON leaf whose value changed (``None`` on a side where it is absent)."""

    path: str
    old: Any = None
    new: Any = None

    def describe(self) -> str:
        return f"{self.path}: {json.dumps(self.old)} -> {json.dumps(self.new)}"


class Change(BaseModel):
    """How one resource changed, with the evidence."""

    status: ChangeStatus
    detail: str = Field(default="", description="One line a person reads.")
    removed: list[str] = Field(default_factory=list, description="Visible-text lines only in the frozen capture.")
    added: list[str] = Field(default_factory=list, description="Visible-text lines only in the live response.")
    fields: list[FieldChange] = Field(default_factory=list, description="JSON fields whose values changed.")
    volatile_only: bool = Field(default=False, description="Bytes differ, but only in volatile content.")


def normalize_text(text: str) -> str:
    """``text`` with its volatile parts (times, durations, epochs, tokens) replaced by placeholders."""
    for pattern, repl in _VOLATILE_TEXT:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def text_similarity(a: str, b: str) -> float:
    """Similarity 0..1 of two texts, word by word."""
    wa, wb = a.split(), b.split()
    if not wa and not wb:
        return 1.0
    return difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio()


def _lines(facts: PageFacts) -> list[str]:
    return ([f"title: {facts.title}"] if facts.title else []) + facts.lines


def is_not_found_page(text: str, not_found: Sequence[str]) -> bool:
    """Whether a page's normalised visible text is like one of the site's not-found pages."""
    return any(text_similarity(text, nf) >= _LIKE for nf in not_found if nf)


def _challenge_signal(facts: PageFacts) -> str | None:
    if facts.widget:
        return f"challenge widget {facts.widget}"
    for where in [facts.title, *facts.headings[:2]]:
        m = _CHALLENGE_PHRASE.search(where)
        if m:
            return f'challenge heading "{where[:60]}"'
    return None


def _interstitial(old: Response, new: Response, old_facts: PageFacts | None, new_facts: PageFacts | None) -> str | None:
    for name in _CHALLENGE_HEADERS:
        value = new.header(name)
        if value and not old.header(name):
            return f"challenge response ({name}: {value[:40]})"
    if old.ok and new.status in _DENIED:
        signal = _challenge_signal(new_facts) if new_facts else None
        return f"access refused: HTTP {new.status}" + (f", {signal}" if signal else "")
    if new_facts is None:
        return None
    signal = _challenge_signal(new_facts)
    if signal is None or (old_facts is not None and _challenge_signal(old_facts) is not None):
        return None
    if new.status == 503:
        return f"challenge page (HTTP 503, {signal})"
    if old_facts is None:  # a JSON or image request answered with a challenge page
        return f"challenge page instead of {old.media or 'the resource'} ({signal})"
    replaced = (new_facts.words <= _SHORT_PAGE_WORDS and new_facts.title != old_facts.title
                and text_similarity(normalize_text(old_facts.text), normalize_text(new_facts.text)) < 0.5)
    return f"interstitial replaced the page ({signal})" if replaced else None


def _sign_in_wall(old: Response, new: Response, old_facts: PageFacts | None, new_facts: PageFacts | None) -> str | None:
    """A sign-in wall in place of a captured page: a redirect to a sign-in URL, or a sign-in form that replaced it."""
    if not (old.ok and old.status is not None and old.status < 300):
        return None
    if new.status in (301, 302, 303, 307, 308):
        location = new.header("location") or ""
        target = urlsplit(urljoin(new.url, location))
        if location and _SIGN_IN_PATH.search(target.path) and target.path != urlsplit(old.url).path:
            return f"sign-in wall: redirected to {location[:100]}"
        return None
    if new_facts is None or not new_facts.password or (old_facts is not None and old_facts.password):
        return None
    where = next((w for w in [new_facts.title, *new_facts.headings[:2]] if _SIGN_IN_PHRASE.search(w)), None)
    if where is None or new_facts.words > _SHORT_PAGE_WORDS:
        return None
    if old_facts is not None and (new_facts.title == old_facts.title or text_similarity(
            normalize_text(old_facts.text), normalize_text(new_facts.text)) >= 0.5):
        return None
    return f'sign-in wall: a sign-in form replaced the page ("{where[:60]}")'


def _soft_404(old_facts: PageFacts, new_facts: PageFacts, not_found: Sequence[str]) -> str | None:
    """What makes the live page a not-found page the capture was not: the site's own not-found page, or,
    where that page is unknown or cannot tell (the capture is like it too: a site whose layout outweighs
    its content), a short page under another title headed "not found"."""
    if not_found:
        old_like = is_not_found_page(normalize_text(old_facts.text), not_found)
        if not old_like and is_not_found_page(normalize_text(new_facts.text), not_found):
            return "the site's not-found page"
        if not old_like:
            return None
    heading = _not_found_heading(new_facts)
    if (heading and new_facts.words <= _SHORT_PAGE_WORDS and new_facts.title != old_facts.title
            and _not_found_heading(old_facts) is None):
        return f'a not-found page ("{heading[:60]}")'
    return None


def _not_found_heading(facts: PageFacts) -> str | None:
    return next((w for w in [facts.title, *facts.headings[:2]] if w and _NOT_FOUND_PHRASE.search(w)), None)


def _json_leaves(node: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if not _VOLATILE_KEY.match(str(k)):
                _json_leaves(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _json_leaves(v, f"{path}[{i}]", out)
    else:
        out[path or "$"] = normalize_text(node) if isinstance(node, str) else node


def _json_change(old: Response, new: Response) -> Change | None:
    try:
        a, b = json.loads(old.body), json.loads(new.body)
    except (ValueError, UnicodeDecodeError):
        return None
    la: dict[str, Any] = {}
    lb: dict[str, Any] = {}
    _json_leaves(a, "", la)
    _json_leaves(b, "", lb)
    fields = [FieldChange(path=k, old=_original(a, k, la.get(k)), new=_original(b, k, lb.get(k)))
              for k in sorted(la.keys() | lb.keys()) if la.get(k, ...) != lb.get(k, ...)]
    if not fields:
        return Change(status="unchanged", volatile_only=True, detail="only volatile JSON fields differ")
    shown = "; ".join(f.describe() for f in fields[:3]) + (f" (+{len(fields) - 3} more)" if len(fields) > 3 else "")
    return Change(status="changed", fields=fields, detail=shown[:300])


def _original(root: Any, path: str, fallback: Any) -> Any:
    """The value at a leaf path as it is in the document (not normalised)."""
    node = root
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        try:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return fallback
    return node


def _quote(lines: list[str], sign: str) -> str:
    return " ".join(f'{sign}"{line[:60]}"' for line in lines[:2]) + (f" {sign}{len(lines) - 2} more" if len(lines) > 2 else "")


def _text_change(old_lines: list[str], new_lines: list[str]) -> Change:
    na, nb = [normalize_text(x) for x in old_lines], [normalize_text(x) for x in new_lines]
    if na == nb:
        return Change(status="unchanged", volatile_only=True, detail="no visible difference beyond volatile content")
    if " ".join(na).split() == " ".join(nb).split():  # the same words, broken into other blocks
        return Change(status="unchanged", detail="markup only: the same visible text in other elements")
    removed: list[str] = []
    added: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, na, nb, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            removed.extend(old_lines[i1:i2])
        if op in ("replace", "insert"):
            added.extend(new_lines[j1:j2])
    detail = "text: " + " ".join(x for x in (_quote(removed, "-"), _quote(added, "+")) if x)
    return Change(status="changed", removed=removed, added=added, detail=detail[:300])


def _redirected_home(old: Response, new: Response) -> bool:
    if not (new.status and 300 <= new.status < 400 and old.status == 200):
        return False
    location = new.header("location")
    if not location:
        return False
    target = urlsplit(urljoin(new.url, location))
    return target.path in ("", "/") and urlsplit(old.url).path not in ("", "/")


def classify(old: Response | None, new: Response | None, *, not_found: Sequence[str] = ()) -> Change:
    """Classify one resource (see the module docstring); ``not_found`` holds the normalised visible
    texts of the site's own not-found pages, for soft-404 recognition."""
    if old is None:
        return Change(status="new", detail="not in the frozen snapshot")
    if new is None:
        return Change(status="gone", detail="no live response")
    old_facts = page_facts(old.text()) if old.is_html else None
    new_facts = page_facts(new.text()) if new.is_html else None
    block = _interstitial(old, new, old_facts, new_facts)
    block = block or _sign_in_wall(old, new, old_facts, new_facts)
    if block:
        return Change(status="blocked", detail=block, removed=_lines(old_facts) if old_facts else [],
                      added=_lines(new_facts) if new_facts else [])
    if new.status in (404, 410) and old.status not in (404, 410):
        return Change(status="gone", detail=f"HTTP {old.status} -> {new.status}",
                      removed=_lines(old_facts) if old_facts else [], added=_lines(new_facts) if new_facts else [])
    if _redirected_home(old, new):
        return Change(status="gone", detail=f"redirected to the home page ({new.header('location')})")
    if old.body == new.body and old.status == new.status:
        return Change(status="unchanged")
    if old_facts is not None and new_facts is not None and old.ok and new.ok:
        soft = _soft_404(old_facts, new_facts, not_found)
        if soft:
            return Change(status="gone", detail=f"soft 404: HTTP {new.status} with {soft}", removed=_lines(old_facts),
                          added=_lines(new_facts))
    change = _content_change(old, new, old_facts, new_facts)
    if old.status != new.status:
        status_line = f"HTTP {old.status} -> {new.status}"
        return change.model_copy(update={"status": "changed", "volatile_only": False,
                                         "detail": status_line + ("; " + change.detail if change.status == "changed"
                                                                  else "")})
    return change


def _content_change(old: Response, new: Response, old_facts: PageFacts | None, new_facts: PageFacts | None) -> Change:
    if old.body == new.body:
        return Change(status="unchanged")
    if old_facts is not None and new_facts is not None:
        return _text_change(_lines(old_facts), _lines(new_facts))
    if old.is_json or new.is_json:
        change = _json_change(old, new)
        if change is not None:
            return change
    if old.media.startswith("image/") or new.media.startswith("image/"):
        if _AD_URL.search(new.url):
            return Change(status="unchanged", volatile_only=True, detail="advertising image rotated")
        return Change(status="changed", detail=f"image bytes differ ({len(old.body)} -> {len(new.body)} bytes)")
    if old.media.startswith("text/") or "javascript" in old.media or "xml" in old.media:
        return _text_change(old.text().splitlines(), new.text().splitlines())
    return Change(status="changed", detail=f"body differs ({len(old.body)} -> {len(new.body)} bytes)")
