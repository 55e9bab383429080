"""Where episodes run: the runner hands an :class:`Executor` episode jobs and gets summaries back.

An episode job is an :class:`~.episode.EpisodeRequest` (picklable: paths, the
task, the agent's name and settings); running it means calling
:func:`~.episode.run_episode`, which writes the episode folder and returns an
:class:`~.episode.EpisodeSummary`. Executors never write anywhere else: the
runner's caller records the summaries (the tracking database is written by the
parent process only). Each worker runs one episode at a time with its own
proxy and its own Chromium, since mitmproxy allows one proxy per process.

* :class:`InlineExecutor` runs the jobs one after another in this process;
* :class:`ProcessExecutor` runs them in N spawned local processes.

A distributed executor (Ray, Dask, a batch queue) implements the same one
method: submit the jobs, yield each summary as it comes back, and turn a lost
worker into a failed summary with :func:`crashed` rather than an exception.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Protocol, runtime_checkable

from ..lifeline import die_with_parent
from .episode import EpisodeRequest, EpisodeSummary, run_episode

log = logging.getLogger(__name__)

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "crashed", "default_executor", "log_start"]


@runtime_checkable
class Executor(Protocol):
    """Runs episode jobs and yields their summaries as they finish (in any order)."""

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]: ...


def crashed(job: EpisodeRequest, error: BaseException | str) -> EpisodeSummary:
    """The summary of a job whose worker died before it could return one."""
    return EpisodeSummary(task_id=job.task.id, mode=job.mode, ok=False, end_reason="browser_error", steps=0,
                          answer=None, misses=None, error=f"worker crashed: {error}",
                          path=job.folder, repeat=job.repeat)


def log_start(job: EpisodeRequest) -> None:
    """INFO: an episode is handed out (logged here, in the parent, where ``-v`` set logging up).

    ``run_suite`` logs each episode's end as its summary comes back, whatever the executor.
    """
    log.info("episode start: %s %s%s (agent %s)", job.task.id, job.mode,
             f" repeat {job.repeat}" if job.repeat else "", job.agent_name)


class InlineExecutor:
    """One job at a time, in this process."""

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]:
        for job in jobs:
            log_start(job)
            yield run_episode(job)


class ProcessExecutor:
    """Up to ``workers`` jobs at once, each in a spawned process of a local pool."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def run(self, jobs: Sequence[EpisodeRequest]) -> Iterator[EpisodeSummary]:
        ctx = multiprocessing.get_context("spawn")
        # workers (and through their pipes, their Playwright drivers and Chromiums) die with this process
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            pending: dict[Future[EpisodeSummary], EpisodeRequest] = {}
            queue = list(jobs)
            try:
                while queue or pending:
                    while queue and len(pending) < self.workers:
                        job = queue.pop(0)
                        log_start(job)
                        pending[pool.submit(run_episode, job)] = job
                    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        job = pending.pop(fut)
                        try:
                            summary = fut.result()
                        except Exception as e:  # noqa: BLE001 - a dead worker fails that episode only
                            summary = crashed(job, e)
                        yield summary
            finally:  # interrupted (Ctrl-C) or abandoned by the caller: start nothing more
                for fut in pending:
                    fut.cancel()


def default_executor(workers: int, jobs: int) -> Executor:
    """In this process for one worker or one job, else a local process pool."""
    return InlineExecutor() if workers <= 1 or jobs <= 1 else ProcessExecutor(workers)
