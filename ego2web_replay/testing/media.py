"""A video for seek tests, and the page that seeks it: what a media player asks of a server by range.

:func:`write_seek_clip` writes an H.264 MP4 (PyAV) whose every second shows its own colour
(:data:`SECOND_COLOURS`) in a block over noise: the noise makes the file large (about 1 MB a second),
so a player fetches it in ranges and a seek far ahead asks for bytes it has not read; the block tells
which second a drawn frame belongs to. :data:`SEEK_PAGE` plays it in a ``<video>`` and exposes
``seekTo(t)``, which seeks, draws the frame to a canvas and returns what the page shows once the
frame of ``t`` was presented (``how``: ``seeked``; else ``error``, or after 8 s ``no frame`` or ``timeout``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SECOND_COLOURS", "SEEK_PAGE", "write_seek_clip", "nearest_second"]

SECOND_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
                  (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (170, 110, 40)]
_BLOCK = (slice(20, 120), slice(20, 140))  # rows, columns of the colour block
BLOCK_CENTRE = (80, 70)  # x, y


def write_seek_clip(path: Path, seconds: int = 10, fps: int = 25, size: tuple[int, int] = (320, 240)) -> Path:
    """Write the clip (at most ``len(SECOND_COLOURS)`` seconds; a keyframe every second)."""
    import av
    import numpy as np

    if seconds > len(SECOND_COLOURS):
        raise ValueError(f"at most {len(SECOND_COLOURS)} seconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    noise = np.random.default_rng(1)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": "20", "preset": "ultrafast", "g": str(fps)}
        for i in range(fps * seconds):
            frame = noise.integers(0, 256, (h, w, 3), dtype=np.uint8)
            frame[_BLOCK] = SECOND_COLOURS[i // fps]
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode(None))
    return path


def nearest_second(rgb: tuple[int, int, int] | list[int]) -> int:
    """The second whose colour is nearest to a pixel of the block."""
    return min(range(len(SECOND_COLOURS)),
               key=lambda s: sum((a - b) ** 2 for a, b in zip(SECOND_COLOURS[s], rgb, strict=False)))


SEEK_PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>Seek</title></head><body>
<video id="v" src="clip.mp4" preload="auto" muted playsinline width="320" height="240"></video>
<canvas id="c" width="320" height="240"></canvas>
<script>
const v = document.getElementById('v');
v.addEventListener('loadedmetadata', () => { document.body.dataset.ready = '1'; });
v.addEventListener('error', () => { document.body.dataset.error = String(v.error && v.error.code); });
window.seekTo = (t) => new Promise((resolve) => {
  // done once the seek is over AND its frame was presented ('seeked' can come before the new frame
  // reaches the element, and a canvas drawn then shows the old one)
  let settled = false, seeked = false, presented = null;
  const finish = (how) => {
    if (settled) return;
    settled = true;
    v.removeEventListener('seeked', onSeeked);
    v.removeEventListener('error', onError);
    const c = document.getElementById('c').getContext('2d');
    c.drawImage(v, 0, 0, 320, 240);
    const px = c.getImageData(80, 70, 1, 1).data;
    resolve({how: how, time: v.currentTime, frameTime: presented, ready: v.readyState,
             error: v.error ? v.error.code : null, centre: [px[0], px[1], px[2]],
             frame: document.getElementById('c').toDataURL('image/png')});
  };
  const shown = () => presented !== null && Math.abs(presented - t) < 0.1;
  const onFrame = (now, meta) => {
    presented = meta.mediaTime;
    if (seeked && shown()) finish('seeked');
    else if (!shown()) v.requestVideoFrameCallback(onFrame);
  };
  const onSeeked = () => { seeked = true; if (shown()) finish('seeked'); };
  const onError = () => finish('error');
  v.addEventListener('seeked', onSeeked);
  v.addEventListener('error', onError);
  v.requestVideoFrameCallback(onFrame);
  setTimeout(() => finish(seeked ? 'no frame' : 'timeout'), 8000);
  v.currentTime = t;
});
</script></body></html>"""
