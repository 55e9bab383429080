"""Judge every episode of a run folder and write the verdicts next to the episodes.

Tasks come from ``--tasks FILE`` or from ``suite_path`` in ``<run>/run.json``.
LLM calls are cached in ``<run>/judge-cache/`` so re-judging is free and
reproducible. An error in one episode (a missing file, an unreadable video,
a reply that cannot be parsed) is recorded in that episode's verdict and the
others go on; an unreachable endpoint stops the run with one line.

An episode that could not run (its end reason is not the agent's: ``setup_error``,
``browser_error``, ``infra_error``; :data:`~ego2web_replay.models.EPISODE_ERRORS`)
is judged by no judge: :func:`judge_episode` gives it an error verdict saying why,
with ``episode_error`` set, so every judge, built in or plugged in, leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import Ego2WebError, JudgeError
from ..models import (
    EPISODE_ERRORS,
    RUN_MANIFEST,
    JudgeSpec,
    Mode,
    RunManifest,
    Task,
    TaskSuite,
    Verdict,
    load_tasks,
    load_trajectory,
    parse_episode_folder,
    read_model,
)
from .client import EndpointError
from .registry import Judge, make_judge
from .verdicts import REPLACED, error_verdict, replaced_by, write_verdict

__all__ = ["judge_run", "judge_episode", "find_episodes", "load_run_tasks", "summarize", "prepare_task",
           "VerdictExecutor"]

MODES: tuple[Mode, ...] = ("live", "frozen")


class VerdictExecutor(Protocol):
    """Computes verdicts somewhere else; :func:`judge_run` writes them as they come back."""

    def verdicts(self, episodes: Sequence[Path], suite: TaskSuite, judge: Judge, *, judge_name: str,
                 model: str | None, base_url: str | None, settings: dict[str, Any]) -> Iterator[tuple[Path, Verdict]]:
        ...


def find_episodes(run_dir: Path) -> list[Path]:
    """Episode folders ``<run>/episodes/<task>/<live|frozen>[-r<repeat>]``, sorted."""
    root = Path(run_dir) / "episodes"
    if not root.is_dir():
        raise JudgeError(f"{run_dir}: no episodes/ folder; is this a run folder (runs/<run-id>)?")
    found = sorted(d for d in root.glob("*/*") if d.is_dir() and parse_episode_folder(d.name) is not None)
    if not found:
        raise JudgeError(f"{root}: no episodes to judge (expected episodes/<task-id>/<live|frozen>/)")
    return found


def load_run_tasks(run_dir: Path, tasks: str | Path | TaskSuite | None) -> TaskSuite:
    """The task suite of a run: given, or named by ``suite_path`` in ``run.json``."""
    if isinstance(tasks, TaskSuite):
        return tasks
    if tasks is not None:
        return load_tasks(tasks)
    manifest = Path(run_dir) / RUN_MANIFEST
    try:
        suite = read_model(manifest, RunManifest, "run manifest", JudgeError).suite_path
    except FileNotFoundError:
        raise JudgeError(f"{manifest}: not found; pass --tasks FILE to say which tasks the run used") from None
    except JudgeError as e:
        raise JudgeError(f"{e}; pass --tasks FILE") from None
    if not suite:
        raise JudgeError(f"{manifest}: has no suite_path; pass --tasks FILE")
    return load_tasks(suite)


def prepare_task(task: Task, base: Path | None) -> Task:
    """Resolve the task's video and rubric file paths against the suite's folder."""
    update: dict[str, Any] = {}
    video = task.video_path(base)
    if video is not None:
        update["video"] = str(video)
    if isinstance(task.rubric, str) and base is not None and not Path(task.rubric).is_absolute():
        update["rubric"] = str(base / task.rubric)
    return task.model_copy(update=update) if update else task


def judge_episode(judge: Judge, episode: Path, task: Task | Callable[[], Task]) -> Verdict:
    """The verdict on one episode folder (``<...>/<task-id>/<mode>[-r<repeat>]``); a failure in it
    (but an unreachable endpoint, which stops the whole judging) is an error verdict."""
    task_id = episode.parent.name
    mode, repeat = parse_episode_folder(episode.name) or (episode.name, 0)
    unrun = _could_not_run(episode)
    try:
        if unrun is not None:
            verdict = error_verdict(judge.spec, task_id, mode, unrun[1], episode_error=unrun[0])  # type: ignore[arg-type]
        else:
            verdict = judge.judge(episode, task() if callable(task) else task)
    except EndpointError:
        raise
    except Ego2WebError as e:
        verdict = error_verdict(judge.spec, task_id, mode, str(e))  # type: ignore[arg-type]
    except Exception as e:  # an unexpected failure in one episode must not lose the others
        verdict = error_verdict(judge.spec, task_id, mode, f"{type(e).__name__}: {e}")  # type: ignore[arg-type]
    verdict.repeat = repeat
    return verdict


def _could_not_run(episode: Path) -> tuple[str, str] | None:
    """(end reason, why it is not judged) for an episode that could not run; None for any other (and for
    an unreadable trajectory, which the judge reports itself)."""
    try:
        traj = load_trajectory(episode)
    except Ego2WebError:
        return None
    if traj.end_reason not in EPISODE_ERRORS:
        return None
    return traj.end_reason, (f"not judged: the episode could not run ({traj.end_reason}: "
                             f"{traj.error or 'no reason recorded'}); it is not the agent's failure")


def _judge_one(judge: Judge, episode: Path, suite: TaskSuite) -> Verdict:
    verdict = judge_episode(judge, episode, lambda: prepare_task(suite.get(episode.parent.name), suite.base_dir))
    write_verdict(episode, verdict)
    return verdict


def judge_run(run_dir: str | Path, judge_name: str, *, tasks: str | Path | TaskSuite | None = None,
              model: str | None = None, base_url: str | None = None, workers: int = 4,
              progress: bool = True, settings: dict[str, Any] | None = None,
              cache_dir: str | Path | None = None, task_ids: list[str] | None = None,
              on_verdict: Callable[[Path, Verdict], None] | None = None,
              executor: VerdictExecutor | None = None) -> list[Verdict]:
    """Judge every episode of ``run_dir`` with ``judge_name``; return the verdicts in episode order.

    Each verdict is written to ``<episode>/verdicts/<judge>.json``; ``on_verdict(episode_dir, verdict)``
    is called (in this thread) as each one is made. ``executor`` computes the verdicts elsewhere (a
    :class:`~.ray_judge.RayJudge`: each a Ray task); they are written here all the same.
    """
    run = Path(run_dir)
    opts = dict(settings or {})
    opts.setdefault("cache_dir", Path(cache_dir) if cache_dir else run / "judge-cache")
    opts.setdefault("concurrency", max(1, workers))
    judge = make_judge(judge_name, model=model, base_url=base_url, **opts)
    if not run.is_dir():
        raise JudgeError(f"{run}: run folder not found")
    episodes = find_episodes(run)
    if task_ids:
        episodes = [e for e in episodes if e.parent.name in set(task_ids)]
        if not episodes:
            raise JudgeError(f"{run}: no episodes for task ids {', '.join(task_ids)}")
    suite = load_run_tasks(run, tasks)
    results: dict[Path, Verdict] = {}
    console = Console(stderr=True, soft_wrap=True)  # a warning line is never folded
    _say_replaced(console, judge_name, episodes, getattr(judge, "spec", None))
    columns = (TextColumn(f"judging ({judge_name})"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        job = bar.add_task("judge", total=len(episodes))
        if executor is not None:
            made = executor.verdicts(episodes, suite, judge, judge_name=judge_name, model=model, base_url=base_url,
                                     settings=opts)
            for episode, verdict in made:
                write_verdict(episode, verdict)
                results[episode] = verdict
                if on_verdict is not None:
                    on_verdict(episode, verdict)
                bar.advance(job)
            return [results[e] for e in episodes]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = {pool.submit(_judge_one, judge, ep, suite): ep for ep in episodes}
            try:
                for fut in as_completed(futures):
                    results[futures[fut]] = verdict = fut.result()
                    if on_verdict is not None:
                        on_verdict(futures[fut], verdict)
                    bar.advance(job)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    return [results[e] for e in episodes]


def _say_replaced(console: Console, judge_name: str, episodes: list[Path], spec: JudgeSpec | None) -> None:
    """One line when verdicts of this judge made with another model or prompt version are about to be
    replaced: they are kept (``verdicts/replaced/``), never silently overwritten."""
    if spec is None:
        return
    olds = [old for ep in episodes if (old := replaced_by(ep, spec)) is not None]
    if not olds:
        return
    made = sorted({f"model {o.model or 'none'}, prompts {o.prompt_version or 'none'}" for o in olds})
    console.print(f"warning: replacing {len(olds)} {judge_name} verdict(s) made with {'; '.join(made)} (now model "
                  f"{spec.model or 'none'}, prompts {spec.prompt_version or 'none'}); the old ones are kept in "
                  f"<episode>/verdicts/{REPLACED}/", markup=False, highlight=False)


def summarize(verdicts: list[Verdict]) -> dict[str, dict[str, Any]]:
    """Per mode (and ``all``): episodes, successes, success rate, mean score, judge errors (``errors``) and
    episodes that could not run (``episode_errors``), neither in any rate."""
    out: dict[str, dict[str, Any]] = {}
    for key in (*MODES, "all"):
        vs = [v for v in verdicts if key == "all" or v.mode == key]
        if not vs:
            continue
        judged = [v for v in vs if v.error is None]
        unrun = sum(v.episode_error is not None for v in vs)
        wins = sum(v.success for v in judged)
        out[key] = {"episodes": len(vs), "judged": len(judged), "success": wins,
                    "success_rate": wins / len(judged) if judged else None,
                    "mean_score": sum(v.score for v in judged) / len(judged) if judged else None,
                    "errors": len(vs) - len(judged) - unrun, "episode_errors": unrun,
                    "prompt_tokens": sum(v.prompt_tokens for v in vs),
                    "completion_tokens": sum(v.completion_tokens for v in vs)}
    return out
