"""Builders of snapshot and run folders for tracking tests: small, real files.

``make_suite``, ``make_snapshot`` and ``make_run`` write the same files the
recorder, the runner and the judges write (manifest + CDXJ, run.json,
trajectory.json, verdicts, screenshots), so the tracker is tested against the
formats and not against mocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..models import (
    RUN_MANIFEST,
    Action,
    AgentSpec,
    JudgeSpec,
    ReplayLogEntry,
    ReplayStats,
    RunManifest,
    RunSettings,
    SnapshotManifest,
    Step,
    Trajectory,
    Verdict,
    episode_dir,
    save_model,
)
from ..png import png_bytes

__all__ = ["make_suite", "make_snapshot", "EpisodeSpec", "make_run"]

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def make_suite(path: Path, tasks: dict[str, str], videos: dict[str, str] | None = None) -> Path:
    """A JSON suite of tasks ``{task_id: category}``, with ``videos`` ``{task_id: relative path}``."""
    items = [{"id": tid, "instruction": f"Do {tid}", "category": cat, "start_url": f"https://{tid}.example/",
              **({"video": videos[tid]} if videos and tid in videos else {})}
             for tid, cat in tasks.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(items, indent=1), "utf-8")
    return path


def make_snapshot(root: Path, task_id: str, snapshot_id: str, resources: list[tuple[str, int, str]]) -> Path:
    """``root/<task>/<snapshot>/`` with a manifest and a CDXJ index of ``(url, status, digest)``."""
    d = root / task_id / snapshot_id
    d.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (url, status, digest) in enumerate(resources):
        host = url.split("/")[2]
        key = ",".join(reversed(host.split("."))) + ")/" + url.split("/", 3)[-1] if url.count("/") > 2 else url
        blob = {"url": url, "mime": "text/html", "status": str(status), "digest": digest, "length": 100 + i,
                "offset": i * 200, "filename": "archive.warc.zst"}
        if i % 2:
            blob["method"] = "POST"
        lines.append(f"{key} 20260105120000 {json.dumps(blob)}")
    (d / "index.cdxj").write_text("\n".join(sorted(lines)) + "\n", "utf-8")
    manifest = SnapshotManifest(task_id=task_id, snapshot_id=snapshot_id, created_at=T0, archive="archive.warc.zst",
                                start_url=resources[0][0] if resources else None,
                                pages=[u for u, _, _ in resources[:1]], exchanges=len(resources))
    save_model(d / "manifest.json", manifest)
    return d


@dataclass
class EpisodeSpec:
    """One episode to write: its task, mode, verdicts per judge, and replay misses."""

    task_id: str
    mode: str
    verdicts: dict[str, bool] = field(default_factory=dict)
    miss: int = 0
    answer: str | None = "42"
    screenshots: int = 1
    keyframes: int = 0
    verdict_errors: dict[str, str] = field(default_factory=dict)  # judge -> error: a verdict not made
    repeat: int = 0
    validity: str | None = None  # frozen only: complete / degraded / off-snapshot
    snapshot_id: str = "s1"  # the snapshot replayed (frozen) or the episode's own archive (live)
    truncated: int = 0  # frozen only: answers from truncated captures (WARC-Truncated)
    end_reason: str | None = None  # default: answered (with an answer), else stopped
    error: str | None = None  # the trajectory's error (with an end reason such as setup_error)
    replay_log: list[ReplayLogEntry] = field(default_factory=list)  # frozen only: the replay log (counted in)


def make_run(root: Path, run_id: str, agent: AgentSpec, episodes: list[EpisodeSpec],
             suite: Path | None = None, started_at: datetime = T0) -> Path:
    """``root/<run>/`` with run.json, trajectories, screenshots and verdicts."""
    rd = root / run_id
    rd.mkdir(parents=True, exist_ok=True)
    modes = sorted({e.mode for e in episodes})
    save_model(rd / RUN_MANIFEST, RunManifest(
        run_id=run_id, started_at=started_at, suite_path=str(suite) if suite else None, agent=agent,
        agent_name=agent.name, modes=modes, settings=RunSettings(mode=modes[0] if len(modes) == 1 else "both",
                                                                 repeats=1 + max(e.repeat for e in episodes)),
        versions={"ego2web_replay": "0.1.0"}, machine={"cpus": 2}))
    for e in episodes:
        ed = episode_dir(rd, e.task_id, e.mode, e.repeat)
        (ed / "screenshots").mkdir(parents=True, exist_ok=True)
        steps = []
        for i in range(e.screenshots):
            (ed / "screenshots" / f"step-{i:03d}.png").write_bytes(png_bytes(4, 4, (40 * i % 255, 120, 200)))
            steps.append(Step(index=i, action=Action(kind="goto", url=f"https://{e.task_id}.example/p{i}"),
                              url=f"https://{e.task_id}.example/p{i}", screenshot=f"screenshots/step-{i:03d}.png",
                              thought=f"step {i} thought"))
        if e.answer is not None:
            steps.append(Step(index=len(steps), action=Action(kind="answer", answer=e.answer)))
        if e.keyframes:
            (ed / "keyframes").mkdir(exist_ok=True)
            for k in range(e.keyframes):
                (ed / "keyframes" / f"frame-{k:02d}.png").write_bytes(png_bytes(4, 4, (10, 200, 10)))
        replay = None
        if e.mode == "frozen":
            own = [x for x in e.replay_log if x.outcome != "shared"]
            aside = [x.volatile or "" for x in own]
            sources = [x.shared_from or "?" for x in e.replay_log if x.outcome == "shared"]
            replay = ReplayStats(exact=10, canonical=2 + len([a for a in aside if a]), fuzzy=1, miss=e.miss,
                                 learned=sum(a.startswith("learned") for a in aside),
                                 fresh_id=sum(a.startswith("fresh-id") for a in aside),
                                 shared=len(sources), shared_from={s: sources.count(s) for s in sources},
                                 missed_urls=[f"https://{e.task_id}.example/missing{i}" for i in range(e.miss)],
                                 truncated=e.truncated, log=list(e.replay_log),
                                 validity=e.validity)  # type: ignore[arg-type]
        traj = Trajectory(task_id=e.task_id, instruction=f"Do {e.task_id}", mode=e.mode,  # type: ignore[arg-type]
                          snapshot_id=e.snapshot_id, agent=agent, steps=steps, answer=e.answer,
                          end_reason=e.end_reason or ("answered" if e.answer else "stopped"),  # type: ignore[arg-type]
                          error=e.error, started_at=started_at,
                          finished_at=started_at + timedelta(seconds=30), replay=replay, repeat=e.repeat)
        save_model(ed / "trajectory.json", traj)
        for judge, ok in e.verdicts.items():
            v = Verdict(task_id=e.task_id, mode=e.mode, judge=JudgeSpec(name=judge, model="m1"),  # type: ignore[arg-type]
                        repeat=e.repeat, success=ok, score=1.0 if ok else 0.0, thoughts=f"{judge} thinks {'yes' if ok else 'no'}",
                        judged_at=started_at + timedelta(minutes=1))
            save_model(ed / "verdicts" / f"{judge}.json", v)
        for judge, error in e.verdict_errors.items():
            v = Verdict(task_id=e.task_id, mode=e.mode, judge=JudgeSpec(name=judge, model="m1"),  # type: ignore[arg-type]
                        repeat=e.repeat, success=False, score=0.0, error=error, judged_at=started_at + timedelta(minutes=1))
            save_model(ed / "verdicts" / f"{judge}.json", v)
    return rd
