"""``ego2web-replay record``: record each task's web into a snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from ..config import DEFAULT_RUNS
from ..errors import RecordingError
from ._checks import check_display
from ._hooks import wire_index_hooks
from ._options import (
    Finite,
    compression_option,
    db_options,
    guard_option,
    json_option,
    keep_credentials_option,
    snapshots_option,
    upstream_ca_option,
)
from ._output import emit_json, is_stdout, progress, say, warn
from .wire_options import wire_options

if TYPE_CHECKING:
    from ..runner.explore import ExploreOptions
    from ..wire.budget import WireLimits


@click.command("record")
@click.argument("tasks_file", type=click.Path(path_type=Path))
@snapshots_option("Data root; each task is recorded into <root>/<task-id>/<snapshot-id>/.", name="root")
@click.option("--task", "task_ids", multiple=True, help="Record only this task id (repeatable).")
@compression_option(("zst", "gz"), alias="--format")
@guard_option("Which upstream hosts may be contacted (allowlist: the task's allowed_domains plus --allow).")
@click.option("--allow", multiple=True, help="Extra host to allow in allowlist mode (repeatable).")
@click.option("--deny", multiple=True, help="Host never to contact (repeatable).")
@upstream_ca_option("Also trust this CA (PEM) for upstream HTTPS, e.g. a local test site's.")
@keep_credentials_option
@click.option("--redact-header", "redact_headers", multiple=True,
              help="Also redact this header's values (repeatable; Authorization, Cookie, Set-Cookie, "
                   "X-Api-Key ... are redacted already).")
@click.option("--redact-param", "redact_params", multiple=True,
              help="Also redact this query parameter / form or JSON field (repeatable; names with token, "
                   "key, auth, password, session, secret, sig ... are redacted already).")
@click.option("--interactive", is_flag=True,
              help="Headed: open the start page and record while a person browses; closing the window ends it.")
@db_options("each snapshot as it is recorded")
@click.option("--action-timeout", type=Finite(min=0.1), default=30.0, show_default=True,
              help="Seconds each reference action may take before the task fails.")
@click.option("--dedup-min-size", type=click.IntRange(min=0), default=256, show_default=True,
              help="Store identical payloads of at least this many bytes once per recording, later captures "
                   "as WARC revisit records; 0 stores every payload.")
@click.option("--engine", type=click.Choice(["fast", "mitmproxy"]), default="fast", show_default=True,
              help="The recording proxy: fast (asyncio, upstream over HTTP/1.1) or mitmproxy (its master with "
                   "our addons; HTTP/2 upstream).")
@wire_options
@click.option("--second-load/--no-second-load", default=True, show_default=True,
              help="After the actions, load each recorded page once more in a throw-away browser context, "
                   "not archived: what its requests send differently while getting the same response (request "
                   "ids, client ids) is learned volatile (volatile.json). Not after --interactive.")
@click.option("--explore", "explore", type=click.IntRange(min=0), default=0, show_default=True,
              help="After the reference paths, run this many exploring agents over the recorded tasks, live, "
                   "through the recorder, and merge their archives into each task's snapshot (a new, newest "
                   "snapshot; provenance.json names the explorer of every merged capture).")
@click.option("--explore-agent", default="explorer", show_default=True,
              help="The exploring agent: explorer (seeded random clicks and searches) or any agent `run` "
                   "takes (command:<program>, openai over a local endpoint, <module>:<factory> ...).")
@click.option("--explore-seed", type=int, default=1, show_default=True,
              help="explorer: the first explorer's seed; explorer i gets seed + i.")
@click.option("--explore-steps", type=click.IntRange(min=1), default=8, show_default=True,
              help="explorer: actions per exploring episode.")
@click.option("--explore-window", default="1h", show_default=True,
              help="Merge only explorer (and --fanout) captures made within this time of the reference recording "
                   "(90s, 30m, 2h).")
@click.option("--explore-runs", type=click.Path(path_type=Path), default=DEFAULT_RUNS, show_default=True,
              help="Where the explorers' run folders (their live archives, kept for provenance) go.")
@click.option("--fanout", "fanout", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="After the reference paths (and explorers), fetch through the recording proxy up to N "
                   "same-site links (and GET forms' default submissions) that the snapshot's pages show but it "
                   "never captured (on-site redirects followed), then their pages' uncaptured subresources "
                   "(--fanout-assets), and merge them into each task's snapshot (provenance: 'fanout from "
                   "<page>'); 0: off; 200 is a sane bound. See docs/agents.md.")
@click.option("--fanout-depth", type=click.IntRange(min=1, max=3), default=1, show_default=True,
              help="--fanout: clicks deep (2: the fetched pages' links too, within the same N).")
@click.option("--fanout-assets", type=click.IntRange(min=0), default=1000, show_default=True, metavar="M",
              help="--fanout: also fetch up to M uncaptured subresources the fetched pages' markup names "
                   "(stylesheets and their fonts and images, scripts, images, icons) from the task's site and "
                   "hosts the snapshot already holds; 0: documents only.")
@click.option("--fanout-word", "fanout_words", multiple=True, metavar="WORD",
              help="--fanout: also submit each GET form with this word typed into each of its text fields, as an "
                   "agent searching for it would (repeatable; e.g. the words the task's agents search for).")
@click.option("--fanout-browser", is_flag=True,
              help="--fanout: open the candidate pages in a sealed Chromium through the recording proxy instead "
                   "of fetching them, so what their scripts request on load (fetch/XHR, dynamic imports) is "
                   "recorded too; requests to hosts off the task's site and the snapshot's hosts are refused.")
@click.option("--fanout-page-timeout", type=click.FloatRange(min=1), default=15.0, show_default=True,
              metavar="SECONDS", help="--fanout-browser: how long each page may take to load and go network "
                                      "idle; a page past it is counted as timed out (what it recorded is kept).")
@json_option("each task's snapshot (or error)")
def record_cmd(tasks_file: Path, root: Path | str, task_ids: tuple[str, ...], compression: Literal["zst", "gz"], guard: str,
               allow: tuple[str, ...], deny: tuple[str, ...], upstream_ca: Path | None, keep_credentials: bool,
               redact_headers: tuple[str, ...], redact_params: tuple[str, ...], interactive: bool,
               db: Path | None, action_timeout: float, dedup_min_size: int, engine: Literal["fast", "mitmproxy"],
               wire: WireLimits, second_load: bool, explore: int, explore_agent: str, explore_seed: int,
               explore_steps: int, explore_window: str, explore_runs: Path, fanout: int, fanout_depth: int,
               fanout_assets: int, fanout_words: tuple[str, ...], fanout_browser: bool, fanout_page_timeout: float,
               json_out: str | None) -> None:
    """Record the tasks of TASKS_FILE (JSON or JSONL) by running their reference actions in
    Chromium through the recording proxy; with --explore, exploring agents then run the recorded
    tasks live and their captures are merged in; with --fanout, the links of the recorded pages
    not yet captured are fetched and merged in. Exits non-zero if any task failed.

    One line per task and the progress bar go to stderr; the summary to stdout.
    """
    from ..models import load_tasks
    from ..recorder.session import RecordOptions
    from ..recorder.upload import record_task_to

    if (fanout_browser or fanout_words) and not fanout:
        raise click.UsageError("--fanout-browser and --fanout-word need --fanout N (how many pages to fan out to)")
    if interactive:
        check_display("record --interactive")
    wire_index_hooks()
    suite = load_tasks(tasks_file)
    tasks = suite.select(list(task_ids))
    _check_writable(root)
    exploring = _explore_options(explore, explore_agent, explore_seed, explore_steps, explore_window, explore_runs,
                                 root, guard=guard, upstream_ca=upstream_ca, keep_credentials=keep_credentials,
                                 action_timeout_s=action_timeout)
    if fanout and isinstance(root, str):
        raise RecordingError("--fanout needs a local --snapshots folder (the fetched pages are merged on disk)")
    from ..proxy import project_ca

    ca = project_ca()
    failures = 0
    results: list[dict[str, object]] = []
    with progress("record") as bars:
        bar = bars.add_task("", total=len(tasks))
        sink = None
        if db is not None:
            from ..tracking.sink import TrackingSink

            sink = TrackingSink(db, warn=lambda msg: warn(bars, msg))
        bases: dict[str, Path] = {}
        record_opts: dict[str, RecordOptions] = {}
        for task in tasks:
            bars.update(bar, description=task.id)
            allowed = list(allow) + (task.allowed_domains if guard == "allowlist" else [])
            opts = RecordOptions(compression=compression, guard=guard, allow=allowed, deny=deny,
                                 upstream_ca=upstream_ca, keep_credentials=keep_credentials,
                                 redact_headers=redact_headers, redact_params=redact_params,
                                 interactive=interactive, action_timeout_s=action_timeout,
                                 dedup_min_size=dedup_min_size or None, engine=engine, wire=wire,
                                 second_load=second_load and not interactive)
            recorded = sink.snapshot_recorded if sink is not None else None
            def uploading(url: str, task_id: str = task.id) -> None:
                bars.update(bar, description=f"{task_id}: uploading to {url}")

            r = record_task_to(task, root, opts, ca=ca, on_recorded=recorded, on_upload=uploading)
            ok = r.ok and r.manifest is not None and r.snapshot is not None
            if ok and r.snapshot is not None:
                bases[task.id] = r.snapshot
                record_opts[task.id] = opts
            results.append({"task_id": task.id, "ok": ok, "snapshot": str(r.location or r.snapshot) if ok else None,
                            "exchanges": r.manifest.exchanges if ok and r.manifest else None,
                            "archive_bytes": r.manifest.archive_bytes if ok and r.manifest else None,
                            "refused": dict(r.refused or {}), "error": None if ok else r.error})
            if r.ok and r.manifest is not None and r.snapshot is not None:
                say(bars, f"{task.id}: {r.location or r.snapshot} ({r.manifest.exchanges} exchanges, "
                          f"{r.manifest.archive_bytes} bytes)", status="ok  ", style="green")
                if r.refused:
                    say(bars, f"{task.id}: proxy bounds (docs/limits.md): "
                              + ", ".join(f"{k} {v}" for k, v in sorted(r.refused.items())), status="note")
            else:
                failures += 1
                say(bars, f"{task.id}: {r.error}", status="FAIL", style="red")
            bars.advance(bar)
        if exploring is not None and bases:
            _explore(suite, bases, exploring, results, bars)
        if fanout and bases:
            from ..snapshots.extend import parse_window

            _fanout(tasks, record_opts, results, bars, ca=ca, limit=fanout, depth=fanout_depth, words=fanout_words,
                    assets=fanout_assets, runs=explore_runs, window=parse_window(explore_window),
                    browser=fanout_browser, page_timeout_s=fanout_page_timeout)
    emit_json(json_out, {"root": str(root), "recorded": len(tasks) - failures, "failed": failures, "tasks": results})
    if failures:
        raise RecordingError(f"{failures} of {len(tasks)} task(s) failed to record")
    if not is_stdout(json_out):
        click.echo(f"recorded {len(tasks)} task(s) into {root}")


def _explore_options(count: int, agent: str, seed: int, steps: int, window: str, runs: Path, root: Path | str,
                     **run: Any) -> ExploreOptions | None:
    """The exploring agents' options, checked before anything is recorded (None without --explore)."""
    if not count:
        return None
    from ..agents import make_agent
    from ..runner.explore import ExploreOptions, explorer_settings
    from ..snapshots.extend import parse_window

    if isinstance(root, str):
        raise RecordingError("--explore needs a local --snapshots folder (explorer archives are merged on disk)")
    opts = ExploreOptions(count=count, agent=agent, seed=seed, steps=steps, window=parse_window(window),
                          runs=runs, **run)
    make_agent(agent, **explorer_settings(opts, 0))  # an unknown agent or bad settings: one line, nothing recorded
    return opts


