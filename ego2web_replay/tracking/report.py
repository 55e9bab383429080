"""The static HTML report: a folder that opens from disk with no server and no network.

Layout::

    <out>/index.html                       comparison tables, charts, drift, episode list
    <out>/report.css                       the only stylesheet (shipped in this package)
    <out>/episodes/<run>/<task>-<mode>.html      one page per episode
    <out>/episodes/<run>/<task>-<mode>_files/    its screenshots and video keyframes (copied)
    <out>/flips/<agent>-<judge>/<task>-<live run>.html   one page per flip (:mod:`.report_flips`)

Video keyframes are the images in the episode's ``keyframes/`` folder and in
the judge's keyframe cache beside the task's video (``<video>.keyframes/``,
the video found through the run's suite file).

Charts are inline SVG (:mod:`.charts`); pages carry a Content-Security-Policy
that forbids scripts and any non-local resource.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import defaultdict
from datetime import UTC, datetime
from html import escape
from importlib import resources
from pathlib import Path
from string import Template

from pydantic import BaseModel

from ..errors import Ego2WebError
from ..models import (
    EPISODE_ERRORS,
    Trajectory,
    Verdict,
    episode_folder_name,
    load_trajectory,
    read_model,
)
from .compare import Comparison, compare
from .db import read_connection
from .drift import DriftSeries, drift_timeseries
from .history import RunPoint, run_history
from .ingest import read_run_manifest, run_suite
from .report_charts import diff_chart, drift_chart, history_html, success_chart, write_exports
from .report_repeats import repeats_html
from .tables import episode_errors_cell, p_cell, pct

__all__ = ["ReportSummary", "build_report", "episode_page_path"]

_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif"}
_EPISODES = """
SELECT e.run_id, e.task_id, e.mode, coalesce(e.category, 'unknown'), e.agent, e.snapshot_id, e.steps, e.end_reason,
       e.answer, e.error, e.replay_exact, e.replay_canonical, e.replay_fuzzy, e.replay_miss,
       coalesce(e.missed_urls, '[]'), e.path, e.validity, coalesce(e.repeat_index, 0)
FROM episodes e LEFT JOIN runs r USING (run_id)
ORDER BY r.started_at DESC NULLS LAST, e.run_id, e.task_id, e.mode, coalesce(e.repeat_index, 0)
"""
_RUNS = "SELECT run_id, path FROM runs WHERE path IS NOT NULL"
_MAX_KEYFRAMES = 24
_VERDICTS = """SELECT run_id, task_id, mode, judge, judge_model, success, score, thoughts, error, path,
       coalesce(repeat_index, 0)
