"""Video helpers: writing small test/demo clips, reading a video's duration and hash.

Frames for agents are always sampled over the **whole** video
(:func:`~ego2web_replay.media.keyframes.sample_video`); only judges take frames
from a task's evidence ranges.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .keyframes import KeyframeError, _short

__all__ = ["write_clip", "video_duration", "video_sha256"]


def write_clip(path: Path, colours: list[tuple[int, int, int]], *, fps: int = 10,
               size: tuple[int, int] = (160, 120)) -> Path:
    """Write an H.264 (or MPEG-4) clip of one second per colour: a coloured object on a table."""
    import av
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    with av.open(str(path), mode="w") as container:
        try:
            stream = container.add_stream("libx264", rate=fps)
        except Exception:  # noqa: BLE001 - fall back where x264 is missing
            stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for second, colour in enumerate(colours):
            for i in range(fps):
                frame = np.full((h, w, 3), (150, 130, 110), dtype=np.uint8)  # the table
                x = 40 + (i * 3) % 40
                y = 30 + (second % 2) * 10
                frame[y:y + 50, x:x + 60] = colour
                container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode(None))
    return path


def video_duration(path: str | Path) -> float:
    """The video's duration in seconds; :class:`KeyframeError` when it cannot be read."""
    import av

    p = Path(path)
    if not p.is_file():
        raise KeyframeError(f"{p}: video not found; fix the task's 'video' path or remove it")
    try:
        with av.open(str(p)) as container:
            if not container.streams.video:
                raise KeyframeError(f"{p}: no video stream in file")
            stream = container.streams.video[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
            if container.duration is not None:
                return container.duration / 1_000_000
            last = 0.0
            for frame in container.decode(stream):
                last = float(frame.time or 0.0)
            return last
    except (av.FFmpegError, OSError, ValueError) as e:
        raise KeyframeError(f"{p}: cannot read video ({_short(e)}); re-encode or replace it") from None


def video_sha256(path: str | Path) -> str:
    """sha256 of the video file's bytes (the key of its captions cache)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
