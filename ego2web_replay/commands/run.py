"""``ego2web-replay run``: run an agent over a task suite, live, frozen or both."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..config import DEFAULT_RUNS
from ._checks import check_endpoint, endpoint_url
from ._options import (
    Finite,
    db_options,
    guard_option,
    json_option,
    keep_credentials_option,
    snapshots_option,
    upstream_ca_option,
)
from ._output import emit_json, is_stdout, progress, say, warn
from .executor_options import ExecutorChoice, executor_options
from .replay_options import replay_options
from .wire_options import wire_options

#: the start's snapshot lookups are shown in the bar from this many tasks, or once they take this long
PIN_MANY, PIN_SLOW_S = 20, 2.0

if TYPE_CHECKING:
    from ..models import ReplayConfig
    from ..wire.budget import WireLimits


@click.command("run")
@click.argument("tasks_file", type=click.Path(path_type=Path))
@click.option("--agent", "agent_name", required=True,
              help="scripted | openai | browser-use | 'command:<program>' | an installed 'ego2web_replay.agents' "
                   "entry point | <module>:<factory>.")
@click.option("--mode", type=click.Choice(["live", "frozen", "both"]), default="frozen", show_default=True,
              help="frozen: replay the newest snapshot, hermetic; live: through the recording proxy "
                   "(the live run is archived too); both: live then frozen, paired per task.")
@snapshots_option("Where recorded snapshots are (frozen mode).")
@click.option("--snapshot-id", default=None, help="Replay this snapshot id instead of each task's newest.")
@click.option("--out", type=click.Path(path_type=Path), default=DEFAULT_RUNS, show_default=True,
              help="Folder that holds run folders.")
@click.option("--task", "task_ids", multiple=True, help="Run only this task id (repeatable).")
@click.option("--workers", type=click.IntRange(1, 32), default=1, show_default=True,
              help="Episodes run at once, each with its own proxy and browser.")
@click.option("--max-steps", type=click.IntRange(1), default=40, show_default=True, help="Step budget per episode.")
@click.option("--timeout", "timeout_s", type=Finite(1), default=300.0, show_default=True,
              help="Wall-clock limit per episode, in seconds.")
@click.option("--repeats", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Run each task this many times in each mode (agents are stochastic); compare reports "
                   "per-task success rates, pass@k and the variance. --resume may raise it, never lower it.")
@click.option("--cold", is_flag=True,
              help="Start a replay proxy and a Chromium for every frozen episode instead of reusing the worker's "
                   "(warm episodes: one Chromium per worker, a fresh browser context per episode; docs/scale.md).")
@click.option("--resume", is_flag=True, help="Finish the newest interrupted run of this suite and agent "
                                             "(or --run-id), skipping finished episodes.")
@click.option("--run-id", default=None, help="Name the run folder (or pick the run to resume).")
@click.option("--model", default=None, help="openai and browser-use agents: model name.")
@click.option("--base-url", default=None, help="openai and browser-use agents: OpenAI-compatible endpoint (default "
              "$OPENAI_BASE_URL); command agents: the program's model endpoint, handed as $OPENAI_BASE_URL and "
              "reached directly, never through the proxy.")
@click.option("--agent-service", "agent_services", multiple=True, metavar="URL|HOST:PORT",
              help="command agents: another service of the program's own (a tool server, a database), reached "
                   "directly at exactly this host:port, never through the proxy (repeatable).")
@click.option("--agent-sandbox", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="command agents: seal the program in namespaces of its own (network: only the proxy and its own "
                   "services; the suite, runs, snapshots and data home covered; its own processes only). auto: "
                   "where this machine allows user namespaces (else it runs unsealed, recorded in the "
                   "trajectory); on: an episode that cannot be sealed does not run.")
@click.option("--agent-browser", is_flag=True,
              help="command agents: start a sealed Chromium behind the proxy for the program and hand its DevTools "
                   "endpoint as $EGO2WEB_CDP_URL (that port is reached directly, never through the proxy).")
@guard_option("Live mode: which upstream hosts may be contacted.")
@upstream_ca_option("Live mode: also trust this CA (PEM) for upstream HTTPS.")
@replay_options
@wire_options
@executor_options
@click.option("--modality", type=click.Choice(["video", "keyframes", "captions", "none"]), default=None,
              help="What the agent gets of the task's video, always derived from the whole video "
                   "(default: the agent's own: openai and browser-use keyframes, command video, scripted none).")
@click.option("--keyframes", "n_keyframes", type=click.IntRange(1), default=8, show_default=True,
              help="keyframes: frames sampled uniformly over the whole video.")
@click.option("--video-fps", type=Finite(0, min_open=True), default=1.0, show_default=True,
              help="video: frames per second sent when the video goes as frames.")
@click.option("--video-transport", type=click.Choice(["frames", "video_url"]), default="frames", show_default=True,
              help="video: dense frames, or the file as a video_url part (endpoints that take video, e.g. vLLM).")
@click.option("--frame-size", type=click.IntRange(16), default=512, show_default=True,
              help="Longest side of video frames sent to the agent, in pixels.")
@click.option("--temperature", type=float, default=None, help="openai and browser-use agents: sampling temperature (default 0).")
@click.option("--seed", type=int, default=None, help="openai and browser-use agents: sampling seed sent to the endpoint; "
                                                    "explorer: its seed.")
@click.option("--max-output-tokens", type=click.IntRange(1), default=None,
              help="openai and browser-use agents: reply limit (sent as max_completion_tokens, as reasoning models require).")
@click.option("--agent-timeout", type=Finite(0, min_open=True), default=None,
              help="openai and browser-use agents: seconds to wait for one model reply (default 60; browser-use 120).")
@click.option("--image-size", type=click.IntRange(16), default=None,
              help="openai and browser-use agents: longest side of the screenshots sent to the model, in pixels "
                   "(default: the whole 1280-pixel viewport; browser-use keeps the viewport's shape and needs 160 or more).")
@db_options("the run and each episode as they finish")
@keep_credentials_option
@json_option("the run folder and each episode run now")
def run_cmd(tasks_file: Path, agent_name: str, mode: str, snapshots_root: Path | str, snapshot_id: str | None, out: Path,
            task_ids: tuple[str, ...], workers: int, max_steps: int, timeout_s: float, repeats: int, cold: bool,
            resume: bool, run_id: str | None, model: str | None, base_url: str | None, agent_services: tuple[str, ...],
            agent_browser: bool, agent_sandbox: str, guard: str, upstream_ca: Path | None,
            modality: str | None, n_keyframes: int, video_fps: float, video_transport: str,
            frame_size: int, temperature: float | None, seed: int | None, max_output_tokens: int | None,
            agent_timeout: float | None, image_size: int | None, replay: ReplayConfig, db: Path | None, keep_credentials: bool,
            executor: ExecutorChoice, wire: WireLimits, json_out: str | None) -> None:
    """Run AGENT on every task of TASKS_FILE and write a run folder of episodes
    (trajectory.json, screenshots, replay stats, the live run's archive).

    One line per episode and the progress bar go to stderr; the run folder to stdout.
    """
    from ..errors import Ego2WebError
    from ..models import load_tasks
    from ..runner.episode import ERROR_REASONS
    from ..runner.inputs import InputSettings
    from ..runner.run import RunSettings, run_suite

    suite = load_tasks(tasks_file)
    suite.select(list(task_ids))
    settings = RunSettings(mode=mode, max_steps=max_steps, timeout_s=timeout_s, workers=workers,
                           snapshots_root=str(snapshots_root) if snapshots_root else None, snapshot_id=snapshot_id,
                           guard=guard, replay=replay, keep_credentials=keep_credentials, repeats=repeats,
                           warm=not cold,
                           inputs=InputSettings(modality=modality, keyframes=n_keyframes,  # type: ignore[arg-type]
                                                video_fps=video_fps, video_transport=video_transport,  # type: ignore[arg-type]
                                                max_side=frame_size))
    agent_settings: dict[str, object] = {}
    if agent_name in ("openai", "browser-use"):  # the model agents
        agent_settings = {"model": model, "base_url": base_url, "temperature": temperature, "seed": seed,
                          "max_output_tokens": max_output_tokens, "timeout_s": agent_timeout,
                          "image_max_side": image_size}
    elif agent_name == "explorer" and seed is not None:
        agent_settings = {"seed": seed}
    if image_size is not None and agent_name not in ("openai", "browser-use"):
        raise click.UsageError(f"--image-size is for the model agents (openai, browser-use), not {agent_name!r}")
    if agent_name.startswith("command:"):
        agent_settings = {"base_url": base_url, "services": list(agent_services), "browser": agent_browser}
        if agent_sandbox != "auto":  # (the default is no setting: runs made before it resume as they were)
            agent_settings["sandbox"] = agent_sandbox
    elif agent_services or agent_browser or agent_sandbox != "auto":
        raise click.UsageError(f"--agent-service, --agent-browser and --agent-sandbox are for command agents, "
                               f"not {agent_name!r}")
    url = endpoint_url(base_url) if agent_name in ("openai", "browser-use") else (
        base_url if agent_name.startswith("command:") else None)
    if url:  # before the run folder is made: a dead endpoint is named at once, not after whole episodes
        check_endpoint(url, f"the {agent_name} agent's")
    sink = None
    with progress("run") as bars:
        bar = bars.add_task("starting", total=None)
        if db is not None:
            from ..tracking.sink import TrackingSink

            sink = TrackingSink(db, warn=lambda msg: warn(bars, msg))

        pin_t0 = time.monotonic()

        def on_pin(done: int, total: int) -> None:  # the start's snapshot lookups: shown when many or slow
            took = time.monotonic() - pin_t0
            if total >= PIN_MANY or took >= PIN_SLOW_S:
                bars.update(bar, total=total, completed=done, description="looking up each task's snapshot")
            if done == total and took >= PIN_SLOW_S and not is_stdout(json_out):
                say(bars, f"looked up {total} tasks' snapshots in {took:.1f} s")

        started: list[Path] = []

        def on_start(run_dir: Path, total: int, finished: int) -> None:
            started.append(run_dir)
            bars.update(bar, total=total, completed=finished, description=str(run_dir))
            if finished:
                say(bars, f"resuming {run_dir}: {finished} of {total} episodes already done")
            if sink is not None:
                sink.run_started(run_dir)

        def on_episode(s) -> None:  # noqa: ANN001
            if sink is not None:
                sink.episode_finished(s.path.parents[2], s.path)
            misses = f", {s.misses} misses" if s.misses is not None else ""
            say(bars, f"{s.task_id}/{s.path.name}: {s.steps} steps{misses}; answer={s.answer!r}"
                      + (f"; {s.error}" if s.error else ""), status=f"{s.end_reason:12}",
                style="green" if s.ok else "red")
            bars.advance(bar)

        try:
            with _terminate_as_interrupt():
                run_dir, _ = run_suite(suite, agent_name=agent_name, out=out, settings=settings,
                                       agent_settings=agent_settings, task_ids=task_ids, resume=resume, run_id=run_id,
                                       upstream_ca=upstream_ca, command=sys.argv, on_episode=on_episode,
                                       on_start=on_start, on_pin=on_pin,
                                       executor=executor.make(lambda msg: say(bars, msg)), wire=wire)
        except (KeyboardInterrupt, click.exceptions.Abort):
            if started:  # what was done is kept: say where, and how to finish it
                click.echo(f"interrupted: run folder {started[0]}; finish it with the same command and --resume",
                           err=True)
            raise
    emit_json(json_out, {"run_dir": str(run_dir), "episodes": [
        {"task_id": s.task_id, "mode": s.mode, "repeat": s.repeat, "ok": s.ok, "end_reason": s.end_reason,
         "steps": s.steps, "answer": s.answer, "misses": s.misses, "error": s.error, "path": str(s.path)}
        for s in _]})
    if not is_stdout(json_out):
        click.echo(f"run folder: {run_dir}")
    if _ and all(s.end_reason in ERROR_REASONS for s in _):
        raise Ego2WebError(f"every episode errored ({len(_)}: {', '.join(sorted({s.end_reason for s in _}))}); "
                           f"first error: {_[0].error}")


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, ``kill``) ends the run as Ctrl-C does: its browsers and proxies closed,
    its finished episodes kept, the way to resume said (only on the main thread, where signals arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


COMMANDS = [run_cmd]