FROM verdicts ORDER BY judge"""


class ReportSummary(BaseModel):
    """What :func:`build_report` wrote."""

    out_dir: Path
    index: Path
    episode_pages: int
    assets: int
    exports: list[Path] = []  # the tables as CSV and the charts as SVG files, beside index.html


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def episode_page_path(run_id: str, task_id: str, mode: str, repeat: int = 0) -> str:
    """The page of an episode (one repeat of a task in a mode), relative to the report folder."""
    return f"episodes/{_safe(run_id)}/{_safe(task_id)}-{_safe(episode_folder_name(mode, repeat))}.html"


def _page(title: str, body: str, root: str, generated: str) -> str:
    template = Template(resources.files(__package__).joinpath("templates/page.html").read_text("utf-8"))
    return template.substitute(title=escape(title), body=body, root=root, generated=escape(generated))


def _table(headers: list[str] | None, rows: list[list[str]], numeric: set[int] = frozenset(),  # type: ignore[assignment]
           row_class: list[str] | None = None) -> str:
    head = f"<thead><tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr></thead>" if headers else ""
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = "".join(f'<td class="num">{c}</td>' if j in numeric else f"<td>{c}</td>" for j, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table>{head}<tbody>{''.join(body)}</tbody></table>"


def _ok(success: bool | None) -> str:
    if success is None:
        return "–"
    return '<span class="ok">success</span>' if success else '<span class="fail">failure</span>'


# -- index -------------------------------------------------------------------------------


def _validity_html(comp: Comparison) -> str:
    """Frozen success is never shown without its coverage: success over all and over complete episodes."""
    rows = []
    for g in comp.groups:
        v = g.frozen_validity
        if v is None:
            continue
        rows.append([escape(g.agent), escape(g.judge), str(v.episodes), pct(v.success_rate), str(v.complete),
                     pct(v.complete_success_rate), pct(v.shares.get("complete")), pct(v.shares.get("degraded")),
                     pct(v.shares.get("off-snapshot")), str(v.judge_errors), str(v.episode_errors)])
    return ("<p>Frozen coverage: <em>complete</em> episodes saw only recorded pages; <em>off-snapshot</em> "
            "ones missed a document or content fetch (marked in the episode list). A judge error is neither a "
            "success nor a failure: it is left out of both rates and counted on its own; an episode that could "
            "not run (setup, browser or infrastructure error) is in no rate and no share.</p>"
            + _table(["agent", "judge", "frozen episodes", "success (all)", "complete", "success (complete)",
                      "complete", "degraded", "off-snapshot", "judge errors", "episode errors"], rows,
                     numeric=set(range(2, 11))))


def _comparison_html(comp: Comparison) -> str:
    if not comp.groups:
        return '<p class="note">No episodes with verdicts yet.</p>'
    chart = success_chart(comp) + "\n" + diff_chart(comp)
    rows = []
    for g in comp.groups:
        ci = "–" if g.ci_low is None else f"[{pct(g.ci_low)}, {pct(g.ci_high)}]"
        rows.append([escape(g.agent), escape(g.judge), str(g.paired), pct(g.live_rate), pct(g.frozen_rate),
                     pct(g.difference), ci, escape(p_cell(g)), str(g.counts.both), str(g.counts.live_only),
                     str(g.counts.frozen_only), str(g.counts.neither),
                     "–" if g.frozen_mean_score is None else f"{g.frozen_mean_score:.2f}", pct(g.frozen_miss_rate),
                     str(g.flagged_episodes), str(g.judge_errors), escape(episode_errors_cell(g))])
    parts = [f'<div class="chart" id="success-chart">{chart}</div>',
             f"<p>Episodes used: {escape(comp.selection)}. Interval: {comp.level:.0%} paired bootstrap, "
             f"{comp.iterations} resamples, seed {comp.seed}. McNemar: exact two-sided test on discordant pairs. "
             "Judge errors and episode errors (episodes that could not run: not the agent's failures) are in "
             "no rate, pair or pass@k; a task left with none of its episodes judged in a mode is not paired.</p>",
             _table(["agent", "judge", "paired", "live", "frozen", "diff", f"{comp.level:.0%} CI", "McNemar p",
                     "both", "live only", "frozen only", "neither", "frozen score", "miss rate", "flagged",
                     "judge errors", "episode errors"],
                    rows, numeric=set(range(2, 17))),
             _validity_html(comp), repeats_html(comp)]
    for g in comp.groups:
        parts.append(f"<h3>{escape(g.agent)} · {escape(g.judge)}</h3>")
        parts.append(_table(["category", "paired tasks", "live", "frozen"],
                            [[escape(c.category), str(c.n), pct(c.live_rate), pct(c.frozen_rate)]
                             for c in g.categories], numeric={1, 2, 3}))
        if g.flips:
            from .report_flips import flip_page_path

            parts.append("<p>Flips (success in one mode only) and what had changed at the time of the live run:</p>")
            parts.append(_table(
                ["task", "category", "success in", "site at live run", "from", "likeliest cause", "frozen misses",
                 "episodes"],
                [[f'<a href="{flip_page_path(g.agent, g.judge, f.task_id, f.live_run)}">{escape(f.task_id)}</a>',
                  escape(f.category), f.direction, escape(f.drift_status),
                  escape(f.attribution.source if f.attribution else "none"),
                  escape(f"{f.attribution.resources[0].status} {f.attribution.resources[0].url}")
                  if f.attribution and f.attribution.resources else "–", str(f.frozen_misses),
                  f'<a href="{episode_page_path(f.live_run, f.task_id, "live", f.live_repeat)}">live</a> · '
                  f'<a href="{episode_page_path(f.frozen_run, f.task_id, "frozen", f.frozen_repeat)}">frozen</a>']
                 for f in g.flips]))
        flagged = [e for e in g.frozen_episodes if e.flagged]
        if flagged:
            parts.append("<p>Frozen episodes with replay misses (their scores may reflect missing pages):</p>")
            parts.append(_table(["task", "run", "verdict", "score", "misses", "requests", "miss rate"],
                                [[f'<a href="{episode_page_path(e.run_id, e.task_id, "frozen", e.repeat)}">{escape(e.task_id)}</a>',
                                  escape(e.run_id), _ok(e.success), f"{e.score:.2f}", str(e.misses), str(e.requests),
                                  pct(e.miss_rate)] for e in flagged], row_class=["flag"] * len(flagged)))
    return "\n".join(parts)


def _drift_html(drift: DriftSeries) -> str:
    if not drift.points:
        return '<p class="note">No drift probes yet (<code>ego2web-replay drift probe</code>).</p>'
    chart = drift_chart(drift)
    latest = {key: pts[-1] for key, pts in drift.series("task").items()}
    rows = [[escape(k), p.probed_at.strftime("%Y-%m-%d %H:%M"), escape(p.task_status or "–"), str(p.urls),
             pct(p.fraction_changed)] for k, p in sorted(latest.items())]
    return (f'<div class="chart" id="drift-chart">{chart}</div><p>{drift.probes} probes. '
            "Latest status per task:</p>" + _table(["task", "probed at", "status", "urls", "changed"], rows,
                                                   numeric={3, 4}))


def _index_body(comp: Comparison, drift: DriftSeries, episodes: list[tuple], verdicts: dict,
                history: list[RunPoint]) -> str:
    rows = []
    for e in episodes:
        run_id, task_id, mode, repeat = e[0], e[1], e[2], e[17]
        vs = verdicts.get((run_id, task_id, mode, repeat), [])
        vtext = ", ".join(f"{escape(v[3])}: {_verdict_mark(v, e[7] in EPISODE_ERRORS)}" for v in vs) or "–"
        misses = "–" if e[13] is None else str(e[13])
        if e[16]:
            misses += f" ({escape(e[16])})"
        rows.append([f'<a href="{episode_page_path(run_id, task_id, mode, repeat)}">{escape(task_id)}</a>',
                     escape(episode_folder_name(mode, repeat)),
                     escape(run_id), escape(e[4] or "?"), escape(e[3]), str(e[6]), escape(e[7] or ""), vtext, misses])
    flags = ["flag" if e[13] or e[16] == "off-snapshot" or e[7] in EPISODE_ERRORS else "" for e in episodes]
    return "\n".join([
        "<h2>Live vs frozen</h2>", _comparison_html(comp),
        "<h2>Every run over time</h2>", history_html(history),
        "<h2>Drift since capture</h2>", _drift_html(drift),
        "<h2>Episodes</h2>",
        _table(["task", "mode", "run", "agent", "category", "steps", "end", "verdicts", "replay misses"], rows,
               numeric={5, 8}, row_class=flags) if rows else '<p class="note">No episodes.</p>',
    ])


# -- episode pages -----------------------------------------------------------------------


def _copy_asset(src: Path, files_dir: Path, copied: set[Path], inside: Path | None = None) -> str | None:
    """Copy an image next to the page; return its path relative to the page, or None if missing
    (or, with ``inside``, outside that folder: a trajectory cannot make the report copy any file)."""
    if not src.is_file() or src.suffix.lower() not in _IMAGE_SUFFIXES:
        return None
    if inside is not None and not src.resolve().is_relative_to(inside.resolve()):
        return None
    files_dir.mkdir(parents=True, exist_ok=True)
    dest = files_dir / _safe(src.name)
    n = 1
    while dest in copied:
        dest = files_dir / f"{n}-{_safe(src.name)}"
        n += 1
    shutil.copyfile(src, dest)
    copied.add(dest)
    return f"{files_dir.name}/{dest.name}"


def _verdict_mark(row: tuple, could_not_run: bool) -> str:
    """An episode list's mark of one verdict: an episode that could not run is not judged, whatever an older
    verdict says; a judge error is an error, never a failure (✗)."""
    if could_not_run:
        return "not judged"
    if row[8]:
        return f'<span class="fail" title="{escape(row[8])}">judge error</span>'
    return "✓" if row[5] else "✗"


def _verdict_html(row: tuple, could_not_run: bool = False) -> str:
    judge, model, success, score, thoughts, error, vpath = row[3], row[4], row[5], row[6], row[7], row[8], row[9]
    key_points: list[str] = []
    if vpath and Path(vpath).is_file():
        try:
            v = read_model(Path(vpath), Verdict, "verdict")
            thoughts, key_points = v.thoughts, v.key_points
        except (Ego2WebError, OSError):
            pass
    outcome = ("not judged (the episode could not run)" if could_not_run
               else '<span class="fail">judge error</span>' if error else f"{_ok(success)}, score {score:.2f}")
    parts = [f"<h3>{escape(judge)}{f' ({escape(model)})' if model else ''}: {outcome}</h3>"]
    if key_points:
        parts.append("<ul>" + "".join(f"<li>{escape(k)}</li>" for k in key_points) + "</ul>")
    parts.append(f'<div class="thoughts">{escape(thoughts or "(no thoughts recorded)")}</div>')
    if error:
        parts.append(f'<p class="note">{escape(error)}</p>' if could_not_run
                     else f'<p class="fail">judge error: {escape(error)}</p>')
    return "\n".join(parts)


def _video_keyframe_dirs(runs: list[tuple[str, str]]) -> dict[tuple[str, str], Path]:
    """(run, task) → the keyframe cache beside the task's video, where the suite names a video."""
    out: dict[tuple[str, str], Path] = {}
    for run_id, path in runs:
        try:
            suite = run_suite(read_run_manifest(path), path)
        except Ego2WebError:
            continue
        for task in suite or []:
            video = task.video_path(suite.base_dir if suite else None)
            if video is not None:
                out[(run_id, task.id)] = video.with_name(video.name + ".keyframes")
    return out


