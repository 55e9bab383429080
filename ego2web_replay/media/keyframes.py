"""Keyframes from a task's video: for the judge (evidence ranges) and for agents (the whole video).

The evidence firewall: :func:`sample_video` is what agents get (frames sampled
uniformly over the whole video, never the evidence ranges); only judges call
:func:`extract_keyframes` with ``task.evidence``.

From each evidence time range a few frames are taken, either evenly spaced
(``even``: the range's ends and points between; one frame, the middle, for a
single instant) or where the picture changes most (``scene``: the range's
first frame plus the frames that differ most from the one before). Frames are
decoded with PyAV, scaled to at most ``max_side`` pixels and written as PNG
to ``<video>.keyframes/`` with an ``index.json``, so a second call reads them
back. A task without evidence ranges uses the whole video.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ..atomic import atomic_write_bytes, atomic_write_text
from ..errors import MediaError
from ..models import TimeRange
from ..png import png_from_array

__all__ = ["Keyframe", "KeyframeError", "extract_keyframes", "sample_video", "keyframe_dir"]

INDEX_VERSION = 1
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
Method = Literal["even", "scene"]


class KeyframeError(MediaError):
    """A task's video is missing or cannot be decoded."""


class Keyframe(BaseModel):
    """One frame taken from the video."""

    timestamp: float = Field(description="Seconds from the start of the video.")
    range_index: int = Field(description="Which evidence range it was taken from (-1: whole video).")
    path: str = Field(description="The PNG file.")

    @property
    def label(self) -> str:
        m, s = divmod(self.timestamp, 60)
        return f"{int(m):02d}:{s:05.2f}"


def keyframe_dir(video: Path) -> Path:
    """Where the keyframes of ``video`` are cached."""
    return video.with_name(video.name + ".keyframes")


def _targets(start: float, end: float, n: int) -> list[float]:
    if n <= 1 or end <= start:
        return [(start + end) / 2]
    return [start + (end - start) * i / (n - 1) for i in range(n)]


def extract_keyframes(video: str | Path, ranges: Sequence[TimeRange], *, per_range: int = 3,
                      method: Method = "even", max_side: int = 512,
                      cache_dir: Path | None = None) -> list[Keyframe]:
    """Keyframes of ``video`` for ``ranges`` (the whole video when empty), cached on disk.

    Thread-safe: episodes of one task judged at once decode the video once.
    Raises :class:`KeyframeError` (one line) for a missing or unreadable video.
    """
    path = Path(video)
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(str(path.resolve()), threading.Lock())
    with lock:
        return _extract(path, ranges, per_range, method, max_side, cache_dir)


def sample_video(video: str | Path, *, frames: int | None = None, fps: float | None = None,
                 max_side: int = 512, cache_dir: Path | None = None) -> list[Keyframe]:
    """Frames sampled uniformly over the **whole** video: ``frames`` of them, or ``fps`` per second.

    Each frame is the centre of one of N equal segments of the video, so no part
    of the video (and no annotated range) is favoured. This is what agents get.
    """
    from .video import video_duration

    if (frames is None) == (fps is None):
        raise KeyframeError("sample_video needs exactly one of frames= or fps=")
    duration = video_duration(video)
    n = frames if frames is not None else max(1, int(round(duration * float(fps or 0))))
    if n < 1:
        raise KeyframeError(f"cannot sample {n} frames; ask for at least one")
    instants = [TimeRange(start=duration * (i + 0.5) / n, end=duration * (i + 0.5) / n) for i in range(n)]
    got = extract_keyframes(video, instants, per_range=1, max_side=max_side, cache_dir=cache_dir)
    out: list[Keyframe] = []
    for k in got:  # neighbouring segments of a short video can land on one frame: keep it once
        if not out or out[-1].timestamp != k.timestamp:
            out.append(k.model_copy(update={"range_index": -1}))
    return out


