"""Rubric trees (Mind2Web 2 style), written as data per task, and their evaluation.

A rubric is a tree of nodes. A node is either a leaf with a ``check`` or has
``children`` evaluated ``parallel`` (all of them, independently) or
``sequential`` (in order; after the first child that does not pass, the rest
are skipped, and so are their LLM calls). A node's score:

- a leaf scores 1 when its check passes, else 0;
- a parent scores 0 when any *critical* child does not pass; otherwise the
  mean of its non-critical children's scores (1 when it has none);
- a node *passes* when its score is 1; a skipped node scores 0;
- a critical node's children must all be critical (as in Mind2Web 2's
  verification tree: a gate cannot pass partly); a rubric with a critical node
  that has a non-critical child is rejected when it is loaded.

The episode succeeds when the root passes; the root's score is the partial
completion. Leaf checks are deterministic (text or URL matches against the
answer, the visited URLs or the pages) or ``llm_claim`` (a claim verified by
the judge model, :mod:`.claims`: against the whole text of the pages the answer
cites, in overlapping model-sized parts, with majority votes, and the
screenshots the episode took of those pages: at most ``max_screenshots`` per
claim, default :data:`RUBRIC_MAX_SCREENSHOTS`, ``judge --max-screenshots``).
With a prompt set that has an ``extract`` stage (``rubric-v2`` and
``rubric-v3``, the default) an extractor call first turns the answer into each
claim's statement and cited URLs (:mod:`.extract`), and each claim is verified
from those.

Pages are read as the episode rendered them (:class:`~.pages.EpisodePages`: the
text after scripts ran, kept after every step); only a cited page the agent
never opened is read from the episode's archive, and the node's detail and the
verdict's ``rubric_pages`` entry say which was read. Never the live web.

Check types: ``answer_contains`` (text), ``answer_regex`` (pattern),
``url_visited`` (pattern), ``final_url`` (pattern), ``page_contains`` (text,
optional url: else any visited page; every render of the page counts),
``cited_url`` (optional pattern and text: some URL cited in the answer was
rendered or is archived, matches and contains the text), ``llm_claim`` (claim,
optional url, optional ``source``: ``cited``, the default, or ``none`` for a
check against the answer alone).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import yaml  # type: ignore[import-untyped,unused-ignore]
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import JudgeError
from .claims import PAGE_CHARS, PAGE_OVERLAP, RUBRIC_VOTES, check_votes, verify_claim
from .client import ChatResult, Image, LLMClient
from .extract import ExtractedClaim, Extraction, extract_claims, has_extractor
from .pages import EpisodePages, PageSource, PageText
from .prompts import ClaimCheck, PromptSet
from .rule import normalize_text

__all__ = ["RUBRIC_MAX_SCREENSHOTS", "RUBRIC_VOTES", "RubricCheck", "RubricNode", "Rubric", "NodeResult", "RubricResult",
           "RubricContext", "load_rubric", "evaluate_rubric", "cited_urls", "url_key"]

CheckType = Literal["answer_contains", "answer_regex", "url_visited", "final_url", "page_contains",
                    "cited_url", "llm_claim"]
RUBRIC_MAX_SCREENSHOTS = 3  # screenshots sent with one claim, unless judge --max-screenshots says otherwise
_NEEDS = {"answer_contains": "text", "answer_regex": "pattern", "url_visited": "pattern",
          "final_url": "pattern", "page_contains": "text", "llm_claim": "claim"}


class RubricCheck(BaseModel):
    """What a leaf checks."""

    model_config = ConfigDict(extra="forbid")

    type: CheckType
    text: str | None = Field(default=None, description="Text to find (normalised, case-insensitive).")
    pattern: str | None = Field(default=None, description="Regex to search for.")
    url: str | None = Field(default=None, description="page_contains/llm_claim: the page to use.")
    claim: str | None = Field(default=None, description="llm_claim: the claim to verify.")
    source: Literal["cited", "none"] = Field(
        default="cited", description="llm_claim: 'cited' verifies against the pages cited for it (no cited URL: "
                                     "fails, missing attribution); 'none' checks it against the answer alone.")

    @model_validator(mode="after")
    def _fields(self) -> RubricCheck:
        need = _NEEDS.get(self.type)
        if need and not getattr(self, need):
            raise ValueError(f"a {self.type} check needs {need!r}")
        if self.source != "cited" and (self.type != "llm_claim" or self.url):
            raise ValueError("'source: none' is for an llm_claim without 'url' (a check against the answer alone)")
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as e:
                raise ValueError(f"bad pattern {self.pattern!r}: {e}") from None
        return self


class RubricNode(BaseModel):
    """A node of the tree: a leaf with ``check`` or a parent with ``children``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    description: str = ""
    critical: bool = False
    strategy: Literal["parallel", "sequential"] = "parallel"
    check: RubricCheck | None = None
    children: list[RubricNode] = Field(default_factory=list)

    @model_validator(mode="after")
    def _shape(self) -> RubricNode:
        if (self.check is None) == (not self.children):
            raise ValueError(f"node {self.id!r} needs either 'check' or 'children' (not both)")
        soft = [c.id for c in self.children if not c.critical]
        if self.critical and soft:  # Mind2Web 2: every child of a critical node is critical
            raise ValueError(f"critical node {self.id!r} has non-critical children ({', '.join(soft)}); "
                             "mark them critical, or make the node non-critical")
        return self

    def walk(self) -> list[RubricNode]:
        return [self] + [n for c in self.children for n in c.walk()]

    def llm_leaves(self) -> int:
        return sum(1 for n in self.walk() if n.check is not None and n.check.type == "llm_claim")


