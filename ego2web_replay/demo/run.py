"""The whole story in one command, on a bundled demo site: no internet, no API key.

1. start the demo "live" site on 127.0.0.1 and write its task suite and clips;
2. record every task into a snapshot;
3. run the scripted agent live and frozen (paired);
4. switch the site to its drifted version (a product delisted, a price changed,
   a page redesigned, a CAPTCHA wall);
5. run live and frozen again;
6. judge every episode (an OpenAI-compatible endpoint if one is configured,
   else the offline rule judge, and it says which);
7. probe the recorded pages live to see what drifted;
8. compare live against frozen, attributing flips to drift, and write the report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Ego2WebError
from ..media.video import write_clip
from ..models import load_tasks
from .clips import DEMO_CLIPS
from .site import DemoSite

__all__ = ["DemoResult", "run_demo", "write_demo_suite"]

SUITE_TEMPLATE = Path(__file__).with_name("tasks.jsonl")


@dataclass
class DemoResult:
    out: Path
    suite: Path
    snapshots: Path
    runs: list[Path]
    db: Path
    report: Path
    judge: str
    comparison: Any = None
    drift: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def write_demo_suite(out: Path, site_url: str, task_ids: list[str] | None = None) -> Path:
    """Write ``tasks.jsonl`` for a running demo site, and the tasks' video clips."""
    out.mkdir(parents=True, exist_ok=True)
    lines = SUITE_TEMPLATE.read_text("utf-8").replace("{site}", site_url).splitlines()
    suite = out / "tasks.jsonl"
    suite.write_text("\n".join(lines) + "\n", "utf-8")
    for task in load_tasks(suite):
        if task_ids and task.id not in task_ids:
            continue
        write_clip(out / "videos" / f"{task.id}.mp4", DEMO_CLIPS[task.id])
    if task_ids:
        keep = [line for line in lines if any(f'"id": "{t}"' in line for t in task_ids)]
        suite.write_text("\n".join(keep) + "\n", "utf-8")
    return suite


def _judge_choice(base_url: str | None, model: str | None) -> tuple[str, str]:
    base_url = base_url or os.environ.get("OPENAI_BASE_URL")
    model = model or os.environ.get("EGO2WEB_JUDGE_MODEL")
    if base_url and model:
        return "ego2web", f"Ego2WebJudge with {model} at {base_url}"
    return "rule", "no judge endpoint configured (set OPENAI_BASE_URL and EGO2WEB_JUDGE_MODEL), so the offline rule judge judges"


def run_demo(out: Path, *, workers: int = 2, task_ids: list[str] | None = None, base_url: str | None = None,
             model: str | None = None, say: Callable[[str], None] = print) -> DemoResult:
    """Run the demo into ``out`` (which must be empty or absent)."""
    from ..recorder.session import RecordOptions, record_task
    from ..runner.run import RunSettings, run_suite
    from ..tracking.compare import compare
    from ..tracking.probe import probe_snapshots
    from ..tracking.report import build_report
    from ..tracking.sink import TrackingSink

    t0 = time.monotonic()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise Ego2WebError(f"{out} is not empty; give an empty or new folder with --out")
    snapshots, runs_dir, db = out / "snapshots", out / "runs", out / "ego2web.duckdb"
    judge_name, judge_note = _judge_choice(base_url, model)
    sink = TrackingSink(db, warn=lambda msg: say(f"    warning: {msg}"))
    result_runs: list[Path] = []
    with DemoSite() as site:
        suite_path = write_demo_suite(out, site.url, task_ids)
        suite = load_tasks(suite_path)
        say(f"demo site   {site.url} (shop, encyclopedia, videos); {len(suite)} tasks in {suite_path}")
        from ..media.keyframes import extract_keyframes

        frames = 0
        for task in suite:
            video = task.video_path(suite.base_dir)
            if video is not None:
                frames += len(extract_keyframes(video, task.evidence))
        say(f"video       {len(suite)} generated clips, {frames} evidence keyframes (cached next to each clip)")

        say("1/6 record  every task through the recording proxy")
        opts = RecordOptions(guard="loopback")
        for task in suite:
            r = record_task(task, snapshots, opts)
            if not r.ok or r.snapshot is None:
                raise Ego2WebError(f"demo: recording {task.id} failed: {r.error}")
            sink.snapshot_recorded(r.snapshot)
            say(f"    {task.id:24} {r.exchanges:3} exchanges -> {r.snapshot.relative_to(out)}")

        settings = RunSettings(mode="both", workers=workers, snapshots_root=str(snapshots), guard="loopback",
                               timeout_s=120)

        def run(label: str) -> Path:
            def on_episode(s: Any) -> None:
                sink.episode_finished(s.path.parents[2], s.path)
                misses = f", {s.misses} misses" if s.misses is not None else ""
                say(f"    {s.task_id:24} {s.mode:6} {s.end_reason:9} {s.steps} steps{misses}")

            run_dir, _ = run_suite(suite, agent_name="scripted", out=runs_dir, settings=settings, run_id=label,
                                   on_start=lambda run_dir, total, done: sink.run_started(run_dir),
                                   on_episode=on_episode)
            result_runs.append(run_dir)
            return run_dir

        say("2/6 run     the scripted agent, live and frozen, on today's site")
        run("1-before-drift")
        site.drift()
        say("3/6 drift   the site drifts: a product delisted, a price changed, a page redesigned, a CAPTCHA wall")
        say("    run     live and frozen again")
        run("2-after-drift")

        say(f"4/6 judge   {judge_note}")
        from ..judge.run import judge_run

        for run_dir in result_runs:
            verdicts = judge_run(run_dir, judge_name, base_url=base_url, model=model, progress=False,
                                 on_verdict=sink.verdict_made)
            live = [v for v in verdicts if v.mode == "live"]
            frozen = [v for v in verdicts if v.mode == "frozen"]
            say(f"    {run_dir.name:24} live {sum(v.success for v in live)}/{len(live)}  "
                f"frozen {sum(v.success for v in frozen)}/{len(frozen)}")

        say("5/6 probe   re-visit every recorded page live to see what drifted")
        drift: dict[str, str] = {}

        def on_task(task_id: str, status: str, probes: Any) -> None:
            drift[task_id] = status
            say(f"    {task_id:24} {status}")

        _, rows = probe_snapshots(sorted(p for p in snapshots.glob("*/*") if (p / "manifest.json").exists()),
                                  archive_root=out / "probes", guard="loopback", on_task=on_task)
        sink.probed(rows)

    say("6/6 compare live vs frozen, and write the report")
    comparison = compare(db)
    report_dir = out / "report"
    build_report(db, report_dir)
    return DemoResult(out=out, suite=suite_path, snapshots=snapshots, runs=result_runs, db=db, report=report_dir,
                      judge=judge_name, comparison=comparison, drift=drift, seconds=time.monotonic() - t0)
