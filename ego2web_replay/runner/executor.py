"""Where episodes run: the runner hands an :class:`Executor` episode jobs and gets summaries back.

An episode job is an :class:`~.episode.EpisodeRequest` (picklable: paths, the
task, the agent's name and settings); running it means calling
:func:`~.episode.run_episode`, which writes the episode folder and returns an
:class:`~.episode.EpisodeSummary`. Executors never write anywhere else: the
runner's caller records the summaries (the tracking database is written by the
parent process only). Each worker runs one episode at a time. Its frozen
episodes of step agents are warm (:mod:`.warm`): the worker keeps one replay
front, the snapshots it opened and one Chromium for the whole run, and gives
each episode a fresh browser context and its own replay counts; other
episodes start their own proxy and Chromium (mitmproxy allows one proxy per
process).

* :class:`InlineExecutor` runs the jobs one after another in this process;
* :class:`ProcessExecutor` runs them in N spawned local processes.

A distributed executor (Ray, Dask, a batch queue) implements the same one
method: submit the jobs, yield each summary as it comes back, and turn a lost
worker into a failed summary with :func:`crashed` rather than an exception.
An episode lost with its worker is an ``infra_error`` (:func:`infra_failure`):
never the agent's failure; the run counts it and ``--resume`` runs it again.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Protocol, runtime_checkable

from ..models import AgentSpec, Trajectory, save_model
from .episode import EpisodeRequest, EpisodeSummary, run_episode

log = logging.getLogger(__name__)

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "crashed", "default_executor", "infra_failure",
           "log_start"]


@runtime_checkable
class Executor(Protocol):
    """Runs episode jobs and yields their summaries as they finish (in any order)."""

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]: ...


def infra_failure(job: EpisodeRequest, error: str) -> EpisodeSummary:
    """Record (in the parent) an episode lost to the infrastructure: a trajectory with ``infra_error``."""
    final = job.folder
    if final.exists():
        shutil.rmtree(final)
    final.mkdir(parents=True)
    traj = Trajectory(task_id=job.task.id, instruction=job.task.instruction, mode=job.mode,  # type: ignore[arg-type]
                      agent=AgentSpec(name=job.agent_name), end_reason="infra_error", error=error, repeat=job.repeat)
    save_model(final / "trajectory.json", traj)
    return EpisodeSummary(task_id=job.task.id, mode=job.mode, ok=False, end_reason="infra_error", steps=0,
                          answer=None, misses=None, error=error, path=final, repeat=job.repeat)


def crashed(job: EpisodeRequest, error: BaseException | str) -> EpisodeSummary:
    """The summary of a job whose worker died before it could return one (an ``infra_error``)."""
    return infra_failure(job, f"worker crashed: {error}")


def log_start(job: EpisodeRequest) -> None:
    """INFO: an episode is handed out (logged here, in the parent, where ``-v`` set logging up).

    ``run_suite`` logs each episode's end as its summary comes back, whatever the executor.
    """
    log.info("episode start: %s %s%s (agent %s)", job.task.id, job.mode,
             f" repeat {job.repeat}" if job.repeat else "", job.agent_name)


class InlineExecutor:
    """One job at a time, in this process."""

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]:
        from .warm import warm_worker

        with warm_worker() as warm:  # one browser and replay front for these episodes, stopped after
            for job in jobs:
                log_start(job)
                yield run_episode(job, warm)


class ProcessExecutor:
    """Up to ``workers`` jobs at once, each in a spawned process of a local pool; each process keeps
    a warm worker (:func:`.warm.start_worker`) for the pool's life.

    A worker that dies (killed, out of memory) breaks the pool: its episode and any other in flight
    are recorded as ``infra_error``, and the jobs not yet started run on in a fresh pool.
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]:
        queue = list(jobs)
        while queue:
            left = yield from self._pool_run(list(queue))
            if len(left) == len(queue):  # the pool broke before taking any job: never loop on it
                yield crashed(left[0], "the worker pool broke before the episode started")
                left = left[1:]
            queue = left

    def _pool_run(self, queue: list[EpisodeRequest]) -> Generator[EpisodeSummary, None, list[EpisodeRequest]]:
        """Run jobs from ``queue`` in one pool until it is empty or the pool breaks; return what is left."""
        from .warm import run_in_worker, start_worker

        ctx = multiprocessing.get_context("spawn")
        # workers (and through their pipes, their Playwright drivers and Chromiums) die with this process
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=start_worker,
                                 initargs=(os.getpid(),)) as pool:
            pending: dict[Future[EpisodeSummary], EpisodeRequest] = {}
            broken = False
            try:
                while (queue and not broken) or pending:
                    while queue and not broken and len(pending) < self.workers:
                        try:
                            fut = pool.submit(run_in_worker, queue[0])
                        except BrokenProcessPool:
                            broken = True
                            break
                        job = queue.pop(0)
                        log_start(job)
                        pending[fut] = job
                    if not pending:
                        break
                    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        job = pending.pop(fut)
                        try:
                            summary = fut.result()
                        except BrokenProcessPool as e:  # a worker died: this pool takes no more jobs
                            broken = True
                            summary = crashed(job, e)
                        except Exception as e:  # noqa: BLE001 - a dead worker fails that episode only
                            summary = crashed(job, e)
                        yield summary
            except BaseException:  # interrupted: a SIGTERM reached this process only, where Ctrl-C reaches the
                # whole group (and a run started in the background ignores SIGINT); the workers are stopped too,
                # so their episodes end now, agent programs killed (warm.start_worker: SIGTERM ends one as Ctrl-C)
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGTERM)
                raise
            finally:  # interrupted (Ctrl-C) or abandoned by the caller: start nothing more
                for fut in pending:
                    fut.cancel()
        if broken and queue:
            log.warning("a worker process died; %d episode(s) left run in a new pool", len(queue))
        return queue


def default_executor(workers: int, jobs: int) -> Executor:
    """In this process for one worker or one job, else a local process pool."""
    return InlineExecutor() if workers <= 1 or jobs <= 1 else ProcessExecutor(workers)