class Rubric(BaseModel):
    version: int = 1
    root: RubricNode

    @model_validator(mode="before")
    @classmethod
    def _bare_root(cls, data: Any) -> Any:
        if isinstance(data, dict) and "root" not in data and "id" in data:
            return {"root": data}
        return data

    @model_validator(mode="after")
    def _unique(self) -> Rubric:
        seen: set[str] = set()
        for n in self.root.walk():
            if n.id in seen:
                raise ValueError(f"node id {n.id!r} is used twice")
            seen.add(n.id)
        return self


def load_rubric(value: dict[str, Any] | str | Path, base: Path | None = None) -> Rubric:
    """A rubric from a dict, or a JSON/YAML file (relative to ``base``)."""
    where = "inline rubric"
    data: Any = value
    if isinstance(value, str | Path):
        p = Path(value)
        p = p if p.is_absolute() or base is None else base / p
        where = str(p)
        try:
            text = p.read_text("utf-8")
        except FileNotFoundError:
            raise JudgeError(f"{p}: rubric file not found") from None
        try:
            data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as e:
            raise JudgeError(f"{p}: rubric is not valid {'JSON' if p.suffix == '.json' else 'YAML'} "
                             f"({str(e).splitlines()[0]})") from None
    try:
        return Rubric.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise JudgeError(f"{where}: bad rubric at {loc or '(root)'}: {first['msg']}") from None


class NodeResult(BaseModel):
    id: str
    description: str = ""
    critical: bool = False
    status: Literal["passed", "failed", "partial", "skipped"]
    score: float
    detail: str = ""
    children: list[NodeResult] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def walk(self, depth: int = 0) -> list[tuple[int, NodeResult]]:
        return [(depth, self)] + [x for c in self.children for x in c.walk(depth + 1)]


class RubricResult(BaseModel):
    root: NodeResult
    llm_calls: int = Field(description="LLM-verified claims evaluated.")
    skipped_llm_calls: int = Field(description="LLM-verified claims skipped by sequential gates.")
    skipped_nodes: int
    extractor_calls: int = Field(default=0, description="Extractor calls (one per judgment with claims).")
    verification_calls: int = Field(default=0, description="Claim verification calls (parts x votes).")

    @property
    def score(self) -> float:
        return self.root.score

    @property
    def success(self) -> bool:
        return self.root.passed


_URL = re.compile(r"https?://[^\s<>\"'\])]+")


def cited_urls(answer: str) -> list[str]:
    """URLs in the answer, in order, without trailing punctuation, deduplicated."""
    out: list[str] = []
    for u in _URL.findall(answer or ""):
        u = u.rstrip(".,;:!?")
        if u not in out:
            out.append(u)
    return out


