"""A run's rendered pages as Mind2Web 2's evaluation cache, so its own evaluation scripts judge what the agent saw.

Mind2Web 2 (OSU-NLP-Group/Mind2Web-2) judges an answer by reading the pages it
cites from a cache (``mind2web2/utils/cache_filesys.py``, ``CacheFileSys``), one
folder per agent and task, and captures a page live only when the cache lacks
it. :func:`export_mind2web2_cache` writes that cache from the pages an episode
rendered (``pages/step-NNN.json``) and the screenshots it took, so the
evaluator reads the page as the agent's browser showed it, never a fresh crawl:

    OUT/cache/<agent>/<task>/index.json    {"<url key>": "web", ...}
    OUT/cache/<agent>/<task>/<md5>.txt     the page's visible text (innerText after scripts ran)
    OUT/cache/<agent>/<task>/<md5>.jpg     the screenshot the agent saw of that page, as JPEG
    OUT/cache/<agent>/<task>.json          URL metadata, as Mind2Web 2's batch crawler writes it
    OUT/answers/<agent>/<task>/answer_<repeat + 1>.md   each episode's final answer
    OUT/ego2web-export.json                where every cached page came from, and what was left out

Their layout, read from their code: the index maps a URL key to ``"web"``; the
key is the URL without its fragment, percent-decoded once, without a trailing
slash; the files are named by the MD5 of that key normalised the same way again
(what their loader computes when it checks that both files exist, dropping an
entry whose files are missing). ``OUT/cache`` is their ``--cache_root`` and
``OUT/answers`` their ``--answer_folder``.

Which render is kept: the last one, in repeat then step order, that has a
screenshot of the same page; a step without its own screenshot (the answer step
takes none) uses the latest earlier screenshot when it shows the same page, the
one the agent looked at when it acted. Repeats of a task share one cache, as
Mind2Web 2's answers of a task do: a page several repeats rendered is kept as the
last repeat rendered it, and each replaced render whose text differed is counted.
A page rendered without any screenshot of it cannot be a ``web`` entry (their
loader would drop it): it is left out and listed, never written half; so is a
page whose screenshot cannot be read. A JPEG screenshot is copied as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag

from ..errors import Ego2WebError, JudgeError
from ..models import Trajectory, load_trajectory
from ..models.base import check_id

__all__ = ["CachedPage", "TaskExport", "Mind2Web2Export", "export_mind2web2_cache", "cache_key", "cache_stem",
           "png_to_jpeg", "PROVENANCE"]

PROVENANCE = "ego2web-export.json"


def cache_key(url: str) -> str:
    """The index key Mind2Web 2's cache stores a URL under: no fragment, percent-decoded once, and no
    trailing slash (unless the URL is only a slash or ends in ``://``)."""
    bare = unquote(urldefrag(url)[0])
    if len(bare) > 1 and bare.endswith("/") and not bare.endswith("://"):
        bare = bare[:-1]
    return bare


def cache_stem(key: str) -> str:
    """The file name (without ``.txt``/``.jpg``) their loader looks for: the MD5 of the key normalised again."""
    return hashlib.md5(cache_key(key).encode("utf-8")).hexdigest()


def png_to_jpeg(png: bytes, *, quality: int = 2) -> bytes:
    """A PNG screenshot as baseline JPEG (the cache's ``.jpg``), through FFmpeg's encoders (PyAV);
    ``quality`` is the MJPEG quantiser, 2 (best) to 31. :class:`JudgeError` when ``png`` is no readable PNG."""
    import io
    from fractions import Fraction

    import av

    try:
        container: Any = av.open(io.BytesIO(png), format="png_pipe")
        with container:
            frame = next(container.decode(video=0))
    except (av.error.FFmpegError, StopIteration) as e:  # type: ignore[attr-defined]
        raise JudgeError(f"screenshot is not a readable PNG: {e}") from None
    enc: Any = av.CodecContext.create("mjpeg", "w")
    enc.width, enc.height, enc.pix_fmt = frame.width, frame.height, "yuvj444p"
    enc.time_base = Fraction(1, 1)
    enc.options = {"qmin": str(quality), "qmax": str(quality)}
    packets = enc.encode(frame.reformat(format="yuvj444p")) + enc.encode(None)
    return b"".join(bytes(p) for p in packets)


@dataclass
class CachedPage:
    """One page written to a task's cache and where it came from."""

    key: str
    url: str
    repeat: int
    step: int
    screenshot_step: int
    episode: str
    replaced: int = 0  # earlier renders of the page with other text, not kept

    def provenance(self) -> dict[str, Any]:
        return {"key": self.key, "url": self.url, "file": cache_stem(self.key), "repeat": self.repeat,
                "text_step": self.step, "screenshot_step": self.screenshot_step, "episode": self.episode,
                "replaced_renders": self.replaced}


@dataclass
class TaskExport:
    """What was written for one task."""

    task_id: str
    pages: list[CachedPage] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # answer file names
    left_out: list[dict[str, Any]] = field(default_factory=list)  # {url, repeat, step, reason}
    skipped: list[dict[str, Any]] = field(default_factory=list)  # episodes not exported: {episode, reason}

    def summary(self) -> dict[str, Any]:
        return {"task": self.task_id, "pages": len(self.pages), "answers": self.answers,
                "replaced_renders": sum(p.replaced for p in self.pages), "left_out": self.left_out,
                "skipped_episodes": self.skipped, "cached": [p.provenance() for p in self.pages]}


@dataclass
class Mind2Web2Export:
    """What :func:`export_mind2web2_cache` wrote."""

    out: Path
    run_dir: Path
    agent_name: str
    mode: str
    tasks: list[TaskExport]

    @property
    def cache_root(self) -> Path:
        return self.out / "cache"

    @property
    def answer_root(self) -> Path:
        return self.out / "answers"

    def counts(self) -> dict[str, int]:
        return {"tasks": len(self.tasks), "pages": sum(len(t.pages) for t in self.tasks),
                "answers": sum(len(t.answers) for t in self.tasks),
                "left_out": sum(len(t.left_out) for t in self.tasks),
                "skipped_episodes": sum(len(t.skipped) for t in self.tasks),
                "replaced_renders": sum(p.replaced for t in self.tasks for p in t.pages)}

    def summary(self) -> dict[str, Any]:
        return {"format": "mind2web2-cache", "run": str(self.run_dir), "out": str(self.out),
                "cache_root": str(self.cache_root), "answer_folder": str(self.answer_root),
                "agent_name": self.agent_name, "mode": self.mode, "counts": self.counts(),
                "tasks": [t.summary() for t in self.tasks]}


def _folder_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "agent"


def _episodes(run_dir: Path, mode: str | None) -> tuple[str, dict[str, list[tuple[Path, Trajectory]]]]:
    found: list[tuple[Path, Trajectory]] = []
    for traj_file in sorted((run_dir / "episodes").glob("*/*/trajectory.json")):
        found.append((traj_file.parent, load_trajectory(traj_file)))
    modes = sorted({t.mode for _, t in found})
    if not found:
        raise JudgeError(f"{run_dir}: no finished episodes to export")
    if mode is None:
        if len(modes) > 1:
            raise JudgeError(f"{run_dir} has {' and '.join(modes)} episodes; choose one with --mode")
        mode = modes[0]
    by_task: dict[str, list[tuple[Path, Trajectory]]] = {}
    for d, t in found:
        if t.mode == mode:
            by_task.setdefault(t.task_id, []).append((d, t))
    if not by_task:
        raise JudgeError(f"{run_dir}: no {mode} episodes (it has {', '.join(modes)})")
    for eps in by_task.values():
        eps.sort(key=lambda e: e[1].repeat)
    return mode, by_task


@dataclass
class _Kept:
    page: CachedPage
    text: str
    shot: Path


def _collect(task: TaskExport, run_dir: Path, episodes: list[tuple[Path, Trajectory]]) -> dict[str, _Kept]:
    """The render kept per cache key over the task's episodes, in repeat then step order."""
    from .episode import load_episode

    kept: dict[str, _Kept] = {}
    unshot: dict[str, dict[str, Any]] = {}
    for folder, traj in episodes:
        rel = str(folder.relative_to(run_dir))
        if traj.episode_error:
            task.skipped.append({"episode": rel, "reason": f"episode error ({traj.end_reason}): it could not run"})
            continue
        try:
            ep = load_episode(folder)
            renders = {r.step: r for r in ep.renders()}
        except JudgeError as e:
            task.skipped.append({"episode": rel, "reason": str(e)})
            continue
        shots = {s.step: s for s in ep.screenshots}
        seen: tuple[int, Path, str] | None = None  # the latest screenshot so far: what the agent was shown
        for step in traj.steps:
            own = shots.get(step.index)
            shown = (own.step, own.path, cache_key(own.url or "")) if own else seen
            render = renders.get(step.index)
            if render is not None and render.url:
                key = cache_key(render.url)
                if shown is not None and shown[2] == key:
                    page = CachedPage(key, render.url, traj.repeat, step.index, shown[0], rel)
                    before = kept.get(key)
                    if before is not None:
                        page.replaced = before.page.replaced + (before.text != render.text)
                    kept[key] = _Kept(page, render.text, shown[1])
                    unshot.pop(key, None)
                elif key not in kept:
                    unshot[key] = {"url": render.url, "repeat": traj.repeat, "step": step.index, "episode": rel,
                                   "reason": "no screenshot of this page was taken (a web entry needs text and "
                                             "screenshot)"}
            if own is not None:
                seen = shown
    task.left_out.extend(unshot.values())
    return kept


def _write_task(root: Path, agent: str, task: TaskExport, kept: dict[str, _Kept],
                episodes: list[tuple[Path, Trajectory]]) -> None:
    folder = root / "cache" / agent / task.task_id
    folder.mkdir(parents=True)
    index: dict[str, str] = {}
    for key in sorted(kept):
        k = kept[key]
        shot = k.shot.read_bytes()
        try:
            jpeg = shot if shot[:3] == b"\xff\xd8\xff" else png_to_jpeg(shot)
        except JudgeError as e:
            task.left_out.append({"url": k.page.url, "repeat": k.page.repeat, "step": k.page.step,
                                  "episode": k.page.episode, "reason": f"{k.shot.name}: {e}"})
            continue
        stem = cache_stem(key)
        (folder / f"{stem}.txt").write_text(k.text, "utf-8")
        (folder / f"{stem}.jpg").write_bytes(jpeg)
        index[key] = "web"
        task.pages.append(k.page)
    (folder / "index.json").write_text(json.dumps(index, indent=2, ensure_ascii=False), "utf-8")
    by_repeat: dict[int, str] = {}
    for _, traj in episodes:
        if traj.answer is not None and not traj.episode_error:
            by_repeat[traj.repeat] = traj.answer
    answers = root / "answers" / agent / task.task_id
    if by_repeat:
        answers.mkdir(parents=True)
    for repeat, answer in sorted(by_repeat.items()):
        (answers / f"answer_{repeat + 1}.md").write_text(answer, "utf-8")
        task.answers.append(f"answer_{repeat + 1}.md")
    sources: dict[str, list[str]] = {}
    for p in task.pages:
        sources.setdefault(p.key, []).append(f"answer_{p.repeat + 1}.md")
    meta = {"agent_name": agent, "task_id": task.task_id, "total_unique_urls": len(index),
            "all_unique_urls": sorted(index, key=str.lower), "urls": sources, "url_types": dict(index),
            "cached_url_count": len(index)}
    (root / "cache" / agent / f"{task.task_id}.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False),
                                                                   "utf-8")


def export_mind2web2_cache(run_dir: str | Path, out: str | Path, *, mode: str | None = None,
                           agent_name: str | None = None,
                           on_task: Callable[[TaskExport, int, int], None] | None = None) -> Mind2Web2Export:
    """Write RUN's rendered pages as Mind2Web 2 caches (and its answers as answer files) under ``out``.

    ``mode`` picks live or frozen episodes (needed when the run has both); ``agent_name`` names the agent
    folder (default: the run's agent). ``out`` must not exist or be empty: the export is built beside it and
    moved into place whole. ``on_task(task, done, total)`` is called after each task."""
    from ..models.run import load_run

    run_dir, out = Path(run_dir), Path(out)
    manifest = load_run(run_dir)
    agent = _folder_name(agent_name or manifest.agent_name or manifest.agent.name)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise JudgeError(f"{out} exists and is not empty; export into a new folder")
    chosen, by_task = _episodes(run_dir, mode)
    for task_id in by_task:
        try:
            check_id("task id", task_id)
        except ValueError as e:
            raise JudgeError(f"cannot name a cache folder after it: {e}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        tasks: list[TaskExport] = []
        for i, (task_id, episodes) in enumerate(sorted(by_task.items()), 1):
            task = TaskExport(task_id)
            _write_task(work, agent, task, _collect(task, run_dir, episodes), episodes)
            tasks.append(task)
            if on_task is not None:
                on_task(task, i, len(by_task))
        result = Mind2Web2Export(out, run_dir, agent, chosen, tasks)
        (work / PROVENANCE).write_text(json.dumps(result.summary(), indent=2, ensure_ascii=False) + "\n", "utf-8")
        if out.exists():
            out.rmdir()
        work.rename(out)
    except (Ego2WebError, OSError):
        shutil.rmtree(work, ignore_errors=True)
        raise
    return result
