"""Verdicts as Ray tasks: ``judge --executor ray`` (each episode judged on a node of a Ray cluster).

The nodes share no folder with the driver. Each task gets, through the object
store:

* the episode folder, packed as a tar by the driver, and the episode's task
  with the files it names (the video, a rubric file);
* the judge's name and settings, and the run's LLM-call cache (put once, shared
  by every task), so a call already made is not made again;
* the driver's endpoint and object-storage variables (``OPENAI_API_KEY``,
  ``AWS_*``, see :data:`~ego2web_replay.raycluster.DRIVER_VARIABLES`).

The worker unpacks all that into a private temporary folder, builds the judge,
judges the episode (a frozen episode's snapshot is read where the trajectory
says: a folder the node can read, or object storage) and returns the verdict
with the cache entries it made. The driver writes the verdicts, the new cache
entries and the database rows exactly as a local judge does. A worker that dies
is retried by Ray (``max_retries``); after that, and for any error on the worker,
the episode gets an error verdict. An unreachable endpoint stops the judging
with one line, as it does locally.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_bytes
from ..errors import Ego2WebError
from ..media.keyframes import keyframe_dir
from ..models import Task, TaskSuite, Verdict, load_trajectory, parse_episode_folder, save_model
from ..raycluster import connected, driver_env, swap_env
from .client import EndpointError
from .registry import Judge, make_judge
from .run import judge_episode, prepare_task
from .verdicts import error_verdict

__all__ = ["RayJudge", "JudgeJob", "remote_verdict"]


@dataclass
class JudgeJob:
    """One episode to judge, with everything it needs (picklable)."""

    task_id: str
    folder: str  # the episode folder's name: <mode>[-r<repeat>]
    episode_tar: bytes
    task: Task
    files: dict[str, bytes] = field(default_factory=dict)  # "video" / "rubric": the bytes of the task's files
    names: dict[str, tuple[str, int]] = field(default_factory=dict)  # their file names and mtimes (ns)
    snapshot: str | None = None  # where the frozen snapshot is (absolute path or URL); None: as recorded
    own_snapshot: str | None = None  # a live episode's own archive, relative to the episode folder


def _pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def make_job(episode: Path, task: Task) -> JudgeJob:
    """Pack one episode and its (prepared) task on the driver."""
    job = JudgeJob(task_id=episode.parent.name, folder=episode.name, episode_tar=_pack(episode), task=task)
    video = task.video_path(None)
    rubric = Path(task.rubric) if isinstance(task.rubric, str) else None
    for key, path in (("video", video), ("rubric", rubric)):
        if path is not None and path.is_file():  # the same name and time: keyframes are keyed by them
            job.files[key] = path.read_bytes()
            job.names[key] = (path.name, path.stat().st_mtime_ns)
    try:
        traj = load_trajectory(episode)
    except Ego2WebError:
        return job  # the worker's judge reports it, as locally
    if traj.snapshot_path:
        from ..snapshots.location import is_remote

        p = Path(traj.snapshot_path)
        if is_remote(traj.snapshot_path):
            job.snapshot = traj.snapshot_path
        elif p.is_absolute() and p.is_relative_to(episode.resolve()):
            job.own_snapshot = p.relative_to(episode.resolve()).as_posix()
        elif p.is_absolute() or p.is_dir():
            job.snapshot = str(p.resolve())
        else:
            job.own_snapshot = p.as_posix()
    return job


# ---------------------------------------------------------------- worker side

def remote_verdict(job: JudgeJob, judge_name: str, model: str | None, base_url: str | None,
                   settings: dict[str, Any], cache: dict[str, bytes],
                   env: dict[str, str]) -> tuple[Verdict, dict[str, bytes], dict[str, bytes], str | None]:
    """Judge one episode on a worker; returns the verdict, the cache entries made for it, and the video's
    keyframe folder (its files, and its path here)."""
    home = Path(tempfile.mkdtemp(prefix="ego2web-judge-"))  # 0700
    try:
        with swap_env({**env, "EGO2WEB_REPLAY_HOME": str(home)}):
            return _judge_here(job, home, judge_name, model, base_url, settings, cache)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _judge_here(job: JudgeJob, home: Path, judge_name: str, model: str | None, base_url: str | None,
                settings: dict[str, Any],
                cache: dict[str, bytes]) -> tuple[Verdict, dict[str, bytes], dict[str, bytes], str | None]:
    episode = home / "run" / "episodes" / job.task_id / job.folder
    episode.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(job.episode_tar), mode="r") as tar:
        tar.extractall(episode, filter="data")
    if job.snapshot or job.own_snapshot:  # point the trajectory at what this node can read
        traj = load_trajectory(episode)
        traj.snapshot_path = job.snapshot or str(episode / str(job.own_snapshot))
        save_model(episode / "trajectory.json", traj)
    update: dict[str, Any] = {}
    for key, data in job.files.items():
        name, mtime_ns = job.names[key]
        target = home / "inputs" / key / name
        target.parent.mkdir(parents=True)
        target.write_bytes(data)
        os.utime(target, ns=(mtime_ns, mtime_ns))
        update[key] = str(target)
    task = job.task.model_copy(update=update) if update else job.task
    cache_dir = home / "judge-cache"
    cache_dir.mkdir()
    for name, data in cache.items():
        (cache_dir / name).write_bytes(data)
    judge = make_judge(judge_name, model=model, base_url=base_url, **{**settings, "cache_dir": cache_dir})
    verdict = judge_episode(judge, episode, task)
    made = {p.name: p.read_bytes() for p in cache_dir.glob("*.json") if p.name not in cache}
    frames: dict[str, bytes] = {}
    folder = None
    if "video" in update:
        folder = keyframe_dir(Path(update["video"]))
        if folder.is_dir():
            frames = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    return verdict, made, frames, str(folder) if folder else None


# ---------------------------------------------------------------- driver side

@dataclass(frozen=True)
class RayJudge:
    """Each episode's verdict a Ray task on the cluster at ``address`` (``None``: ``$RAY_ADDRESS``, else a
    cluster started for the command); the driver writes everything."""

    address: str | None = None
    num_cpus: float = 1.0
    memory_mb: int | None = None
    max_retries: int = 2

    def verdicts(self, episodes: Sequence[Path], suite: TaskSuite, judge: Judge, *, judge_name: str,
                 model: str | None, base_url: str | None, settings: dict[str, Any]) -> Iterator[tuple[Path, Verdict]]:
        cache_dir = Path(settings["cache_dir"])
        worker_settings = {k: v for k, v in settings.items() if k != "cache_dir"}
        with connected(self.address) as ray:
            cache = {p.name: p.read_bytes() for p in cache_dir.glob("*.json")} if cache_dir.is_dir() else {}
            cache_ref, env = ray.put(cache), driver_env()
            options: dict[str, Any] = {"num_cpus": self.num_cpus, "max_retries": self.max_retries,
                                       "retry_exceptions": False, "scheduling_strategy": "SPREAD"}
            if self.memory_mb:
                options["memory"] = self.memory_mb * 1024 * 1024
            task = ray.remote(remote_verdict).options(**options)
            pending: dict[Any, tuple[Path, Task]] = {}
            try:
                for episode in episodes:
                    try:
                        prepared = prepare_task(suite.get(episode.parent.name), suite.base_dir)
                    except Ego2WebError as e:  # the same error verdict as a local judge gives
                        yield episode, _error(judge, episode, str(e))
                        continue
                    job = make_job(episode, prepared)
                    ref = task.remote(job, judge_name, model, base_url, worker_settings, cache_ref, env)
                    pending[ref] = (episode, prepared)
                while pending:
                    done, _ = ray.wait(list(pending), num_returns=1)
                    for ref in done:
                        episode, prepared = pending.pop(ref)
                        yield episode, self._collect(ray, ref, episode, judge, cache_dir, prepared)
            finally:  # interrupted, or the endpoint is unreachable: start nothing more
                for ref in pending:
                    ray.cancel(ref, force=True)

    def _collect(self, ray: Any, ref: Any, episode: Path, judge: Judge, cache_dir: Path, task: Task) -> Verdict:
        try:
            verdict, made, frames, worker_dir = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if getattr(e, "cause", None) is not None else e
            if isinstance(cause, EndpointError):
                raise cause from None  # the endpoint is down for every episode: stop, as locally
            text = str(cause).strip().splitlines()
            error = f"judging on the Ray worker failed: {text[-1] if text else type(cause).__name__}"
        except ray.exceptions.RayError as e:  # the worker or its node died, retries spent
            first = str(e).strip().splitlines()
            error = (f"Ray worker lost ({self.max_retries} retries spent): {type(e).__name__}: "
                     f"{first[0] if first else ''}")
        else:
            for name, data in made.items():
                atomic_write_bytes(cache_dir / name, data)
            return _adopt_keyframes(verdict, frames, worker_dir, task)
        return _error(judge, episode, error)


def _adopt_keyframes(verdict: Verdict, frames: dict[str, bytes], worker_dir: str | None, task: Task) -> Verdict:
    """Place the keyframes a worker extracted beside the driver's video (where a local judge puts them,
    merging the folder's index) and point the verdict at them."""
    video = task.video_path(None)
    if not frames or worker_dir is None or video is None:
        return verdict
    folder = keyframe_dir(video)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in frames.items():
        if name == "index.json":
            continue
        if not (folder / name).is_file():
            atomic_write_bytes(folder / name, data)
    if "index.json" in frames:
        theirs = json.loads(frames["index.json"])
        try:
            mine = json.loads((folder / "index.json").read_text("utf-8"))
        except (OSError, ValueError):
            mine = {**theirs, "sets": {}}
        if mine.get("version") == theirs.get("version"):
            mine["video"] = video.name
            mine.setdefault("sets", {}).update(theirs.get("sets", {}))
            atomic_write_bytes(folder / "index.json", (json.dumps(mine, indent=1) + "\n").encode("utf-8"))
    text = verdict.model_dump_json().replace(json.dumps(worker_dir)[1:-1], json.dumps(str(folder))[1:-1])
    return Verdict.model_validate_json(text)


def _error(judge: Judge, episode: Path, error: str) -> Verdict:
    mode, repeat = parse_episode_folder(episode.name) or (episode.name, 0)
    verdict = error_verdict(judge.spec, episode.parent.name, mode, error)  # type: ignore[arg-type]
    verdict.repeat = repeat
    return verdict