def url_key(url: str) -> str:
    """A URL as screenshots are matched to cited URLs: no fragment, no trailing slash, lower-case host."""
    base = url.split("#", 1)[0]
    scheme, sep, rest = base.partition("://")
    host, slash, path = rest.partition("/")
    return (f"{scheme.lower()}{sep}{host.lower()}{slash}{path}" if sep else base).rstrip("/")


class RubricContext:
    """What the leaves look at: the answer, the URLs visited, the pages (an :class:`EpisodePages`: rendered,
    else archived; a plain source is taken as archived), the episode's screenshots (URL → image file, the last
    one taken of each page), an optional LLM, and how claims are read (``page_chars`` a part,
    ``page_overlap`` between parts, ``votes`` per question)."""

    def __init__(self, answer: str | None, visited: list[str], pages: PageSource,
                 client: LLMClient | None = None, prompts: PromptSet | None = None,
                 page_chars: int = PAGE_CHARS, screenshots: dict[str, Path] | None = None,
                 max_screenshots: int = RUBRIC_MAX_SCREENSHOTS, votes: int = RUBRIC_VOTES,
                 page_overlap: int = PAGE_OVERLAP) -> None:
        self.answer = answer or ""
        self.cited = cited_urls(self.answer)
        self.visited = visited
        self.pages = pages if isinstance(pages, EpisodePages) else EpisodePages([], pages, visited)
        self.client = client
        self.prompts = prompts
        self.page_chars = page_chars
        self.page_overlap = page_overlap
        self.votes = check_votes(votes)
        self.screenshots = {url_key(u): p for u, p in (screenshots or {}).items()}
        self.max_screenshots = max_screenshots
        self.results: dict[str, list[ChatResult[ClaimCheck]]] = {}
        self.extraction: ChatResult[Extraction] | None = None
        self.extracted: dict[str, ExtractedClaim] | None = None
        self.page_reads: list[dict[str, str]] = []  # every page a check read: node, url, origin, note

    def _note(self, node: str, url: str, found: list[PageText]) -> None:
        if not found:
            self.page_reads.append({"node": node, "url": url, "origin": "missing",
                                    "note": "neither rendered nor archived"})
        for p in found:
            self.page_reads.append({"node": node, "url": url, "origin": p.origin, "note": p.note})

    def read_page(self, url: str, node: str) -> PageText | None:
        """The page as last rendered, else archived (noted in :attr:`page_reads`)."""
        found = self.pages.read(url)
        self._note(node, url, [found] if found else [])
        return found

    def read_renders(self, url: str, node: str) -> list[PageText]:
        """Every distinct render of the page, else its archived text (noted in :attr:`page_reads`)."""
        found = self.pages.read_all(url)
        self._note(node, url, found)
        return found

    def screenshots_of(self, urls: list[str]) -> list[Image]:
        """The episode's screenshots of these pages (at most ``max_screenshots``), labelled by URL."""
        found: list[Image] = []
        for u in urls:
            path = self.screenshots.get(url_key(u))
            if path is not None and path.is_file() and len(found) < self.max_screenshots:
                found.append(Image.from_path(path, label=f"{u}: {path.name}"))
        return found

    def contains(self, text: str, needle: str) -> bool:
        return normalize_text(needle) in normalize_text(text)


