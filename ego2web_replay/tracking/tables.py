"""Rich tables of comparisons and drift series, for the terminal."""

from __future__ import annotations

import sys

from rich.table import Table

from .compare import Comparison, FrozenEpisode, GroupComparison
from .drift import DriftSeries

__all__ = ["pct", "p_cell", "judge_cell", "comparison_tables", "drift_tables", "repeats_table", "validity_table",
           "episode_errors_cell", "shortened", "shared_cell"]


def pct(x: float | None) -> str:
    """A share as a percentage, or '–' when undefined."""
    return "–" if x is None else f"{100 * x:.1f}%"


def p_cell(g: GroupComparison) -> str:
    """McNemar's p, or why there is none: with no paired task no test was made (which is not p = 1)."""
    return "no paired task" if g.mcnemar_p is None else f"{g.mcnemar_p:.4g}"


def comparison_tables(comp: Comparison) -> list[Table]:
    """A summary table of every agent × judge, then per group its categories, flagged episodes and flips."""
    if not comp.groups:
        empty = Table(title="live vs frozen")
        empty.add_column("no episodes with verdicts in the database")
        return [empty]
    summary = Table(title=f"live vs frozen ({comp.selection})")
    for col in ("agent", "modality", "judge", "paired", "live", "frozen", "diff", f"{comp.level:.0%} CI", "McNemar p",
                "both", "live only", "frozen only", "neither", "frozen score", "miss rate", "flagged", "judge errors",
                "episode errors", "shared eps"):
        summary.add_column(col, justify="left" if col in ("agent", "judge") else "right",
                           no_wrap=col in ("agent", "judge") or col.endswith("CI"))
    tables = [summary, validity_table(comp)]
    for g in comp.groups:
        ci = "–" if g.ci_low is None else f"[{pct(g.ci_low)}, {pct(g.ci_high)}]"
        summary.add_row(g.agent, g.modality, judge_cell(g), str(g.paired), pct(g.live_rate), pct(g.frozen_rate), pct(g.difference),
                        ci, p_cell(g), str(g.counts.both), str(g.counts.live_only),
                        str(g.counts.frozen_only), str(g.counts.neither),
                        "–" if g.frozen_mean_score is None else f"{g.frozen_mean_score:.2f}",
                        pct(g.frozen_miss_rate), str(g.flagged_episodes), str(g.judge_errors), episode_errors_cell(g),
                        shared_cell(g))
        cats = Table(title=f"{g.agent} · {g.judge}: by category")
        for col in ("category", "n", "live", "frozen"):
            cats.add_column(col, justify="left" if col == "category" else "right")
        for c in g.categories:
            cats.add_row(c.category, str(c.n), pct(c.live_rate), pct(c.frozen_rate))
        tables.append(cats)
        flagged = [e for e in g.frozen_episodes if e.flagged or e.validity == "off-snapshot"]
        if flagged:
            t = Table(title=f"{g.agent} · {g.judge}: frozen episodes with replay misses")
            for col in ("task", "run", "success", "score", "misses", "miss rate", "validity"):
                t.add_column(col)
            for e in flagged:
                t.add_row(e.task_id, e.run_id, "yes" if e.success else "no", f"{e.score:.2f}", str(e.misses),
                          pct(e.miss_rate), e.validity or "–")
            tables.append(t)
        for title, count, listed, last in (
                ("frozen answers that set volatile values aside", "set_aside", "set_aside_params", "parameters"),
                ("frozen episodes answered from other tasks' snapshots (shared)", "shared", "shared_from", "from")):
            counted = [e for e in g.frozen_episodes if getattr(e, count)]
            if counted:
                tables.append(_answers_table(f"{g.agent} · {g.judge}: {title}", counted, count, listed, last))
        if g.max_repeats > 1:
            tables.append(repeats_table(g))
        if g.flips:
            t = Table(title=f"{g.agent} · {g.judge}: live/frozen flips")
            for col in ("task", "category", "success in", "site at live run", "from", "likeliest cause",
                        "frozen misses"):
                t.add_column(col)
            for f in g.flips:
                a = f.attribution
                source = (a.source + (f" {a.at:%Y-%m-%d %H:%M}" if a.source == "probe" and a.at else "")) if a else "none"
                cause = a.resources[0] if a and a.resources else None
                t.add_row(f.task_id, f.category, f.direction, f.drift_status, source,
                          shortened(f"{cause.status} {cause.url} {cause.detail}", 90) if cause else "–",
                          str(f.frozen_misses))
            tables.append(t)
    return tables


