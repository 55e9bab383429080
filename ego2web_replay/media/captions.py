"""Timestamped captions of a task's video, made the way the Ego2Web pipeline makes them.

The video is cut into clips of ``clip_seconds`` (5 s by default); a few frames
of each clip go to a multimodal model (a :class:`Captioner`; the one over any
OpenAI-compatible endpoint is :class:`ego2web_replay.judge.captioner.LLMCaptioner`),
which answers one JSON object per clip following :data:`CLIP_SCHEMA` (objects,
actions, text seen, brands, colours, a one-line summary). The captions are
stored beside the video as ``<video>.captions.json`` together with the
video's sha256: a second run over the same video (same model and settings)
makes no model call, and an agent in the ``captions`` modality reads that file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError

from ..atomic import atomic_write_text
from ..errors import MediaError

__all__ = ["ClipCaption", "CaptionFile", "CLIP_SCHEMA", "Captioner", "captions_path", "read_captions",
           "generate_captions", "caption_suite", "parse_clip_caption"]

CAPTIONS_VERSION = 1
PROMPT_VERSION = "captions-v1"

CLIP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "description": "One sentence: what happens in the clip."},
        "objects": {"type": "array", "items": {"type": "string"}, "description": "Objects visible."},
        "actions": {"type": "array", "items": {"type": "string"}, "description": "What the camera wearer does."},
        "text_seen": {"type": "array", "items": {"type": "string"}, "description": "Text readable in view."},
        "brands": {"type": "array", "items": {"type": "string"}, "description": "Brands or logos seen."},
        "colours": {"type": "array", "items": {"type": "string"}, "description": "Salient colours of objects."},
    },
    "required": ["summary", "objects", "actions", "text_seen", "brands", "colours"],
}

PROMPT = (
    "You caption one {seconds:g}-second clip (from {start} to {end}) of an egocentric video, seen "
    "through {n} frames in time order. Describe only what is visible. Reply with ONE JSON object "
    "and nothing else, following this JSON schema:\n{schema}"
)


class Captioner(Protocol):
    """A multimodal model that captions one clip: ``caption`` returns :func:`parse_clip_caption`'s dict."""

    model: str

    @property
    def calls(self) -> int:
        """Model calls made so far."""
        ...

    def caption(self, prompt: str, frames: list[tuple[float, Path]]) -> dict[str, Any]:
        """Ask the model about ``frames`` (time, PNG path) with ``prompt``; the parsed caption fields."""
        ...


class ClipCaption(BaseModel):
    """The caption of one clip."""

    start: float
    end: float
    summary: str = ""
    objects: list[str] = Field(default_factory=list)
    actions: list[str] = Field(default_factory=list)
    text_seen: list[str] = Field(default_factory=list)
    brands: list[str] = Field(default_factory=list)
    colours: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """One line for an agent's prompt: the time span, then every non-empty field."""
        parts = [self.summary.strip()] if self.summary.strip() else []
        for label, values in (("objects", self.objects), ("actions", self.actions), ("text seen", self.text_seen),
                              ("brands", self.brands), ("colours", self.colours)):
            if values:
                parts.append(f"{label}: {', '.join(values)}")
        return f"[{_clock(self.start)}-{_clock(self.end)}] " + "; ".join(parts)


class CaptionFile(BaseModel):
    """``<video>.captions.json``."""

    version: int = CAPTIONS_VERSION
    video: str = Field(description="The video's file name.")
    video_sha256: str
    duration_s: float
    model: str
    prompt_version: str = PROMPT_VERSION
    clip_seconds: float
    frames_per_clip: int
    max_side: int
    captions: list[ClipCaption]

    def settings(self) -> tuple[Any, ...]:
        return (self.model, self.prompt_version, self.clip_seconds, self.frames_per_clip, self.max_side)


def _clock(t: float) -> str:
    m, s = divmod(int(round(t)), 60)
    return f"{m:02d}:{s:02d}"


def captions_path(video: Path) -> Path:
    """Where the captions of ``video`` are stored: beside it, ``<video>.captions.json``."""
    return video.with_name(video.name + ".captions.json")


