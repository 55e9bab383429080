"""The video captioner over any OpenAI-compatible endpoint: :class:`~ego2web_replay.media.captions.Captioner`
built on the judges' LLM client (retries, backoff, re-asking when a reply cannot be read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..media.captions import parse_clip_caption
from .client import Image, LLMClient, LLMConfig, Message, ReplyFormatError

__all__ = ["LLMCaptioner"]


def _parse(text: str) -> dict[str, Any]:
    try:
        return parse_clip_caption(text)
    except ValueError as e:
        raise ReplyFormatError(str(e)) from None


class LLMCaptioner:
    """Captions one clip per call: the prompt, then each frame labelled with its time."""

    def __init__(self, config: LLMConfig) -> None:
        self.client = LLMClient(config)
        self.model = config.model

    @property
    def calls(self) -> int:
        return self.client.calls

    def caption(self, prompt: str, frames: list[tuple[float, Path]]) -> dict[str, Any]:
        parts: list[str | Image] = [prompt]
        for t, path in frames:
            parts += [f"\nFrame at {t:.1f}s:", Image.from_path(path)]
        return self.client.chat([Message("user", parts)], _parse, stage="caption").parsed
