"""The rubric's claim verifier: one ``llm_claim`` leaf checked against the pages the answer cites for it.

The rules (learned from Mind2Web 2's evaluator, written here as data-driven checks):

- **Pages as the agent saw them.** A cited page the episode rendered is read
  as rendered (``pages/step-NNN.json``, the last render of that URL); only a
  cited page the agent never opened is read from the archive, and the prompt
  part and the verdict say so (:class:`~.pages.EpisodePages`).
- **No cited URL, no credit.** A claim checked against its sources
  (``source: cited``, the default) that the answer cites no URL for fails
  without a model call (missing attribution), as Mind2Web 2's judges gate a
  sourced claim on a critical "URL provided" node; a claim none of whose
  cited pages was rendered, archived or screenshotted fails the same way (the
  page could not be retrieved). A claim marked ``source: none`` is a plain check of the
  statement against the answer, with no page (their verification without
  sources), through the prompt stage ``simple``.
- **Whole pages, in overlapping parts.** Each page is read in parts of at most
  ``page_chars`` characters; consecutive parts overlap by ``page_overlap``
  characters, so any passage up to that long lies whole inside one part and
  no fact is cut in two. The claim passes on the first part that supports it.
- **Majority votes.** Each question is asked ``votes`` times (odd; default 3,
  as in Mind2Web 2's code), each a separate sample (its own seed and cache
  key), stopping as soon as one side has a majority.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import JudgeError
from .client import ChatResult, Message
from .prompts import ClaimCheck, parse_claim

if TYPE_CHECKING:
    from .pages import PageText
    from .rubric import RubricContext, RubricNode

__all__ = ["RUBRIC_VOTES", "PAGE_CHARS", "PAGE_OVERLAP", "verify_claim", "split_text", "majority", "check_votes"]

RUBRIC_VOTES = 3  # Mind2Web 2's verifier: majority vote over 3 trials by default
PAGE_CHARS = 6000
PAGE_OVERLAP = 1000


def check_votes(votes: int) -> int:
    """``votes`` when it is an odd number of at least 1; JudgeError otherwise."""
    if votes < 1 or votes % 2 == 0:
        raise JudgeError(f"votes must be an odd number of at least 1 (a majority needs one), not {votes}")
    return votes


def split_text(text: str, size: int, overlap: int) -> list[str]:
    """``text`` in parts of at most ``size`` characters, each starting ``overlap`` characters (or a few more,
    back to a space) before the previous one ended, so every passage of up to ``overlap`` characters lies
    whole inside some part. A part ends at the last space or line break it holds past its overlap, where
    there is one, so words are not cut at its end."""
    size = max(1, size)
    overlap = max(0, min(overlap, size - 1))
    if len(text) <= size:
        return [text]
    parts: list[str] = []
    start = 0
    while True:
        end = min(start + size, len(text))
        if end < len(text):
            cut = max(text.rfind(" ", start + overlap + 1, end), text.rfind("\n", start + overlap + 1, end))
            if cut > start + overlap:
                end = cut + 1
        parts.append(text[start:end])
        if end >= len(text):
            return parts
        nxt = end - overlap  # any passage of <= overlap chars that runs past `end` starts at or after nxt
        space = text.rfind(" ", max(start + 1, nxt - 80), nxt)
        start = space + 1 if space >= 0 and space + 1 > start else max(nxt, start + 1)


def majority(ask: Callable[[int], ChatResult[ClaimCheck]], votes: int) -> tuple[bool, list[ChatResult[ClaimCheck]]]:
    """Ask up to ``votes`` samples (``ask(k)`` for k = 0, 1, ...), stopping once one side has a majority;
    (the majority's verdict, every result in order)."""
    need = votes // 2 + 1
    results: list[ChatResult[ClaimCheck]] = []
    yes = no = 0
    for k in range(votes):
        result = ask(k)
        results.append(result)
        yes, no = (yes + 1, no) if result.parsed.supported else (yes, no + 1)
        if yes >= need or no >= need:
            break
    return yes >= need, results


def _parts(reads: list[tuple[str, PageText | None]], size: int, overlap: int) -> list[str]:
    """Prompt parts: every read page split by :func:`split_text`, each headed by its URL and origin;
    the pages that could not be read are named under every part."""
    parts: list[str] = []
    missing = [f"--- {u} ---\n(neither rendered by the episode nor archived)" for u, p in reads if p is None]
    for u, page in reads:
        if page is None:
            continue
        chunks = split_text(page.text, size, overlap)
        for i, chunk in enumerate(chunks):
            parts.append(f"--- {u} ({page.note}; part {i + 1} of {len(chunks)}) ---\n{chunk}")
    if not parts:  # no text of any cited page: the screenshots are all there is
        return ["\n".join(missing)]
    return [p + ("\n" + "\n".join(missing) if missing else "") for p in parts]


def _verdict(ok: bool, results: list[ChatResult[ClaimCheck]], votes: int) -> str:
    deciding = next((r for r in results if r.parsed.supported == ok), results[-1])
    reason = deciding.parsed.reason or ("supported" if ok else "unsupported")
    if votes > 1:
        agree = sum(1 for r in results if r.parsed.supported == ok)
        reason += f" ({agree} of {len(results)} votes)"
    return reason


def verify_claim(node: RubricNode, ctx: RubricContext) -> tuple[bool, str]:
    """Verify one ``llm_claim`` leaf; (passed, detail). Its calls go to ``ctx.results[node.id]``."""
    c = node.check
    assert c is not None and c.claim
    if ctx.client is None or ctx.prompts is None:
        raise JudgeError("the rubric has LLM-verified claims but no judge endpoint is configured: "
                         "pass --base-url/--model (or set OPENAI_BASE_URL)")
    client, prompts = ctx.client, ctx.prompts
    urls = [c.url] if c.url else ctx.cited
    statement = ctx.answer or "(no answer)"
    if ctx.extracted is not None:
        got = ctx.extracted.get(node.id)
        if got is None or got.statement is None:
            return False, "the answer states nothing for this claim (extractor)"
        statement = got.statement
        urls = [c.url] if c.url else got.urls
    calls: list[ChatResult[ClaimCheck]] = []
    ctx.results[node.id] = calls
    if c.source == "none":  # a plain check of the statement, no page (Mind2Web 2's verification without sources)
        if not (prompts.directory / "simple.txt").is_file():
            raise JudgeError(f"prompt set {prompts.version} has no 'simple' stage for claims with source: none; "
                             "use --prompt-version v3")
        system, user = prompts.render("simple", claim=c.claim, answer=ctx.answer or "(no answer)",
                                      statement=statement)
        ok, got_calls = majority(lambda k: client.chat([Message("system", [system]), Message("user", [user])],
                                                       parse_claim, stage=f"claim:{node.id}", sample=k), ctx.votes)
        calls.extend(got_calls)
        return ok, _verdict(ok, calls, ctx.votes) + " (checked against the answer alone: source none)"
    if not urls:
        return False, "no URL is cited for this claim: missing attribution, so it is not verified"
    reads = [(u, ctx.read_page(u, node.id)) for u in urls]
    read = "; ".join(f"{u}: {p.note if p else 'neither rendered nor archived'}" for u, p in reads)
    images = ctx.screenshots_of(urls)
    if all(p is None for _, p in reads) and not images:
        return False, f"no cited page could be read ({read}), so the claim is not verified"
    shots = (f"Screenshots ({len(images)} attached, in order): " + "; ".join(i.label for i in images)
             if images else "Screenshots: none of these pages.")

    def ask(part: str) -> tuple[bool, list[ChatResult[ClaimCheck]]]:
        system, user = prompts.render("claim", claim=c.claim, answer=ctx.answer or "(no answer)", pages=part,
                                      statement=statement, screenshots=shots)
        messages = [Message("system", [system]), Message("user", [user, *images])]
        return majority(lambda k: client.chat(messages, parse_claim, stage=f"claim:{node.id}", sample=k), ctx.votes)

    ok, last = False, list[ChatResult[ClaimCheck]]()
    for part in _parts(reads, ctx.page_chars, ctx.page_overlap):  # the whole of every cited page, part by part
        ok, last = ask(part)
        calls.extend(last)
        if ok:
            break
    return ok, f"{_verdict(ok, last, ctx.votes)} [pages read: {read}]"