def shortened(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (with an ellipsis) for a terminal; whole when stdout is piped (a
    file or another program reads every character: README, piped table cells are never cut)."""
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if len(text) <= width or not terminal:
        return text
    return text[: width - 1] + "…"


def episode_errors_cell(g: GroupComparison) -> str:
    """``2 (setup_error 1, infra_error 1)``: the episodes that could not run, by end reason."""
    if not g.episode_errors:
        return "0"
    return f"{g.episode_errors} (" + ", ".join(f"{k} {n}" for k, n in g.episode_error_reasons.items()) + ")"


def _answers_table(title: str, episodes: list[FrozenEpisode], count: str, listed: str, last: str) -> Table:
    """Per frozen episode: its validity, how many answers of a kind (``count``) and what they were
    (``listed``: a dict of reason or source → answers)."""
    t = Table(title=title)
    for col in ("task", "run", "validity", "answers", last):
        t.add_column(col)
    for e in episodes:
        t.add_row(e.task_id, e.run_id, e.validity or "–", str(getattr(e, count)),
                  "; ".join(f"{k} ×{n}" for k, n in getattr(e, listed).items())[:120])
    return t


def judge_cell(g: GroupComparison) -> str:
    """``ego2web · gpt-4o (prompts v3)``: the judge and the model its verdicts were made with; when live and
    frozen (or their repeats) were judged with different ones, each mode's, marked MIXED: such rates are
    not comparable (the difference may be the judge's)."""
    models = sorted({m for found in g.judge_models.values() for m in found})
    if not models or models == ["no model"]:
        return g.judge
    if not g.judge_mixed:
        return f"{g.judge} · {models[0]}"
    return f"{g.judge} · MIXED: " + "; ".join(f"{mode} {' + '.join(found)}" for mode, found in g.judge_models.items())


def shared_cell(g: GroupComparison) -> str:
    """``live 0, frozen 2``: per mode, the episodes that used shared captures."""
    return ", ".join(f"{mode} {n}" for mode, n in g.shared_episodes.items()) or "0"


def repeats_table(g: GroupComparison) -> Table:
    """Per mode: tasks, episodes, mean per-task rate, pass@k, mean task variance and the std across repeats."""
    ks = sorted({k for m in g.repeats for k in m.pass_at_k})
    t = Table(title=f"{g.agent} · {g.judge}: repeats (per-task rates, pass@k, variance)")
    for col in ("mode", "tasks", "episodes", "mean rate", *[f"pass@{k}" for k in ks], "task variance", "repeat std",
                "judge errors", "episode errors"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for m in g.repeats:
        t.add_row(m.mode, str(m.tasks), str(m.samples), pct(m.mean_rate), *[pct(m.pass_at_k.get(k)) for k in ks],
                  "–" if m.mean_task_variance is None else f"{m.mean_task_variance:.3f}", pct(m.repeat_std),
                  str(m.judge_errors), str(m.episode_errors))
    return t


def validity_table(comp: Comparison) -> Table:
    """Frozen success with its coverage: over all frozen episodes and over complete ones, and each class's share."""
    t = Table(title="frozen success and coverage (complete: only recorded pages seen; "
                    "judge errors are in no rate; episodes that could not run in no share either)")
    for col in ("agent", "judge", "frozen episodes", "success (all)", "complete", "success (complete)",
                "complete %", "degraded %", "off-snapshot %", "unknown %", "judge errors", "episode errors"):
        t.add_column(col, justify="left" if col in ("agent", "judge") else "right")
    for g in comp.groups:
        v = g.frozen_validity
        if v is None:
            t.add_row(g.agent, g.judge, "0", *["–"] * 9)
            continue
        t.add_row(g.agent, g.judge, str(v.episodes), pct(v.success_rate), str(v.complete),
                  pct(v.complete_success_rate), pct(v.shares.get("complete")), pct(v.shares.get("degraded")),
                  pct(v.shares.get("off-snapshot")), pct(v.shares.get("unknown")), str(v.judge_errors),
                  str(v.episode_errors))
    return t


def drift_tables(series: DriftSeries) -> list[Table]:
    """One table per scope (overall, site, task): fraction changed since capture at each probe."""
    if not series.points:
        empty = Table(title="drift")
        empty.add_column("no drift probes in the database; run `ego2web-replay drift probe`")
        return [empty]
    tables = []
    for scope, title in (("overall", "overall"), ("site", "per site"), ("task", "per task")):
        t = Table(title=f"drift since capture: {title}")
        cols = ["site" if scope == "site" else "task" if scope == "task" else "scope", "probed at", "probe",
                "urls", "changed", "gone", "blocked", "errors", "fraction changed"]
        if scope == "task":
            cols.append("task status")
        for col in cols:
            t.add_column(col)
        for key, points in series.series(scope).items():
            for p in points:
                row = [key, p.probed_at.strftime("%Y-%m-%d %H:%M"), p.probe_id, str(p.urls), str(p.changed),
                       str(p.gone), str(p.blocked), str(p.errors), pct(p.fraction_changed)]
                if scope == "task":
                    row.append(p.task_status or "–")
                t.add_row(*row)
        tables.append(t)
    return tables