def _explore(suite: Any, bases: dict[str, Path], opts: ExploreOptions, results: list[dict[str, object]],
             bars: Any) -> None:
    """Run the explorers over the recorded tasks and merge their archives; one line per task."""
    from ..runner.explore import merge_explorers, run_explorers

    bar = bars.add_task(f"exploring ({opts.agent} ×{opts.count})", total=opts.count * len(bases))

    def episode(s: Any) -> None:
        bars.advance(bar)
        if not s.ok:
            say(bars, f"{s.task_id}: explorer {s.path.parents[2].name}: {s.end_reason}"
                      + (f" ({s.error})" if s.error else ""), status="note")

    runs = run_explorers(suite, list(bases), opts, on_episode=episode)
    for row in results:
        task_id = str(row["task_id"])
        if task_id not in bases:
            continue
        got = merge_explorers(bases[task_id], runs, task_id, opts.window)
        ext = got.extended
        row["explored"] = {"agent": opts.agent, "explorers": opts.count, "archives": [str(a) for a in got.archives],
                           "snapshot": str(ext.path) if ext else None, "merged": ext.merged if ext else 0,
                           "sources": [{"label": s.label, "merged": s.merged, "already_held": s.already_held,
                                        "outside_window": s.outside_window} for s in ext.sources] if ext else []}
        if ext is None:
            say(bars, f"{task_id}: no explorer archived a live run; the snapshot stays {bases[task_id]}", status="note")
            continue
        row["snapshot"] = str(ext.path)
        say(bars, f"{task_id}: {ext.path} (+{ext.merged} captures from {len(got.archives)} of {opts.count} "
                  f"explorer(s))", status="ok  ", style="green")