def _keyframes(ep_dir: Path | None, video_frames: Path | None) -> list[Path]:
    found: list[Path] = []
    for folder in (ep_dir / "keyframes" if ep_dir else None, video_frames):
        if folder is not None and folder.is_dir():
            found += sorted(p for p in folder.rglob("*") if p.suffix.lower() in _IMAGE_SUFFIXES and p.is_file())
    return found[:_MAX_KEYFRAMES]


def _episode_body(e: tuple, verdicts: list[tuple], page: Path, video_frames: Path | None) -> tuple[str, int]:
    run_id, task_id, mode, category, agent = e[0], e[1], e[2], e[3], e[4]
    ep_dir = Path(e[15]) if e[15] else None
    files_dir = page.with_name(page.stem + "_files")
    copied: set[Path] = set()
    traj: Trajectory | None = None
    if ep_dir is not None:
        try:
            traj = load_trajectory(ep_dir)
        except Ego2WebError:
            traj = None
    facts = [["task", escape(task_id)], ["run", escape(run_id)], ["agent", escape(agent or "?")], ["category", escape(category)],
             ["mode", escape(mode)], ["snapshot", escape(e[5] or "–")], ["steps", str(e[6])],
             ["end reason", escape(e[7] or "–") + (' <span class="fail">(episode error: could not run; in no '
                                                   'rate)</span>' if e[7] in EPISODE_ERRORS else "")], ["validity", escape(e[16] or "–")], ["answer", escape(e[8] if e[8] is not None else "(none)")]]
    if e[9]:
        facts.append(["error", f'<span class="fail">{escape(e[9])}</span>'])
    parts = [_table(None, facts)]
    if traj is not None and traj.instruction:
        parts.insert(0, f"<p><strong>Instruction:</strong> {escape(traj.instruction)}</p>")
    if mode == "frozen":
        missed = json.loads(e[14])
        counts = [str(x if x is not None else 0) for x in e[10:14]]
        parts.append("<h2>Replay</h2>" + _table(["exact", "canonical", "fuzzy", "miss"], [counts], numeric={0, 1, 2, 3},
                                               row_class=["flag" if e[13] else ""]))
        if missed:
            parts.append("<p>Missed URLs:</p><ul>" + "".join(f"<li><code>{escape(u)}</code></li>" for u in missed)
                         + "</ul>")
    parts.append('<h2>Actions</h2>')
    if traj is None:
        parts.append(f'<p class="note">Trajectory file not found at {escape(str(ep_dir))}; database fields only.</p>')
    else:
        steps = []
        for s in traj.steps:
            img = _copy_asset(ep_dir / s.screenshot, files_dir, copied, inside=ep_dir) if s.screenshot and ep_dir else None
            shot = f'<img src="{escape(img)}" alt="screenshot after step {s.index}">' if img else "–"
            info = [f"<code>{escape(s.action.describe())}</code>"]
            if s.url:
                info.append(f"<br>→ {escape(s.url)}")
            if s.thought:
                info.append(f'<div class="thoughts">{escape(s.thought)}</div>')
            if s.error:
                info.append(f'<br><span class="fail">{escape(s.error)}</span>')
            steps.append([str(s.index), "".join(info), shot])
        parts.append(f'<div class="steps">{_table(["#", "action", "screenshot"], steps)}</div>' if steps
                     else '<p class="note">No actions.</p>')
    imgs = [(_copy_asset(f, files_dir, copied), f.name) for f in _keyframes(ep_dir, video_frames)]
    parts.append("<h2>Video keyframes</h2>")
    parts.append('<div class="keyframes">' + "".join(f'<img src="{escape(src)}" alt="{escape(name)}" title="{escape(name)}"> '
                                                     for src, name in imgs if src) + "</div>"
                 if any(src for src, _ in imgs) else '<p class="note">No keyframes stored with this episode.</p>')
    parts.append("<h2>Verdicts</h2>")
    parts.append("\n".join(_verdict_html(v, e[7] in EPISODE_ERRORS) for v in verdicts) or '<p class="note">Not judged yet.</p>')
    return "\n".join(parts), len(copied)


