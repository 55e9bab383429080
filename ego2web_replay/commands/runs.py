"""``ego2web-replay runs``: list run folders and show a run's episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..config import DEFAULT_RUNS
from ._options import json_option
from ._output import console, emit_json, emit_machine, is_stdout, progress, say, table


@click.group("runs")
def runs_group() -> None:
    """List runs and show their episodes."""


@runs_group.command("list")
@click.option("--out", type=click.Path(path_type=Path), default=DEFAULT_RUNS, show_default=True,
              help="Folder that holds run folders.")
@json_option("the runs (a list of {run, path, episodes, manifest})")
def runs_list(out: Path, json_out: str | None) -> None:
    """List the runs under --out, newest first."""
    import json

    from ..models import end_reason_counts
    from ..runner.run import list_runs

    if not Path(out).is_dir() and Path(out) != Path(DEFAULT_RUNS):  # a mistyped --out is no empty folder of runs
        from ..errors import Ego2WebError

        raise Ego2WebError(f"{out}: no such folder (give the folder the runs were written to with --out)")
    runs = [(d, m, m.episodes or end_reason_counts(d)) for d, m in list_runs(out)]
    if json_out:
        emit_machine(json_out, json.dumps([{"run": d.name, "path": str(d), "episodes": counts,
                                            "manifest": m.model_dump(mode="json")} for d, m, counts in runs],
                                          indent=2) + "\n")
        if is_stdout(json_out):
            return
    if not runs:
        click.echo(f"no runs under {out}")
        return
    rows = table("run", "started", "agent", "modes", "tasks", "episodes", whole=3)
    for d, m, counts in runs:
        eps = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "(none yet)"
        if m.finished_at is None:
            eps += " (unfinished)"
        rows.add_row(d.name, m.started_at.strftime("%Y-%m-%d %H:%M"), m.agent_name, "+".join(m.modes),
                     str(len(m.task_ids)), eps)
    console().print(rows)


@runs_group.command("show")
@click.argument("run_dir", type=click.Path(path_type=Path))
@json_option("the run and its episodes")
def runs_show(run_dir: Path, json_out: str | None) -> None:
    """Show one run: a row per episode with mode, steps, end reason, answer and misses; episodes that could
    not run (setup, browser or infrastructure errors: not the agent's) are marked and counted apart."""
    import json
    from collections import Counter

    from ..models import load_trajectory
    from ..runner.run import load_run
    from ..validity import episode_validity, set_aside

    m = load_run(run_dir)
    rows: list[dict[str, Any]] = []
    for traj_file in sorted((run_dir / "episodes").glob("*/*/trajectory.json")):
        t = load_trajectory(traj_file)
        rows.append({"task": t.task_id, "mode": t.mode, "repeat": t.repeat, "steps": len(t.steps), "end_reason": t.end_reason,
                     "answer": t.answer, "misses": t.replay.miss if t.replay else None,
                     "missed_urls": t.replay.missed_urls if t.replay else [],
                     "validity": None if t.episode_error else episode_validity(t),
                     "set_aside": set_aside(t.replay.log) if t.replay else {}, "error": t.error,
                     "shared_from": dict(t.replay.shared_from) if t.replay else {},
                     "episode_error": t.episode_error})
    unrun = [r for r in rows if r["episode_error"]]
    if json_out:
        emit_machine(json_out, json.dumps({"run": m.model_dump(mode="json"), "episodes": rows,
                                           "episode_errors": len(unrun)}, indent=2) + "\n")
        if is_stdout(json_out):
            return
    out = console()
    out.print(f"run {m.run_id}  agent={m.agent_name}  started={m.started_at:%Y-%m-%d %H:%M:%S}  "
              f"suite={m.suite_path}", highlight=False, markup=False)
    from ..tracking.tables import shortened

    episodes = table("task", "mode", "steps", "end reason", "episode error", "answer", "misses", "validity", "error")
    for r in rows:
        episodes.add_row(r["task"], r["mode"] + (f" r{r['repeat']}" if r["repeat"] else ""), str(r["steps"]),
                         r["end_reason"], "yes" if r["episode_error"] else "", str(r["answer"] or ""),
                         "" if r["misses"] is None else str(r["misses"]), r["validity"] or "",
                         shortened(r["error"] or "", 60))
    out.print(episodes)
    if unrun:
        reasons = ", ".join(f"{k} {n}" for k, n in sorted(Counter(r["end_reason"] for r in unrun).items()))
        out.print(f"episode errors: {len(unrun)} of {len(rows)} ({reasons}): these could not run; no judge scores "
                  "them and no rate counts them", highlight=False, markup=False)
    frozen = [r["validity"] for r in rows if r["mode"] == "frozen" and not r["episode_error"]]
    if frozen:
        shares = ", ".join(f"{name} {frozen.count(name)}" for name in ("complete", "degraded", "off-snapshot"))
        out.print(f"frozen episodes: {len(frozen)} ({shares}); only complete ones saw recorded pages alone",
                  highlight=False, markup=False)
    for r in rows:
        if r["set_aside"]:
            listed = "; ".join(f"{k} ×{n}" for k, n in r["set_aside"].items())
            out.print(f"{r['task']} ({r['validity'] or r['mode']}): answers that set volatile values aside: {listed}",
                      highlight=False, markup=False)
        if r["shared_from"]:
            listed = "; ".join(f"{k} ×{n}" for k, n in r["shared_from"].items())
            out.print(f"{r['task']} ({r['validity'] or r['mode']}): answers from other tasks' snapshots (shared): "
                      f"{listed}", highlight=False, markup=False)


@runs_group.command("coverage")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--runs", "runs_root", type=click.Path(path_type=Path), default=None,
              help="Where to look for live-run archives (default: the run folder's parent).")
