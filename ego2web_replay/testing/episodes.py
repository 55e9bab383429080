"""Builders for judge tests: a small generated video and hand-made episodes on disk."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..models import (
    RUN_MANIFEST,
    Action,
    AgentSpec,
    Mode,
    RunManifest,
    RunSettings,
    Step,
    Trajectory,
    episode_dir,
    save_model,
)
from ..png import png_bytes

__all__ = ["COLOURS", "make_video", "make_episode", "make_run_manifest"]

COLOURS: list[tuple[int, int, int]] = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0),
                                       (255, 0, 255), (0, 255, 255), (255, 255, 255), (0, 0, 0)]


def make_video(path: Path, seconds: int = 4, fps: int = 10, size: int = 64,
               colours: Sequence[tuple[int, int, int]] = COLOURS) -> Path:
    """Write a video whose frames are one solid colour per second (``colours[s]``)."""
    import av

    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    with av.open(str(path), "w") as out:
        stream: Any = out.add_stream(codec, rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(seconds * fps):
            arr = np.full((size, size, 3), colours[(i // fps) % len(colours)], dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(arr, format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def make_episode(run_dir: Path, task_id: str, mode: Mode = "frozen", *, answer: str | None = None,
                 urls: Sequence[str] = ("http://shop.test/",), titles: Sequence[str] | None = None,
                 agent: str = "scripted", model: str | None = None, screenshots: bool = True,
                 snapshot_path: str | None = None, repeat: int = 0) -> Path:
    """Write ``trajectory.json`` and one distinct screenshot per step; return the episode folder."""
    ep = episode_dir(run_dir, task_id, mode, repeat)
    steps = []
    for i, url in enumerate(urls, 1):
        shot = None
        if screenshots:
            shot = f"screenshots/step-{i:03d}.png"
            (ep / "screenshots").mkdir(parents=True, exist_ok=True)
            (ep / shot).write_bytes(png_bytes(8 + i, 8 + i, COLOURS[i % len(COLOURS)]))
        steps.append(Step(index=i, action=Action(kind="goto", url=url), url=url,
                          title=titles[i - 1] if titles else f"Page {i}", screenshot=shot))
    if answer is not None:
        steps.append(Step(index=len(steps) + 1, action=Action(kind="answer", answer=answer),
                          url=urls[-1] if urls else None))
    traj = Trajectory(task_id=task_id, mode=mode, instruction=f"instruction of {task_id}",
                      agent=AgentSpec(name=agent, model=model), steps=steps, answer=answer,
                      end_reason="answered" if answer is not None else "stopped",
                      snapshot_path=snapshot_path, repeat=repeat)
    save_model(ep / "trajectory.json", traj)
    return ep


def make_run_manifest(run_dir: Path, suite: Path | None = None, *, agent: str = "scripted",
                      modes: Sequence[str] = ("frozen",), started_at: datetime | None = None) -> RunManifest:
    """Write ``<run_dir>/run.json`` as the runner does, naming ``suite`` as the run's task file."""
    manifest = RunManifest(run_id=Path(run_dir).name, started_at=started_at or datetime.now(UTC),
                           suite_path=str(suite) if suite else None, agent=AgentSpec(name=agent),
                           agent_name=agent, modes=list(modes),
                           settings=RunSettings(mode=modes[0] if len(modes) == 1 else "both"))
    save_model(Path(run_dir) / RUN_MANIFEST, manifest)
    return manifest