def _leaf(node: RubricNode, ctx: RubricContext) -> tuple[bool, str]:
    c = node.check
    assert c is not None
    if c.type == "answer_contains":
        ok = ctx.contains(ctx.answer, c.text or "")
        return ok, "found in answer" if ok else "not in answer"
    if c.type == "answer_regex":
        ok = re.search(c.pattern or "", ctx.answer, re.I) is not None
        return ok, "answer matches" if ok else "answer does not match"
    if c.type == "url_visited":
        hit = next((u for u in ctx.visited if re.search(c.pattern or "", u)), None)
        return hit is not None, f"visited {hit}" if hit else "no visited URL matches"
    if c.type == "final_url":
        final = ctx.visited[-1] if ctx.visited else ""
        ok = bool(final) and re.search(c.pattern or "", final) is not None
        return ok, f"final URL {final or '(none)'}" + ("" if ok else " does not match")
    if c.type == "page_contains":
        urls = [c.url] if c.url else list(dict.fromkeys(ctx.visited))
        read: list[str] = []
        for u in urls:
            for page in ctx.read_renders(u, node.id):
                if ctx.contains(page.text, c.text or ""):
                    return True, f"found on {u} ({page.note})"
                read.append(f"{u} ({page.note})")
        return False, (f"not found on {len(read)} page(s): {'; '.join(read)}" if read
                       else "page neither rendered by the episode nor archived")
    if c.type == "cited_url":
        if not ctx.cited:
            return False, "the answer cites no URL"
        notes = []
        for u in ctx.cited:
            if c.pattern and not re.search(c.pattern, u):
                continue
            cited = ctx.read_page(u, node.id)
            if cited is None:
                notes.append(f"{u} neither rendered nor archived")
                continue
            if c.text and not ctx.contains(cited.text, c.text):
                notes.append(f"{u} lacks the text ({cited.note})")
                continue
            return True, f"cited {u} was read ({cited.note})" + (" and holds the text" if c.text else "")
        return False, "; ".join(notes) or "no cited URL matches"
    return verify_claim(node, ctx)


def _skipped(node: RubricNode) -> NodeResult:
    return NodeResult(id=node.id, description=node.description, critical=node.critical, status="skipped",
                      score=0.0, detail="skipped: an earlier step of the sequence failed",
                      children=[_skipped(c) for c in node.children])


def _evaluate(node: RubricNode, ctx: RubricContext) -> NodeResult:
    if node.check is not None:
        ok, detail = _leaf(node, ctx)
        return NodeResult(id=node.id, description=node.description, critical=node.critical,
                          status="passed" if ok else "failed", score=1.0 if ok else 0.0, detail=detail)
    results: list[NodeResult]
    if node.strategy == "sequential":
        results = []
        for i, child in enumerate(node.children):
            r = _evaluate(child, ctx)
            results.append(r)
            if not r.passed:
                results.extend(_skipped(c) for c in node.children[i + 1:])
                break
    elif len(node.children) > 1 and node.llm_leaves() and ctx.client is not None:
        with ThreadPoolExecutor(max_workers=len(node.children)) as pool:
            results = list(pool.map(lambda c: _evaluate(c, ctx), node.children))
    else:
        results = [_evaluate(c, ctx) for c in node.children]
    failed_critical = [r.id for r in results if r.critical and not r.passed]
    others = [r.score for r in results if not r.critical]
    if failed_critical:
        score, detail = 0.0, f"critical child failed: {', '.join(failed_critical)}"
    else:
        score = sum(others) / len(others) if others else 1.0
        detail = f"mean of {len(others)} non-critical children" if others else "all critical children passed"
    status: Literal["passed", "partial", "failed"] = \
        "passed" if score >= 1.0 - 1e-9 else ("partial" if score > 0 else "failed")
    return NodeResult(id=node.id, description=node.description, critical=node.critical, status=status,
                      score=round(score, 6), detail=detail, children=results)


def evaluate_rubric(rubric: Rubric, ctx: RubricContext) -> RubricResult:
    """Score an episode against a rubric. Raises JudgeError if a claim needs a missing endpoint."""
    leaves = [n for n in rubric.root.walk() if n.check is not None and n.check.type == "llm_claim"]
    if leaves and has_extractor(ctx):
        ctx.extraction = extract_claims(leaves, ctx)
        ctx.extracted = {c.id: c for c in ctx.extraction.parsed.claims}
    root = _evaluate(rubric.root, ctx)
    by_id = {n.id: n for n in rubric.root.walk()}
    skipped = [r for _, r in root.walk() if r.status == "skipped"]
    skipped_llm = sum(1 for r in skipped if (n := by_id[r.id]).check is not None and n.check.type == "llm_claim")
    return RubricResult(root=root, llm_calls=sum(1 for calls in ctx.results.values() if calls),
                        skipped_llm_calls=skipped_llm, skipped_nodes=len(skipped),
                        extractor_calls=int(ctx.extraction is not None),
                        verification_calls=sum(len(calls) for calls in ctx.results.values()))
