"""Ego2WebJudge and its WebJudge-style baseline: key points, screenshot filtering, a strict verdict.

Stage 1 extracts key points from the instruction. Stage 2 summarises every
screenshot and scores it 1-5 for relevance to the key points, keeping every
one scored at or above ``threshold`` (the paper's relevance threshold δ).
Only when ``max_screenshots`` is set and more than that many pass is the set
cut down, and then to the highest-scored (ties: the earlier step first), so a
decisive early screenshot is never dropped for a later, weaker one; each cut
screenshot is marked ``capped`` in the verdict's checks. Stage 3 judges from
the instruction, key points, action history, the kept screenshots (in step
order) with their summaries, the final answer and, for Ego2WebJudge,
keyframes of the task's video evidence. The WebJudge-style baseline is the
same pipeline with its own prompts and no video.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import JudgeError
from ..media.keyframes import Keyframe, extract_keyframes
from ..models import JudgeSpec, Task, Verdict
from .client import ChatResult, Image, LLMClient, Message
from .episode import Shot, load_episode
from .prompts import (
    PromptSet,
    ScreenshotScore,
    parse_final,
    parse_key_points,
    parse_screenshot_score,
)
from .verdicts import CallLog

__all__ = ["PipelineJudge", "select_screenshots"]


def _numbered(items: list[str]) -> str:
    return "\n".join(f"{i}. {p}" for i, p in enumerate(items, 1)) or "(none)"


def select_screenshots(scored: list[dict[str, Any]], threshold: int,
                       cap: int | None = None) -> list[dict[str, Any]]:
    """The screenshots to keep, in the order given (step order): every one whose ``score`` is at least
    ``threshold``; with a ``cap`` and more than ``cap`` of them, the ``cap`` highest-scored, ties going to
    the one that comes first."""
    eligible = [i for i, s in enumerate(scored) if s["score"] >= threshold]
    if cap is not None and len(eligible) > cap:
        eligible = sorted(sorted(eligible, key=lambda i: -scored[i]["score"])[:cap])  # stable: ties by order
    return [scored[i] for i in eligible]


class PipelineJudge:
    """The three-stage judge; ``use_video`` decides Ego2WebJudge versus WebJudge-style."""

    def __init__(self, name: str, client: LLMClient, prompts: PromptSet, *, use_video: bool,
                 threshold: int = 3, max_screenshots: int | None = None, keyframes_per_range: int = 3,
                 keyframe_method: str = "even", keyframe_max_side: int = 512,
                 reference_key_points: bool = False) -> None:
        if not 1 <= threshold <= 5:
            raise JudgeError(f"threshold must be between 1 and 5 (the relevance scale), not {threshold}")
        if max_screenshots is not None and max_screenshots < 0:
            raise JudgeError(f"max_screenshots must be 0 or more (or unset: no cap), not {max_screenshots}")
        self.name = name
        self.client = client
        self.prompts = prompts
        self.use_video = use_video
        self.settings: dict[str, Any] = {
            "threshold": threshold, "max_screenshots": max_screenshots, "use_video": use_video,
            "reference_key_points": reference_key_points,
        }
        if use_video:
            self.settings.update(keyframes_per_range=keyframes_per_range, keyframe_method=keyframe_method,
                                 keyframe_max_side=keyframe_max_side)
        self.spec = JudgeSpec(name=name, prompt_version=prompts.version, model=client.config.model,
                              base_url=client.config.base_url, settings=self.settings)

    # -- stages ------------------------------------------------------------------
    def key_points(self, task: Task, log: CallLog) -> list[str]:
        if self.settings["reference_key_points"] and task.key_points:
            return list(task.key_points)
        system, user = self.prompts.render("keypoints", instruction=task.instruction)
        result = self.client.chat([Message("system", [system]), Message("user", [user])],
                                  parse_key_points, stage="keypoints")
        return log.add(result).points

    def score_screenshots(self, task: Task, points: list[str], shots: list[Shot],
                          log: CallLog) -> list[dict[str, Any]]:
        def score(shot: Shot) -> tuple[Shot, ChatResult[ScreenshotScore]]:
            system, user = self.prompts.render("screenshot", instruction=task.instruction,
                                               key_points=_numbered(points), step=shot.step,
                                               url=shot.url or "unknown")
            msg = Message("user", [user, Image.from_path(shot.path, label=shot.rel)])
            return shot, self.client.chat([Message("system", [system]), msg], parse_screenshot_score,
                                          stage=f"screenshot:{shot.rel}")

        with ThreadPoolExecutor(max_workers=max(1, min(len(shots), self.client.config.concurrency))) as pool:
            results = list(pool.map(score, shots))  # in step order, whatever order they finish in
        scored: list[dict[str, Any]] = []
        for shot, result in results:
            parsed = log.add(result)
            scored.append({"kind": "screenshot_relevance", "screenshot": shot.rel, "step": shot.step,
                           "score": parsed.score, "summary": parsed.summary, "kept": False})
        for s in select_screenshots(scored, self.settings["threshold"], self.settings["max_screenshots"]):
            s["kept"] = True
        for s in scored:
            if s["score"] >= self.settings["threshold"] and not s["kept"]:
                s["capped"] = True  # passed δ but over --max-screenshots: counted, never silent
        return scored

    def keyframes(self, task: Task) -> list[Keyframe]:
        video = task.video_path(None)
        if not self.use_video or video is None:
            return []
        return extract_keyframes(video, task.evidence, per_range=self.settings["keyframes_per_range"],
                                 method=self.settings["keyframe_method"],
                                 max_side=self.settings["keyframe_max_side"])

    def final(self, task: Task, points: list[str], history: list[str], kept: list[tuple[Shot, str]],
              answer: str | None, frames: list[Keyframe], log: CallLog) -> tuple[bool, str]:
        system, user = self.prompts.render("final", instruction=task.instruction,
                                           key_points=_numbered(points), actions="\n".join(history) or "(none)")
        parts: list[str | Image] = [user + "\n"]
        if kept:
            parts.append(f"\nThe {len(kept)} most relevant screenshots, with summaries:\n")
            for shot, summary in kept:
                parts.append(f"Screenshot of step {shot.step} (URL: {shot.url or 'unknown'}). Summary: {summary}\n")
                parts.append(Image.from_path(shot.path, label=shot.rel))
        else:
            parts.append("\nNo screenshot was relevant enough to keep.\n")
        parts.append(f"\nFinal answer of the agent: {answer if answer is not None else '(no answer given)'}\n")
        if frames:
            parts.append(f"\nVideo keyframes of the evidence ({len(frames)}):\n")
            for f in frames:
                which = "whole video" if f.range_index < 0 else f"evidence range {f.range_index + 1}"
                parts.append(f"Keyframe at {f.label} ({which}):\n")
                parts.append(Image.from_path(f.path, label=f"keyframe@{f.timestamp:g}s:{Path(f.path).name}"))
        parts.append("\nNow give your Thoughts and Status.")
        result = self.client.chat([Message("system", [system]), Message("user", parts)], parse_final,
                                  stage="final")
        verdict = log.add(result)
        return verdict.status == "success", verdict.thoughts

    # -- the judge -----------------------------------------------------------------
    def judge(self, episode_dir: Path, task: Task) -> Verdict:
        episode = load_episode(episode_dir)
        frames = self.keyframes(task)
        log = CallLog()
        points = self.key_points(task, log)
        scored = self.score_screenshots(task, points, episode.screenshots, log)
        by_rel = {s.rel: s for s in episode.screenshots}
        kept = [(by_rel[s["screenshot"]], s["summary"]) for s in scored if s["kept"]]
        success, thoughts = self.final(task, points, episode.action_history(), kept, episode.answer, frames, log)
        checks = scored + [{"kind": "keyframe", "timestamp": f.timestamp, "range_index": f.range_index,
                            "path": f.path} for f in frames]
        return Verdict(task_id=episode.trajectory.task_id, mode=episode.trajectory.mode, judge=self.spec,
                       success=success, score=1.0 if success else 0.0, thoughts=thoughts, key_points=points,
                       kept_screenshots=[shot.rel for shot, _ in kept], checks=checks,
                       judged_at=datetime.now(UTC), **log.fields())
