"""Short egocentric-style clips for the demo tasks, generated with PyAV (no files shipped).

Each clip is a sequence of one-second "shots": a coloured object on a table
background, slightly moving, so keyframe sampling has something to find.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_clip", "DEMO_CLIPS"]

# task id -> colours of the objects shown, one per second
DEMO_CLIPS: dict[str, list[tuple[int, int, int]]] = {
    "shop-snack-calories": [(180, 120, 60), (90, 180, 70), (200, 30, 40), (40, 90, 200), (120, 120, 120),
                            (100, 100, 100), (230, 190, 30), (230, 190, 30)],
    "shop-mug-price": [(120, 110, 100), (120, 110, 100), (200, 30, 40), (200, 30, 40), (120, 110, 100)],
    "shop-bottle-cart": [(110, 110, 110), (40, 90, 200), (40, 90, 200), (110, 110, 110)],
    "wiki-lighthouse-built": [(90, 140, 200), (90, 140, 200), (90, 140, 200), (230, 230, 230), (200, 40, 40),
                              (90, 140, 200)],
    "wiki-herb-name": [(200, 180, 150), (200, 180, 150), (200, 180, 150), (200, 180, 150), (40, 150, 50),
                       (40, 150, 50), (200, 180, 150)],
    "video-uploader": [(160, 150, 140), (240, 200, 120), (240, 200, 120), (240, 200, 120), (160, 150, 140)],
}


def write_clip(path: Path, colours: list[tuple[int, int, int]], *, fps: int = 10, size: tuple[int, int] = (160, 120)) -> Path:
    """Write an H.264 (or MPEG-4) clip of one second per colour."""
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