# -- build -------------------------------------------------------------------------------


def build_report(db_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, iterations: int = 2000,
                 seed: int = 0) -> ReportSummary:
    """Write the static report for everything in the database into ``out_dir``."""
    comp = compare(db_path, iterations=iterations, seed=seed)
    drift = drift_timeseries(db_path)
    history = run_history(db_path)
    with read_connection(db_path) as con:
        episodes = con.execute(_EPISODES).fetchall()
        verdict_rows = con.execute(_VERDICTS).fetchall()
        runs = con.execute(_RUNS).fetchall()
    video_frames = _video_keyframe_dirs(runs)
    verdicts: dict[tuple[str, str, str, int], list[tuple]] = defaultdict(list)
    for v in verdict_rows:
        verdicts[(v[0], v[1], v[2], v[10])].append(v)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(str(resources.files(__package__).joinpath("static/report.css")), out / "report.css")
    generated = f"generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC from {Path(db_path).name}"
    assets = 0
    for e in episodes:
        rel = episode_page_path(e[0], e[1], e[2], e[17])
        page = out / rel
        page.parent.mkdir(parents=True, exist_ok=True)
        if (files := page.with_name(page.stem + "_files")).exists():
            shutil.rmtree(files)
        body, n = _episode_body(e, verdicts.get((e[0], e[1], e[2], e[17]), []), page, video_frames.get((e[0], e[1])))
        assets += n
        page.write_text(_page(f"{e[1]} · {episode_folder_name(e[2], e[17])} · {e[0]}", body, "../../", generated),
                        "utf-8")
    assets += _write_flip_pages(comp, episodes, out, generated)
    index = out / "index.html"
    index.write_text(_page("Live vs frozen, drift and episodes", _index_body(comp, drift, episodes, verdicts, history), "",
                           generated), "utf-8")
    exports = write_exports(out, comp, drift, history)
    return ReportSummary(out_dir=out, index=index, episode_pages=len(episodes), assets=assets, exports=exports)


def _write_flip_pages(comp: Comparison, episodes: list[tuple], out: Path, generated: str) -> int:
    """One page per flip (:mod:`.report_flips`); returns the images copied."""
    from .report_flips import flip_body, flip_page_path

    paths: dict[tuple[str, str, str, int], str | None] = {}
    for e in episodes:  # a flip's page shows the repeats the flip is about
        paths[(e[0], e[1], e[2], e[17])] = e[15]
    assets = 0
    for g in comp.groups:
        for f in g.flips:
            page = out / flip_page_path(g.agent, g.judge, f.task_id, f.live_run)
            page.parent.mkdir(parents=True, exist_ok=True)
            if (files := page.with_name(page.stem + "_files")).exists():
                shutil.rmtree(files)
            body, n = flip_body(f, g.agent, g.judge,
                                {"live": paths.get((f.live_run, f.task_id, "live", f.live_repeat)),
                                 "frozen": paths.get((f.frozen_run, f.task_id, "frozen", f.frozen_repeat))}, page)
            assets += n
            page.write_text(_page(f"Flip: {f.task_id} ({f.direction})", body, "../../", generated), "utf-8")
    return assets