def _extract(path: Path, ranges: Sequence[TimeRange], per_range: int, method: Method, max_side: int,
             cache_dir: Path | None) -> list[Keyframe]:
    if not path.is_file():
        raise KeyframeError(f"{path}: video not found; fix the task's 'video' path or remove it")
    if method not in ("even", "scene"):
        raise KeyframeError(f"unknown keyframe method {method!r}; use 'even' or 'scene'")
    folder = cache_dir or keyframe_dir(path)
    st = path.stat()
    settings = {"ranges": [[r.start, r.end] for r in ranges], "per_range": per_range, "method": method,
                "max_side": max_side, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    index_path = folder / "index.json"
    index: dict[str, Any] = {"version": INDEX_VERSION, "video": path.name, "sets": {}}
    try:
        loaded = json.loads(index_path.read_text("utf-8"))
        if loaded.get("version") == INDEX_VERSION:
            index = loaded
    except (FileNotFoundError, json.JSONDecodeError, OSError):
        pass
    cached = index["sets"].get(key)
    if cached and all((folder / f["file"]).is_file() for f in cached["frames"]):
        return [Keyframe(timestamp=f["timestamp"], range_index=f["range_index"], path=str(folder / f["file"]))
                for f in cached["frames"]]
    frames = _decode(path, ranges, per_range, method, max_side)
    out: list[Keyframe] = []
    entries = []
    for i, (ts, ri, rgb) in enumerate(frames):
        name = f"{key}-{i:02d}.png"
        atomic_write_bytes(folder / name, png_from_array(rgb))
        entries.append({"timestamp": ts, "range_index": ri, "file": name})
        out.append(Keyframe(timestamp=ts, range_index=ri, path=str(folder / name)))
    index["sets"][key] = {"settings": settings, "frames": entries}
    atomic_write_text(index_path, json.dumps(index, indent=1) + "\n")
    return out


def _decode(path: Path, ranges: Sequence[TimeRange], per_range: int, method: Method,
            max_side: int) -> list[tuple[float, int, np.ndarray]]:
    import av

    try:
        container = av.open(str(path))
    except (av.FFmpegError, OSError, ValueError) as e:
        raise KeyframeError(f"{path}: cannot read video ({_short(e)}); re-encode or replace it") from None
    try:
        if not container.streams.video:
            raise KeyframeError(f"{path}: no video stream in file")
        stream = container.streams.video[0]
        duration = _duration(container, stream)
        spans = [(r.start, r.end, i) for i, r in enumerate(ranges)] or [(0.0, duration or 0.0, -1)]
        result: list[tuple[float, int, np.ndarray]] = []
        for start, end, ri in spans:
            if duration is not None:
                start, end = min(start, duration), min(end, duration)
            frames = _frames_between(container, stream, start, end)
            picks = _pick_even(frames, start, end, per_range, max_side) if method == "even" \
                else _pick_scene(frames, per_range, max_side)
            if not picks:
                raise KeyframeError(f"{path}: no frames decoded between {start:g}s and {end:g}s")
            result.extend((round(t, 3), ri, rgb) for t, rgb in picks)
        return result
    except av.FFmpegError as e:
        raise KeyframeError(f"{path}: cannot decode video ({_short(e)}); re-encode or replace it") from None
    finally:
        container.close()


def _duration(container: Any, stream: Any) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000
    return None


def _frames_between(container: Any, stream: Any, start: float, end: float) -> Iterator[tuple[float, Any]]:
    """Decoded frames with start <= time <= end; the nearest one when none falls inside."""
    rate = float(stream.average_rate) if stream.average_rate else 25.0
    slack = 0.5 / rate
    if stream.time_base is not None:
        container.seek(int(max(0.0, start - 1.0) / stream.time_base), stream=stream, backward=True)
    before: tuple[float, Any] | None = None
    inside = False
    for frame in container.decode(stream):
        t = float(frame.time) if frame.time is not None else 0.0
        if t < start - slack:
            before = (t, frame)
            continue
        if t > end + slack:
            if not inside:
                yield (t, frame)
                inside = True
            break
        inside = True
        yield (t, frame)
    if not inside and before is not None:
        yield before


def _pick_even(frames: Iterable[tuple[float, Any]], start: float, end: float, n: int,
               max_side: int) -> list[tuple[float, np.ndarray]]:
    targets = _targets(start, end, n)
    best: list[tuple[float, float, np.ndarray] | None] = [None] * len(targets)
    for t, frame in frames:
        rgb: np.ndarray | None = None
        for i, target in enumerate(targets):
            cur = best[i]
            if cur is None or abs(t - target) < cur[0]:
                rgb = _rgb(frame, max_side) if rgb is None else rgb
                best[i] = (abs(t - target), t, rgb)
    picks: list[tuple[float, np.ndarray]] = []
    for b in best:
        if b is not None and (not picks or picks[-1][0] != b[1]):
            picks.append((b[1], b[2]))
    return picks


def _pick_scene(frames: Iterable[tuple[float, Any]], n: int, max_side: int) -> list[tuple[float, np.ndarray]]:
    seen: list[tuple[float, np.ndarray]] = []
    change: list[float] = []
    prev: np.ndarray | None = None
    for t, frame in frames:
        small = frame.reformat(width=32, height=32, format="gray").to_ndarray().astype(np.int16)
        change.append(0.0 if prev is None else float(np.abs(small - prev).mean()))
        prev = small
        seen.append((t, _rgb(frame, max_side)))
    if not seen:
        return []
    ranked = sorted(range(1, len(seen)), key=lambda i: (-change[i], i))
    return [seen[i] for i in sorted({0, *ranked[: max(0, n - 1)]})]


def _rgb(frame: Any, max_side: int) -> np.ndarray:
    w, h = frame.width, frame.height
    scale = min(1.0, max_side / max(w, h))
    w2, h2 = max(2, int(round(w * scale))), max(2, int(round(h * scale)))
    return frame.reformat(width=w2, height=h2, format="rgb24").to_ndarray()


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:160] or type(e).__name__
