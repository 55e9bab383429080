"""ego2web-replay tasks as BrowserGym environments (``pip install 'ego2web-replay[browsergym]'``).

::

    import gymnasium as gym
    from ego2web_replay.browsergym import register

    ids = register("tasks.jsonl", snapshots="snapshots/", mode="frozen")   # one id per task
    env = gym.make(ids[0])                          # 'browsergym/ego2web.<task-id>'
    obs, info = env.reset()                         # replay started, start page open, goal = instruction
    obs, reward, terminated, truncated, info = env.step("click('12')")
    ...
    env.close()                                     # <run>/episodes/<task>/frozen/trajectory.json

Each registered environment is BrowserGym's :class:`~browsergym.core.env.BrowserEnv`
(observation and action spaces unchanged, so BrowserGym and AgentLab agents run on it)
whose task starts the replay of the task's snapshot (``mode="frozen"``) or the
recording proxy (``"live"``, the live archive kept in the episode), launches Debian's
Chromium sealed behind it (:mod:`.env`), opens the start URL, and gives the instruction
as the goal, with the video's frames or captions as ``modality`` says (never the
evidence). Each episode is written as ``run`` writes one (:mod:`.episode`), into a run
folder under ``out`` (:mod:`.run`), so ``judge``, ``compare`` and ``report`` read it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from ..errors import Ego2WebError
from ..models import AgentSpec, InputSettings, ReplayConfig, RunSettings, load_tasks

__all__ = ["register", "gym_id", "ID_PREFIX"]

ID_PREFIX = "browsergym/ego2web."
_REPLAY_KEYWORDS = ("guard_mode", "check", "index", "processes", "wire")  # Replay() keywords, not config


def gym_id(task_id: str) -> str:
    """The gymnasium id of a task: ``browsergym/ego2web.<task-id>``."""
    return ID_PREFIX + task_id


def register(tasks_file: str | Path, snapshots: str | Path | None = None, mode: str = "frozen", *,
             tasks: list[str] | tuple[str, ...] = (), out: str | Path = "runs", run_id: str | None = None,
             agent: str = "browsergym", modality: str | None = "keyframes", keyframes: int = 8,
             video_fps: float = 1.0, max_side: int = 512, snapshot_id: str | None = None, guard: str = "open",
             upstream_ca: str | Path | None = None, keep_credentials: bool = False, slow_mo: int | None = None,
             timeout: int | None = None, **replay_options: Any) -> list[str]:
    """Register one gymnasium id per task of ``tasks_file`` (or of ``tasks``); returns the ids.

    ``snapshots`` is where frozen episodes find each task's snapshot (the newest, or
    ``snapshot_id``); ``mode`` is ``frozen`` or ``live``. Every episode of these ids is
    written into the run folder ``<out>/<run_id>`` (a new id by default), under the agent
    name ``agent``. ``modality`` (``video``, ``keyframes``, ``captions`` or ``none``),
    ``keyframes``, ``video_fps`` and ``max_side`` decide what the goal carries of the
    video, as ``run --modality`` does. ``guard``, ``upstream_ca`` and ``keep_credentials``
    are the live proxy's, as for ``run``. ``slow_mo`` and ``timeout`` (milliseconds) are
    BrowserGym's task settings (defaults 0 and 10,000). Any other keyword is a replay
    option (``miss``, ``sequence``, ``freeze``, ``fuzzy``, ``rules_files`` ... of
    :class:`~ego2web_replay.models.ReplayConfig`, or ``guard_mode``, ``index``, ``check``
    of :class:`~ego2web_replay.replay.Replay`).
    """
    import gymnasium as gym

    from ..runner.inputs import apply_inputs
    from .env import Ego2WebEnv
    from .episode import EpisodeSpec
    from .run import BrowserGymRun, browsergym_version

    if mode not in ("frozen", "live"):
        raise Ego2WebError(f"unknown mode {mode!r}; a BrowserGym task runs frozen or live")
    if mode == "frozen" and snapshots is None:
        raise Ego2WebError("frozen mode needs snapshots= (the folder holding recorded snapshots)")
    suite = load_tasks(tasks_file)
    chosen = suite.select(list(tasks))
    session = {k: replay_options.pop(k) for k in list(replay_options) if k in _REPLAY_KEYWORDS}
    try:
        replay = ReplayConfig.make(**replay_options) if replay_options else ReplayConfig()
        inputs = InputSettings(modality=modality, keyframes=keyframes, video_fps=video_fps,  # type: ignore[arg-type]
                               max_side=max_side)
    except (ValueError, TypeError) as e:
        raise Ego2WebError(f"register: {str(e).splitlines()[0]}") from None
    settings = RunSettings(mode=mode, snapshots_root=str(snapshots) if snapshots is not None else None,
                           snapshot_id=snapshot_id, guard=guard, replay=replay, keep_credentials=keep_credentials,
                           inputs=inputs)
    spec_of_agent = AgentSpec(name=agent, input_modality=modality or "none",  # type: ignore[arg-type]
                              settings={"harness": "browsergym", "browsergym_core_version": browsergym_version()})
    apply_inputs(spec_of_agent, inputs)
    run = BrowserGymRun(out=Path(out), suite=suite, agent=spec_of_agent, agent_name=agent, settings=settings,
                        task_ids=[t.id for t in chosen], run_id=run_id)
    ids = []
    for task in chosen:
        spec = EpisodeSpec(task=task, suite=suite, run=run, mode=mode, snapshots_root=snapshots,
                           snapshot_id=snapshot_id, replay=replay, replay_options=dict(session), guard=guard,
                           upstream_ca=Path(upstream_ca) if upstream_ca else None,
                           keep_credentials=keep_credentials, inputs=inputs)
        env_id = gym_id(task.id)
        gym.registry.pop(env_id, None)  # registering again (the other mode, other snapshots) replaces it
        gym.register(id=env_id, entry_point=partial(Ego2WebEnv, spec, spec_of_agent, slow_mo=slow_mo, timeout=timeout),
                     nondeterministic=True)
        ids.append(env_id)
    return ids