@json_option("the coverage per task")
def runs_coverage(run_dir: Path, runs_root: Path | None, json_out: str | None) -> None:
    """List, per frozen episode of RUN_DIR, the documents and content fetches that missed and which
    archived live runs hold them (merge those with `snapshot extend`)."""
    import json

    from ..tracking.coverage import run_coverage

    report = run_coverage(run_dir, runs_root)
    if json_out:
        emit_machine(json_out, json.dumps([t.model_dump(mode="json") for t in report], indent=2) + "\n")
        if is_stdout(json_out):
            return
    out = console()
    for t in report:
        name = t.task_id + (f" (repeat {t.repeat})" if t.repeat else "")
        out.print(f"{name}: {t.validity or 'unknown'}, {len(t.missed)} missed document(s)/content fetch(es)",
                  highlight=False, markup=False)
        for m in t.missed:
            held = ", ".join(m.held_by) if m.held_by else "no live-run archive holds it"
            out.print(f"  {m.method} {m.url}  [{m.kind or '?'}]  -> {held}", highlight=False, markup=False)


EXPORT_FORMATS = ("mind2web2-cache",)


@runs_group.command("export")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--format", "fmt", default="mind2web2-cache", show_default=True, metavar="FORMAT",
              help="mind2web2-cache: one Mind2Web 2 cache folder per task (index.json, <md5>.txt text and "
                   "<md5>.jpg screenshot of each page the agent rendered) plus its answer files, for Mind2Web 2's "
                   "own evaluation scripts.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Folder to write (new or empty): OUT/cache is Mind2Web 2's --cache_root, OUT/answers its "
                   "--answer_folder.")
@click.option("--mode", type=click.Choice(["frozen", "live"]), default=None,
              help="Which episodes to export (default: the run's only mode; required when it has both).")
@click.option("--agent-name", default=None,
              help="Agent folder name in the cache and answers (default: the run's agent).")
@json_option("what was written (per task: pages with the episode and step each came from, answers, left out)")
def runs_export(run_dir: Path, fmt: str, out: Path, mode: str | None, agent_name: str | None,
                json_out: str | None) -> None:
    """Export RUN_DIR's rendered pages for another benchmark's evaluator: the text and screenshot of each page
    as the agent's browser showed it, so that evaluator judges what the agent saw, never a fresh crawl."""
    if fmt not in EXPORT_FORMATS:
        raise click.ClickException(f"unknown export format {fmt!r}; known formats: {', '.join(EXPORT_FORMATS)}")
    from ..judge.mind2web2_cache import export_mind2web2_cache

    with progress("export") as bars:
        bar = bars.add_task(str(run_dir), total=None)

        def on_task(task: Any, done: int, total: int) -> None:
            bars.update(bar, total=total, completed=done, description=task.task_id)
            extra = f", {len(task.left_out)} left out" if task.left_out else ""
            say(bars, f"{task.task_id}: {len(task.pages)} page(s), {len(task.answers)} answer(s){extra}")

        result = export_mind2web2_cache(run_dir, out, mode=mode, agent_name=agent_name, on_task=on_task)
    emit_json(json_out, result.summary())
    if is_stdout(json_out):
        return
    c = result.counts()
    click.echo(f"exported {c['tasks']} task(s) of {result.mode} episodes as agent {result.agent_name!r}: "
               f"{c['pages']} page(s), {c['answers']} answer(s), {c['left_out']} page(s) left out, "
               f"{c['skipped_episodes']} episode(s) skipped")
    click.echo(f"cache root {result.cache_root}; answers {result.answer_root}; provenance "
               f"{result.out / 'ego2web-export.json'}")


COMMANDS = [runs_group]
