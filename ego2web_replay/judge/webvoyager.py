"""The WebVoyager-style baseline: the final answer and the last k screenshots, no key points, no video."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ..models import JudgeSpec, Task, Verdict
from .client import Image, LLMClient, Message
from .episode import load_episode
from .prompts import PromptSet, parse_final
from .verdicts import CallLog

__all__ = ["WebVoyagerJudge"]


class WebVoyagerJudge:
    """One call: task, answer and the last ``last_k`` screenshots."""

    def __init__(self, client: LLMClient, prompts: PromptSet, *, last_k: int = 3) -> None:
        self.client = client
        self.prompts = prompts
        self.last_k = last_k
        self.spec = JudgeSpec(name="webvoyager", prompt_version=prompts.version, model=client.config.model,
                              base_url=client.config.base_url, settings={"last_k": last_k})

    def judge(self, episode_dir: Path, task: Task) -> Verdict:
        episode = load_episode(episode_dir)
        shots = episode.screenshots[-self.last_k:] if self.last_k > 0 else []
        answer = episode.answer if episode.answer is not None else "(no answer given)"
        system, user = self.prompts.render("final", instruction=task.instruction, answer=answer, count=len(shots))
        parts: list[str | Image] = [user + "\n"]
        for shot in shots:
            parts.append(f"Screenshot of step {shot.step} (URL: {shot.url or 'unknown'}):\n")
            parts.append(Image.from_path(shot.path, label=shot.rel))
        log = CallLog()
        result = log.add(self.client.chat([Message("system", [system]), Message("user", parts)], parse_final,
                                          stage="final"))
        ok = result.status == "success"
        return Verdict(task_id=episode.trajectory.task_id, mode=episode.trajectory.mode, judge=self.spec,
                       success=ok, score=1.0 if ok else 0.0, thoughts=result.thoughts,
                       kept_screenshots=[s.rel for s in shots], judged_at=datetime.now(UTC), **log.fields())