def _load(video: Path) -> CaptionFile | None:
    try:
        return CaptionFile.model_validate_json(captions_path(video).read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (ValidationError, ValueError, OSError) as e:
        raise MediaError(f"{captions_path(video)}: unreadable captions ({str(e).splitlines()[0]}); "
                         "delete it and run `ego2web-replay captions` again") from None


def read_captions(video: Path) -> list[ClipCaption]:
    """The stored captions of ``video``; :class:`MediaError` when there are none or the video changed."""
    from .video import video_sha256

    stored = _load(video)
    if stored is None:
        raise MediaError(f"{video}: no captions (expected {captions_path(video).name}); "
                         "make them with `ego2web-replay captions TASKS --model M --base-url URL`")
    if stored.video_sha256 != video_sha256(video):
        raise MediaError(f"{captions_path(video)}: made for another version of the video; "
                         "run `ego2web-replay captions` again")
    return stored.captions


def parse_clip_caption(text: str) -> dict[str, Any]:
    """The caption fields of a model's reply; :class:`ValueError` saying what is wrong."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    try:
        data = json.loads(text[start:end + 1])
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    missing = [k for k in CLIP_SCHEMA["required"] if k not in data]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    out: dict[str, Any] = {"summary": str(data["summary"])}
    for k in ("objects", "actions", "text_seen", "brands", "colours"):
        v = data[k]
        if not isinstance(v, list):
            raise ValueError(f"field {k!r} must be a list of strings")
        out[k] = [str(x) for x in v]
    return out


def generate_captions(video: Path, client: Captioner, *, clip_seconds: float = 5.0, frames_per_clip: int = 4,
                      max_side: int = 512, force: bool = False) -> tuple[CaptionFile, int]:
    """Caption ``video`` clip by clip with ``client``.

    Returns the captions and the number of model calls made (0 when the stored
    captions match the video's hash, the model and the settings).
    """
    from .keyframes import extract_keyframes
    from .video import video_duration, video_sha256

    if clip_seconds <= 0 or frames_per_clip < 1:
        raise MediaError("clip length must be positive and each clip needs at least one frame")
    digest = video_sha256(video)
    duration = video_duration(video)
    wanted = (client.model, PROMPT_VERSION, clip_seconds, frames_per_clip, max_side)
    if not force:
        try:
            stored = _load(video)
        except MediaError:
            stored = None
        if stored is not None and stored.video_sha256 == digest and stored.settings() == wanted:
            return stored, 0
    from ..models import TimeRange

    captions: list[ClipCaption] = []
    calls_before = client.calls
    for i in range(max(1, math.ceil(duration / clip_seconds - 1e-9))):
        start, end = i * clip_seconds, min(duration, (i + 1) * clip_seconds)
        # frames at the centres of equal parts of the clip
        instants = [TimeRange(start=start + (end - start) * (k + 0.5) / frames_per_clip,
                              end=start + (end - start) * (k + 0.5) / frames_per_clip)
                    for k in range(frames_per_clip)]
        frames = extract_keyframes(video, instants, per_range=1, max_side=max_side)
        prompt = PROMPT.format(seconds=clip_seconds, start=_clock(start), end=_clock(end), n=len(frames),
                               schema=json.dumps(CLIP_SCHEMA, indent=1))
        fields = client.caption(prompt, [(f.timestamp, Path(f.path)) for f in frames])
        captions.append(ClipCaption(start=round(start, 3), end=round(end, 3), **fields))
    out = CaptionFile(video=video.name, video_sha256=digest, duration_s=round(duration, 3), model=wanted[0],
                      clip_seconds=clip_seconds, frames_per_clip=frames_per_clip, max_side=max_side,
                      captions=captions)
    atomic_write_text(captions_path(video), out.model_dump_json(indent=1) + "\n")
    return out, client.calls - calls_before


def caption_suite(suite: Any, client: Captioner, *, task_ids: tuple[str, ...] | list[str] = (), **options: Any
                  ) -> list[tuple[str, Path, int, int]]:
    """Caption every task video of ``suite`` (once per distinct video): ``(task, captions file, clips, calls)``."""
    out: list[tuple[str, Path, int, int]] = []
    done: dict[Path, tuple[int, int]] = {}
    for task in suite.select(list(task_ids)):
        video = task.video_path(suite.base_dir)
        if video is None:
            continue
        key = video.resolve()
        if key not in done:
            made, calls = generate_captions(video, client, **options)
            done[key] = (len(made.captions), calls)
            out.append((task.id, captions_path(video), *done[key]))
        else:
            out.append((task.id, captions_path(video), done[key][0], 0))
    return out
