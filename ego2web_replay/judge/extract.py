"""The rubric's extractor step (as in Mind2Web 2): the agent's answer turned into the claims the rubric checks.

Before any claim is verified, one model call reads the answer, the URLs it
cites and the rubric's ``llm_claim`` leaves, and returns for each leaf what
the answer states about it (``statement``, null when it says nothing) and the
URLs the answer cites as the source of that statement. The verifier then
checks the extracted statement against the archived text and screenshots of
those URLs only, and a leaf whose statement is null fails without a
verification call: an answer that does not make a claim cannot be credited
for it. Only URLs the answer itself cites are kept (the model cannot add one).

The step runs when the rubric's prompt set has an ``extract`` stage
(``rubric-v2`` on; ``rubric-v1`` verifies claims against the whole answer).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, ValidationError

from .client import ChatResult, Message, ReplyFormatError

if TYPE_CHECKING:
    from .rubric import RubricContext, RubricNode

__all__ = ["ExtractedClaim", "Extraction", "parse_extraction", "extract_claims", "has_extractor"]


class ExtractedClaim(BaseModel):
    """What the answer states for one rubric claim, and where it says it read it."""

    id: str = Field(description="The rubric leaf's id.")
    statement: str | None = Field(default=None, description="The answer's statement bearing on the claim; "
                                                            "None when the answer says nothing about it.")
    urls: list[str] = Field(default_factory=list, description="URLs the answer cites for the statement.")


class Extraction(BaseModel):
    claims: list[ExtractedClaim]


def parse_extraction(text: str) -> Extraction:
    """The JSON object ``{"claims": [{"id", "statement", "urls"}]}``, also inside a fenced block."""
    m = re.search(r"\{.*\}", text, re.S)
    if m is None:
        raise ReplyFormatError('no JSON object with "claims" in the reply')
    try:
        return Extraction.model_validate(json.loads(m.group(0)))
    except (json.JSONDecodeError, ValidationError) as e:
        raise ReplyFormatError(f"the extraction is not the JSON asked for: {str(e).splitlines()[0]}") from None


def has_extractor(ctx: RubricContext) -> bool:
    """Whether the context's prompt set has an ``extract`` stage (and an endpoint to ask)."""
    return ctx.client is not None and ctx.prompts is not None and (ctx.prompts.directory / "extract.txt").is_file()


def extract_claims(leaves: list[RubricNode], ctx: RubricContext) -> ChatResult[Extraction]:
    """Ask the model for each ``llm_claim`` leaf's statement and cited URLs; keep only URLs the answer cites."""
    from .rubric import cited_urls

    assert ctx.client is not None and ctx.prompts is not None
    cited = cited_urls(ctx.answer)
    claims = "\n".join(f"- {n.id}: {n.check.claim}" for n in leaves if n.check is not None)
    system, user = ctx.prompts.render("extract", answer=ctx.answer or "(no answer)",
                                      urls="\n".join(cited) or "(none)", claims=claims)
    result = ctx.client.chat([Message("system", [system]), Message("user", [user])], parse_extraction,
                             stage="extract")
    wanted = {n.id for n in leaves}
    kept = []
    for c in result.parsed.claims:
        if c.id in wanted:
            kept.append(c.model_copy(update={"urls": [u for u in (x.rstrip(".,;:!?") for x in c.urls) if u in cited],
                                             "statement": (c.statement or "").strip() or None}))
    result.parsed = Extraction(claims=kept)
    return result
