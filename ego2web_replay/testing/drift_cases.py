"""The labelled drift cases (``benchmarks/drift_cases.yaml``) and how the change classifier fares on them.

:func:`load_drift_cases` turns each case into two :class:`~ego2web_replay.tracking.changes.Response`
objects (HTML given as ``title`` + ``main`` is wrapped in its site's layout: navigation, a CSRF meta
tag, a footer) and the site's not-found page text; :func:`evaluate` classifies every case and gives
precision and recall per label, the confusion counts and the cases it got wrong.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import Ego2WebError
from ..tracking.changes import Response, classify, normalize_text
from ..tracking.pagefacts import page_facts

__all__ = ["DriftCase", "Evaluation", "LABELS", "load_drift_cases", "evaluate"]

LABELS = ("unchanged", "changed", "gone", "blocked")
_LAYOUTS = {
    "shop": ("<header><a href='/'>Demo Shop</a> <a href='/shop'>Shop</a> <a href='/cart'>Cart</a>"
             "<form action='/search'><input name=q placeholder='Search the shop'><button>Search</button></form></header>",
             "<footer><p>Demo Shop Ltd. Prices include VAT.</p><a href='/help'>Help</a></footer>"),
    "wiki": ("<header><a href='/'>Encyclopedia</a> <a href='/wiki/Main_Page'>Main page</a>"
             "<form action='/wiki/search'><input name=q><button>Go</button></form></header>",
             "<footer><p>Text is available under a free licence.</p></footer>"),
    "news": ("<header><a href='/'>Daily Harbour</a> <a href='/markets'>Markets</a> <a href='/weather'>Weather</a></header>",
             "<footer><p>Daily Harbour, since 1921.</p></footer>"),
}


@dataclass
class DriftCase:
    """One labelled case: a resource as frozen and as live."""

    id: str
    kind: str
    label: str
    old: Response
    new: Response
    not_found: list[str] = field(default_factory=list)


def _body(side: dict[str, Any]) -> tuple[str, bytes]:
    if "body" in side:
        return side.get("type", "text/html"), str(side["body"]).encode()
    layout = _LAYOUTS[side.get("site", "shop")]
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(side['title'])}</title>"
           "<meta name='csrf-token' content='k2j3h4g5f6d7s8a9'></head><body>"
           f"{layout[0]}<main>{side['main']}</main>{layout[1]}</body></html>")
    return "text/html; charset=utf-8", doc.encode()


def _response(url: str, side: dict[str, Any]) -> Response:
    ctype, body = _body(side)
    headers = (("Content-Type", ctype), *((str(k), str(v)) for k, v in (side.get("headers") or {}).items()))
    return Response(url=url, status=int(side.get("status", 200)), headers=headers, body=body)


def load_drift_cases(path: Path) -> list[DriftCase]:
    """Read the labelled set; a malformed case is one clear error naming it."""
    try:
        items = yaml.safe_load(Path(path).read_text("utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise Ego2WebError(f"{path}: cannot read the drift cases ({e})") from None
    cases = []
    for i, item in enumerate(items or []):
        try:
            if item["label"] not in LABELS:
                raise ValueError(f"label {item['label']!r} is not one of {', '.join(LABELS)}")
            nf = []
            if item.get("not_found"):
                _, body = _body(item["not_found"])
                nf.append(normalize_text(page_facts(body.decode()).text))
            cases.append(DriftCase(id=item["id"], kind=item["kind"], label=item["label"],
                                   old=_response(item["url"], item["old"]), new=_response(item["url"], item["new"]),
                                   not_found=nf))
        except (KeyError, TypeError, ValueError) as e:
            raise Ego2WebError(f"{path}: case {item.get('id', i) if isinstance(item, dict) else i}: {e}") from None
    return cases


@dataclass
class Evaluation:
    """Per label: precision, recall and support; the confusion counts; the cases classified wrongly."""

    cases: int
    correct: int
    per_label: dict[str, tuple[float | None, float | None, int]]
    confusion: dict[tuple[str, str], int]
    mistakes: list[tuple[str, str, str, str]]  # (id, kind, label, predicted + detail)

    @property
    def accuracy(self) -> float:
        return self.correct / self.cases if self.cases else 0.0


def evaluate(cases: list[DriftCase]) -> Evaluation:
    """Classify every case and compare with its label."""
    confusion: dict[tuple[str, str], int] = {}
    mistakes = []
    for c in cases:
        got = classify(c.old, c.new, not_found=c.not_found)
        confusion[(c.label, got.status)] = confusion.get((c.label, got.status), 0) + 1
        if got.status != c.label:
            mistakes.append((c.id, c.kind, c.label, f"{got.status}: {got.detail}"))
    per_label = {}
    for label in LABELS:
        tp = confusion.get((label, label), 0)
        predicted = sum(n for (_, p), n in confusion.items() if p == label)
        actual = sum(n for (a, _), n in confusion.items() if a == label)
        per_label[label] = (tp / predicted if predicted else None, tp / actual if actual else None, actual)
    correct = sum(n for (a, p), n in confusion.items() if a == p)
    return Evaluation(cases=len(cases), correct=correct, per_label=per_label, confusion=confusion, mistakes=mistakes)
