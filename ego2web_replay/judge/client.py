"""The one OpenAI-compatible client every LLM judge uses.

It builds chat requests from text and images, answers from the call cache
when it can, otherwise calls the endpoint, retrying with exponential backoff
(429, 5xx, timeouts, refused connections; :mod:`ego2web_replay.retry`), limits how
many calls run at once, parses each reply into a pydantic model (asking
again, with the format error, when a reply cannot be read) and counts tokens.

Endpoint: ``base_url`` or ``$OPENAI_BASE_URL`` (or the hosted default when only
``$OPENAI_API_KEY`` is set); model: ``model`` or ``$EGO2WEB_JUDGE_MODEL``;
key: ``$OPENAI_API_KEY`` (``EMPTY`` for local servers that want none).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from pydantic import BaseModel, Field

from ..errors import JudgeError
from ..retry import RetriesExhausted, retry_call
from .cache import CallCache, request_key

log = logging.getLogger(__name__)

__all__ = [
    "Image",
    "Message",
    "LLMConfig",
    "LLMClient",
    "ChatResult",
    "EndpointError",
    "ReplyFormatError",
    "resolve_config",
    "HOSTED_BASE_URL",
]

HOSTED_BASE_URL = "https://api.openai.com/v1"


class EndpointError(JudgeError):
    """The judge endpoint is unreachable, refuses us, or keeps failing; stops the whole run."""


class ReplyFormatError(ValueError):
    """A reply does not follow the format the prompt asked for."""


@dataclass(frozen=True)
class Image:
    """Image bytes sent to the model, with a label (its path) for the audit trail."""

    data: bytes
    mime: str = "image/png"
    label: str = ""

    @classmethod
    def from_path(cls, path: str | Path, label: str | None = None) -> Image:
        p = Path(path)
        mime = "image/jpeg" if p.suffix.lower() in (".jpg", ".jpeg") else "image/png"
        return cls(p.read_bytes(), mime, label if label is not None else str(p))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


@dataclass
class Message:
    """A chat message whose content is a list of text parts and images."""

    role: str
    parts: list[str | Image] = field(default_factory=list)

    def to_openai(self) -> dict[str, Any]:
        if all(isinstance(p, str) for p in self.parts):
            return {"role": self.role, "content": "".join(p for p in self.parts if isinstance(p, str))}
        content: list[dict[str, Any]] = []
        for p in self.parts:
            if isinstance(p, str):
                content.append({"type": "text", "text": p})
            else:
                content.append({"type": "image_url", "image_url": {"url": p.data_url()}})
        return {"role": self.role, "content": content}

    def canonical(self) -> dict[str, Any]:
        """The hashed form: images by sha256 (so bytes, not paths, decide the key)."""
        parts: list[dict[str, Any]] = []
        for p in self.parts:
            if isinstance(p, str):
                parts.append({"type": "text", "text": p})
            else:
                parts.append({"type": "image", "sha256": p.sha256, "mime": p.mime})
        return {"role": self.role, "content": parts}

    def audit(self) -> dict[str, Any]:
        """The stored form: like :meth:`canonical`, plus where each image came from."""
        out = self.canonical()
        images = iter(p for p in self.parts if isinstance(p, Image))
        for part in out["content"]:
            if part["type"] == "image":
                part["label"] = next(images).label
        return out


class LLMConfig(BaseModel):
    """Where and how to call the judge model; ``cache_dir`` None disables the cache."""

    model: str
    base_url: str
    timeout_s: float = Field(default=120.0, description="Timeout of one HTTP call.")
    max_retries: int = Field(default=4, description="Retries on 429, 5xx, timeouts and refused connections.")
    backoff_s: float = Field(default=1.0, description="First backoff; doubled each retry.")
    backoff_max_s: float = 30.0
    format_retries: int = Field(default=2, description="Re-asks when a reply cannot be parsed.")
    concurrency: int = Field(default=4, description="Calls in flight at once, across threads.")
    temperature: float = 0.0
    max_tokens: int = 1024
    seed: int | None = 0
    cache_dir: Path | None = None


def resolve_config(model: str | None = None, base_url: str | None = None, **settings: Any) -> LLMConfig:
    """Build an :class:`LLMConfig` from arguments and the environment.

    Raises :class:`JudgeError` (one line, suggesting the rule judge) when no
    endpoint or no model is configured.
    """
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not url and os.environ.get("OPENAI_API_KEY"):
        url = HOSTED_BASE_URL
    if not url:
        raise JudgeError("no judge endpoint configured: pass --base-url or set OPENAI_BASE_URL "
                         "(or use --judge rule, the offline rule judge)")
    name = model or os.environ.get("EGO2WEB_JUDGE_MODEL")
    if not name:
        raise JudgeError("no judge model configured: pass --model or set EGO2WEB_JUDGE_MODEL "
                         "(or use --judge rule, the offline rule judge)")
    return LLMConfig(model=name, base_url=url, **settings)


@dataclass
class ChatResult[T]:
    """A parsed reply and its audit trail."""

    stage: str
    parsed: T
    reply: str
    cache_key: str
    cached: bool
    prompt_tokens: int
    completion_tokens: int
    messages: list[dict[str, Any]]
    attempts: int = 0

    def record(self) -> dict[str, Any]:
        """The call as stored in a verdict: exact prompt, raw reply, parsed value, tokens."""
        parsed: Any = self.parsed.model_dump() if isinstance(self.parsed, BaseModel) else self.parsed
        return {"stage": self.stage, "cache_key": self.cache_key, "cached": self.cached,
                "messages": self.messages, "reply": self.reply, "parsed": parsed,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


class LLMClient:
    """Thread-safe; one per judge, shared by all its workers."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.cache = CallCache(config.cache_dir) if config.cache_dir else None
        self._slots = threading.BoundedSemaphore(max(1, config.concurrency))
        self._lock = threading.Lock()
        self._inflight: dict[str, list[Any]] = {}  # cache key -> [lock, waiters]
        self._client: openai.OpenAI | None = None
        self.calls = 0
        self.cache_hits = 0

    def _openai(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = openai.OpenAI(base_url=self.config.base_url,
                                             api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                             max_retries=0, timeout=self.config.timeout_s)
            return self._client

    def params(self) -> dict[str, Any]:
        c = self.config
        return {"temperature": c.temperature, "max_tokens": c.max_tokens, "seed": c.seed}

    def chat[T](self, messages: list[Message], parse: Callable[[str], T], *, stage: str,
                sample: int = 0) -> ChatResult[T]:
        """Ask the model, or the cache; return the reply parsed by ``parse``.

        ``parse`` raises :class:`ReplyFormatError` for a reply it cannot read;
        the model is then asked again (``format_retries`` times) with the
        problem stated. Only accepted replies are cached. ``sample`` k > 0 asks
        the same question as another sample (a vote): it is sent with seed
        ``seed + k`` and cached under its own key; sample 0 is the plain call.
        """
        params = self.params()
        request: dict[str, Any] = {"endpoint": self.config.base_url.rstrip("/"), "model": self.config.model,
                                   "messages": [m.canonical() for m in messages], "params": params}
        if sample:
            request["sample"] = sample
            if params["seed"] is not None:
                params["seed"] += sample
        key = request_key(request)
        with self._lock:  # identical calls in flight at once are made once: the others wait, then hit the cache
            entry = self._inflight.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                return self._chat(request, key, messages, parse, stage)
        finally:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    self._inflight.pop(key, None)

    def _chat[T](self, request: dict[str, Any], key: str, messages: list[Message], parse: Callable[[str], T],
                 stage: str) -> ChatResult[T]:
        audit = [m.audit() for m in messages]
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            try:
                parsed = parse(hit.reply)
            except ReplyFormatError:
                pass
            else:
                with self._lock:
                    self.cache_hits += 1
                log.info("judge %s: cached reply %s", stage, key[:12])
                return ChatResult(stage, parsed, hit.reply, key, True, hit.prompt_tokens,
                                  hit.completion_tokens, audit)
        convo = [m.to_openai() for m in messages]
        prompt_tokens = completion_tokens = 0
        problem = ""
        text = ""
        for attempt in range(self.config.format_retries + 1):
            text, p, c = self._call(convo, request["params"]["seed"])
            prompt_tokens += p
            completion_tokens += c
            try:
                parsed = parse(text)
            except ReplyFormatError as e:
                problem = str(e)
                convo = convo + [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": f"Your reply could not be read: {problem}. "
                                                "Answer again, exactly in the format asked for."},
                ]
                continue
            if self.cache is not None:
                self.cache.put(key, request, text, prompt_tokens, completion_tokens)
            log.info("judge %s: called %s (%d tokens in, %d out, %d tries) %s", stage, self.config.model,
                     prompt_tokens, completion_tokens, attempt + 1, key[:12])
            return ChatResult(stage, parsed, text, key, False, prompt_tokens, completion_tokens,
                              audit, attempt + 1)
        snippet = " ".join(text.split())[:80]
        raise JudgeError(f"{stage}: the judge model's reply could not be read after "
                         f"{self.config.format_retries + 1} tries ({problem}); last reply began {snippet!r}")

    def _call(self, convo: list[dict[str, Any]], seed: int | None) -> tuple[str, int, int]:
        c = self.config
        client = self._openai()
        kwargs: dict[str, Any] = {"model": c.model, "messages": convo, "temperature": c.temperature,
                                  "max_tokens": c.max_tokens}
        if seed is not None:
            kwargs["seed"] = seed

        def once() -> Any:
            with self._slots:
                with self._lock:
                    self.calls += 1
                return client.chat.completions.create(**kwargs)

        try:
            resp = retry_call(once, retries=c.max_retries, backoff_s=c.backoff_s, backoff_max_s=c.backoff_max_s)
        except RetriesExhausted as e:
            raise EndpointError(f"judge endpoint {c.base_url} unreachable or failing ({self._failure(e.last)}) "
                                f"after {e.attempts} tries; check --base-url, or use --judge rule") from None
        except openai.APIStatusError as e:
            if e.status_code in (401, 403):
                raise EndpointError(f"judge endpoint {c.base_url} refused the request (HTTP {e.status_code}: "
                                    f"{_message(e)}); set OPENAI_API_KEY") from None
            if e.status_code == 404:
                raise EndpointError(f"judge endpoint {c.base_url} answered HTTP 404 ({_message(e)}); "
                                    f"check --base-url and --model {c.model!r}") from None
            raise JudgeError(f"judge endpoint rejected the request (HTTP {e.status_code}: "
                             f"{_message(e)})") from None
        if not resp.choices:
            raise JudgeError(f"judge endpoint {c.base_url} sent a reply without choices")
        text = resp.choices[0].message.content or ""
        usage = resp.usage
        return text, (usage.prompt_tokens if usage else 0), (usage.completion_tokens if usage else 0)

    def _failure(self, e: Exception) -> str:
        """What the last failed try met, in a few words."""
        if isinstance(e, openai.APITimeoutError):
            return f"timed out after {self.config.timeout_s:g}s"
        if isinstance(e, openai.APIStatusError):
            return f"HTTP {e.status_code}: {_message(e)}"
        return _reason(e)


def _message(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return " ".join(str(err["message"]).split())[:200]
    return " ".join(str(e.message).split())[:200]


def _reason(e: Exception) -> str:
    cause: BaseException | None = e
    while cause is not None and cause.__cause__ is not None:
        cause = cause.__cause__
    text = " ".join(str(cause or e).split())
    return text[:160] or type(e).__name__
