"""Keyframes from a small generated video: timestamps, colours, cache, corrupt and missing videos."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest

from ego2web_replay.media.keyframes import KeyframeError, extract_keyframes, keyframe_dir
from ego2web_replay.tasks import TimeRange
from ego2web_replay.testing.episodes import COLOURS, make_video


def _colour(png_path: str) -> tuple[int, int, int]:
    with av.open(png_path) as c:
        frame = next(c.decode(video=0))
        arr = frame.to_ndarray(format="rgb24").reshape(-1, 3).mean(axis=0)
    return tuple(int(round(v)) for v in arr)


def _near(a, b, tol=40):
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("v") / "clip.mp4")


def test_even_keyframes_have_timestamps_and_the_right_frames(video):
    frames = extract_keyframes(video, [TimeRange(start=1.0, end=3.0), TimeRange(start=0.45, end=0.45)],
                               per_range=3)
    assert [(f.timestamp, f.range_index) for f in frames] == [(1.0, 0), (2.0, 0), (3.0, 0), (0.4, 1)]
    for f, second in zip(frames, [1, 2, 3, 0], strict=True):
        assert _near(_colour(f.path), COLOURS[second]), (f, _colour(f.path))
    assert frames[0].label == "00:01.00"
    index = json.loads((keyframe_dir(video) / "index.json").read_text())
    assert len(index["sets"]) == 1


def test_keyframes_are_cached_next_to_the_video(video, monkeypatch):
    first = extract_keyframes(video, [TimeRange(start=0, end=1)], per_range=2)
    import ego2web_replay.media.keyframes as kf

    def no_decode(*a, **k):
        raise AssertionError("decoded again")

    monkeypatch.setattr(kf, "_decode", no_decode)
    again = extract_keyframes(video, [TimeRange(start=0, end=1)], per_range=2)
    assert again == first
    assert all(p.startswith(str(keyframe_dir(video))) for p in (f.path for f in first))


def test_scene_method_finds_colour_changes(video):
    frames = extract_keyframes(video, [TimeRange(start=0.5, end=3.5)], per_range=4, method="scene")
    assert [f.timestamp for f in frames] == [0.5, 1.0, 2.0, 3.0]


def test_whole_video_when_no_ranges_and_ranges_past_the_end(video):
    frames = extract_keyframes(video, [], per_range=2)
    assert [f.range_index for f in frames] == [-1, -1]
    assert frames[0].timestamp == 0.0 and frames[1].timestamp >= 3.8
    late = extract_keyframes(video, [TimeRange(start=60, end=70)], per_range=2)
    assert len(late) == 1 and late[0].timestamp >= 3.8


def test_corrupt_and_missing_video(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    with pytest.raises(KeyframeError) as e:
        extract_keyframes(bad, [TimeRange(start=0, end=1)])
    assert "cannot" in str(e.value) and str(bad) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(KeyframeError, match="video not found"):
        extract_keyframes(tmp_path / "nope.mp4", [])


def test_large_frames_are_scaled(tmp_path):
    v = make_video(tmp_path / "big.mp4", seconds=1, fps=5, size=128)
    (f,) = extract_keyframes(v, [TimeRange(start=0.5, end=0.5)], max_side=32)
    with av.open(f.path) as c:
        frame = next(c.decode(video=0))
    assert (frame.width, frame.height) == (32, 32)
    assert np.isfinite(f.timestamp)