def _fanout(tasks: list[Any], record_opts: dict[str, Any], results: list[dict[str, object]], bars: Any, *,
            ca: Any, limit: int, depth: int, words: tuple[str, ...], assets: int, runs: Path, window: Any,
            browser: bool = False, page_timeout_s: float = 15.0) -> None:
    """Fetch and merge each recorded task's uncaptured same-site links; one line per task."""
    from datetime import UTC, datetime

    from ..runner.fanout import fan_out

    out = runs / f"fanout-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    bar = bars.add_task(f"fan-out (≤{limit} links a task)", total=len(record_opts))
    for task in tasks:
        row = next((r for r in results if r["task_id"] == task.id and r["ok"]), None)
        if row is None or task.id not in record_opts:
            continue
        got = fan_out(task, Path(str(row["snapshot"])), out, record_opts[task.id], ca=ca, limit=limit, depth=depth,
                      window=window, words=words, assets=assets, browser=browser, page_timeout_s=page_timeout_s)
        bars.advance(bar)
        ext = got.extended
        fan: dict[str, object] = {
            "candidates": got.candidates, "fetched": len(got.fetched), "failed": len(got.failed),
            "left_out": got.left_out, "assets": len(got.assets), "assets_failed": len(got.assets_failed),
            "assets_left_out": got.assets_left_out, "archive": str(got.archive) if got.archive else None,
            "snapshot": str(ext.path) if ext else None, "merged": ext.merged if ext else 0, "error": got.error}
        row["fanout"] = fan
        if browser:
            fan.update({"opened": got.opened, "timed_out": len(got.timed_out), "requests": got.requests,
                        "refused": len(got.refused)})
        if ext is not None:
            row["snapshot"] = str(ext.path)
        ok = sum(1 for s in got.fetched.values() if s < 400)
        if browser:
            say(bars, f"{task.id}: fan-out opened {got.opened} of {got.candidates} uncaptured page(s) in Chromium "
                      f"({ok} ok, {len(got.fetched) - ok} error status, {len(got.timed_out)} timed out, "
                      f"{len(got.failed)} failed, {got.left_out} past the limit; {got.requests} request(s) "
                      f"recorded, {len(got.refused)} refused off the allowed hosts)"
                      + "".join(f"; timed out: {u}" for u in got.timed_out)
                      + "".join(f"; failed: {u} ({why})" for u, why in got.failed.items()),
                status="ok  " if got.error is None else "FAIL", style="green" if got.error is None else "red")
            continue
        say(bars, f"{task.id}: fan-out fetched {len(got.fetched)} of {got.candidates} uncaptured link(s) "
                  f"({ok} ok, {len(got.fetched) - ok} error status, {len(got.failed)} failed, {got.left_out} past "
                  f"the limit; {len(got.assets)} subresource(s), {len(got.assets_failed)} failed, "
                  f"{got.assets_left_out} past the limit); " + (f"{ext.path} (+{ext.merged} captures)" if ext else
                                    f"the snapshot stays {row['snapshot']}" + (f" ({got.error})" if got.error else "")),
            status="ok  " if got.error is None else "FAIL", style="green" if got.error is None else "red")


def _check_writable(root: Path | str) -> None:
    if isinstance(root, str):  # object storage: reachable, the bucket there, a PUT accepted
        from ..snapshots.location import root_storage

        root_storage(root, write=True)
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RecordingError(f"snapshots folder {root} is not writable ({e.strerror or e})") from None


COMMANDS = [record_cmd]
