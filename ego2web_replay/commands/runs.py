"""``ego2web-replay runs``: list run folders and show a run's episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..config import DEFAULT_RUNS
from ._options import json_option
from ._output import console, emit_machine, is_stdout, table


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
    episodes = table("task", "mode", "steps", "end reason", "episode error", "answer", "misses", "validity", "error")
    for r in rows:
        episodes.add_row(r["task"], r["mode"] + (f" r{r['repeat']}" if r["repeat"] else ""), str(r["steps"]),
                         r["end_reason"], "yes" if r["episode_error"] else "", str(r["answer"] or ""),
                         "" if r["misses"] is None else str(r["misses"]), r["validity"] or "",
                         (r["error"] or "")[:60])
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


COMMANDS = [runs_group]
