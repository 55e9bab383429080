"""Live versus frozen success, paired by task, for every agent and judge.

Which episodes count: for each (agent, judge, task, mode) the **most recent
run** (by the run's start time) that has a verdict from that judge. A task is
*paired* when it has both a live and a frozen episode; rates, the paired
table, McNemar's test and the bootstrap interval use paired tasks only.

A verdict the judge could not make (its ``error`` is set) is neither a success
nor a failure: the task is left out of the pairs and rates, and counted in
``judge_errors`` (episodes) and ``judge_error_tasks``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field

from ..atomic import atomic_write_text
from ..errors import TrackingError
from .attribution import DEFAULT_PROBE_WINDOW, Attribution, attach_attributions
from .db import read_connection
from .stats import PairedCounts, bootstrap_diff_ci, mcnemar_exact, paired_counts, rate
from .validity import FrozenValidity, attach_validity

__all__ = [
    "SELECTION",
    "CategoryRates",
    "FrozenEpisode",
    "Flip",
    "GroupComparison",
    "Comparison",
    "compare",
    "write_json",
    "write_csv",
    "csv_text",
]

SELECTION = "most recent run per (agent, judge, task, mode) with a verdict"


class CategoryRates(BaseModel):
    """Success rates of the paired tasks of one category (or 'overall')."""

    category: str
    n: int
    live_successes: int
    frozen_successes: int
    live_rate: float | None
    frozen_rate: float | None


class FrozenEpisode(BaseModel):
    """A frozen episode's score with its replay misses."""

    task_id: str
    run_id: str
    category: str
    success: bool
    score: float
    requests: int
    misses: int
    miss_rate: float | None
    missed_urls: list[str] = Field(default_factory=list)
    flagged: bool = Field(description="True when the replay had misses: the score may reflect them.")
    validity: str | None = Field(default=None, description="complete, degraded or off-snapshot.")


class Flip(BaseModel):
    """A task that succeeded in one mode only, with what had changed at the time of its live run."""

    task_id: str
    category: str
    direction: str = Field(description="'live only' or 'frozen only'.")
    live_run: str
    frozen_run: str
    drift_status: str = Field(default="unknown", description="unchanged/changed/gone/blocked at the time of the "
                              "live run, or 'unknown' (see ``attribution``).")
    probed_at: datetime | None = Field(default=None, description="When the probe used was taken (probe source).")
    frozen_misses: int = 0
    attribution: Attribution | None = Field(default=None, description="Source and changed resources (URL, status, "
                                            "detail), the likeliest cause first.")


class GroupComparison(BaseModel):
    """The comparison for one agent under one judge."""

    agent: str
    judge: str
    paired: int
    live_unpaired: int = Field(description="Tasks with a live episode only.")
    frozen_unpaired: int = Field(description="Tasks with a frozen episode only.")
    counts: PairedCounts
    live_rate: float | None
    frozen_rate: float | None
    difference: float | None = Field(description="live_rate - frozen_rate.")
    ci_low: float | None
    ci_high: float | None
    mcnemar_p: float
    categories: list[CategoryRates]
    frozen_mean_score: float | None
    frozen_miss_rate: float | None = Field(description="Misses / requests over the paired frozen episodes.")
    flagged_episodes: int
    frozen_episodes: list[FrozenEpisode]
    flips: list[Flip]
    judge_errors: int = Field(default=0, description="Episodes whose verdict is a judge error (not counted).")
    modality: str = Field(default="none", description="The agent's input modality (video, keyframes, captions, "
                                                      "none; joined with + when the selected episodes mix them).")
    judge_error_tasks: list[str] = Field(default_factory=list, description="Tasks left out for a judge error.")
    frozen_validity: FrozenValidity | None = Field(default=None, description="Frozen success over all and over "
                                                   "complete episodes, and the share of each validity class.")


class Comparison(BaseModel):
    """Everything ``compare`` reports."""

    db: str
    generated_at: datetime
    selection: str = SELECTION
    iterations: int
    seed: int
    level: float
    groups: list[GroupComparison]


_QUERY = """
WITH joined AS (
    SELECT e.agent, v.judge, e.task_id, e.mode, coalesce(e.category, 'unknown') AS category, e.run_id,
           v.success, v.score,
           coalesce(e.replay_exact, 0) + coalesce(e.replay_canonical, 0) + coalesce(e.replay_fuzzy, 0)
               + coalesce(e.replay_miss, 0) AS requests,
           coalesce(e.replay_miss, 0) AS misses, coalesce(e.missed_urls, '[]') AS missed_urls,
           v.error AS judge_error, coalesce(e.input_modality, 'none') AS modality,
           row_number() OVER (PARTITION BY e.agent, v.judge, e.task_id, e.mode
                              ORDER BY r.started_at DESC NULLS LAST, e.run_id DESC) AS rn
    FROM episodes e
    JOIN verdicts v ON v.run_id = e.run_id AND v.task_id = e.task_id AND v.mode = e.mode
    LEFT JOIN runs r ON r.run_id = e.run_id
)
SELECT agent, judge, task_id, mode, category, run_id, success, score, requests, misses, missed_urls, judge_error,
       modality
FROM joined WHERE rn = 1 ORDER BY agent, judge, task_id, mode
"""


def _check_names(kind: str, wanted: tuple[str, ...], known: set[str]) -> None:
    unknown = [w for w in wanted if w not in known]
    if unknown:
        listing = ", ".join(sorted(known)) or "none in the database"
        raise TrackingError(f"unknown {kind} {', '.join(map(repr, unknown))}; known {kind}s: {listing}")


def compare(
    db_path: str | os.PathLike[str],
    *,
    agents: tuple[str, ...] | list[str] = (),
    judges: tuple[str, ...] | list[str] = (),
    iterations: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    probe_window: timedelta = DEFAULT_PROBE_WINDOW,
) -> Comparison:
    """Compare live and frozen success for each agent and judge (optionally only those named).

    Each flip is attributed (:mod:`.attribution`): from the live episode's own archive, else from a
    drift probe taken within ``probe_window`` of the live run, else ``unknown``.
    """
    with read_connection(db_path) as con:
        rows = con.execute(_QUERY).fetchall()
    _check_names("agent", tuple(agents), {r[0] for r in rows})
    _check_names("judge", tuple(judges), {r[1] for r in rows})
    by_group: dict[tuple[str, str], dict[str, dict[str, tuple]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        agent, judge, task, mode = row[:4]
        if (agents and agent not in agents) or (judges and judge not in judges):
            continue
        by_group[(agent, judge)][task][mode] = row
    groups = []
    for (agent, judge), tasks in sorted(by_group.items()):
        judged, errors, error_tasks = _without_judge_errors(tasks)
        g = _group(agent, judge, judged, iterations, seed, level)
        g.judge_errors, g.judge_error_tasks = errors, error_tasks
        g.modality = _modalities(tasks)
        groups.append(g)
    attach_attributions(db_path, groups, probe_window)
    attach_validity(db_path, groups)
    return Comparison(db=str(db_path), generated_at=datetime.now(UTC), iterations=iterations, seed=seed,
                      level=level, groups=groups)


def _modalities(tasks: dict[str, dict[str, tuple]]) -> str:
    """The input modalities of the selected episodes (``keyframes``; ``captions+video`` when mixed)."""
    return "+".join(sorted({row[12] for modes in tasks.values() for row in modes.values()})) or "none"


def _without_judge_errors(tasks: dict[str, dict[str, tuple]]) -> tuple[dict[str, dict[str, tuple]], int, list[str]]:
    """Tasks whose selected verdicts were all made; the number of errored verdicts; the tasks left out.

    A task with a judge error in any mode is left out entirely: pairing its other
    mode would count an unmade verdict as a failure (a spurious flip).
    """
    kept: dict[str, dict[str, tuple]] = {}
    errors = 0
    left_out: list[str] = []
    for task, modes in tasks.items():
        bad = sum(1 for row in modes.values() if row[11])
        if bad:
            errors += bad
            left_out.append(task)
        else:
            kept[task] = modes
    return kept, errors, sorted(left_out)


def _group(agent: str, judge: str, tasks: dict[str, dict[str, tuple]], iterations: int,
           seed: int, level: float) -> GroupComparison:
    paired = sorted(t for t, m in tasks.items() if "live" in m and "frozen" in m)
    live = [bool(tasks[t]["live"][6]) for t in paired]
    frozen = [bool(tasks[t]["frozen"][6]) for t in paired]
    counts = paired_counts(zip(live, frozen, strict=True))
    ci = bootstrap_diff_ci(live, frozen, iterations=iterations, seed=seed, level=level) if paired else None
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(paired):
        by_cat[tasks[t]["live"][4]].append(i)
    categories = [_rates(cat, [live[i] for i in idx], [frozen[i] for i in idx]) for cat, idx in sorted(by_cat.items())]
    categories.append(_rates("overall", live, frozen))
    frozen_eps = []
    for t in paired:
        r = tasks[t]["frozen"]
        frozen_eps.append(FrozenEpisode(
            task_id=t, run_id=r[5], category=r[4], success=bool(r[6]), score=float(r[7] or 0.0), requests=r[8],
            misses=r[9], miss_rate=r[9] / r[8] if r[8] else None, missed_urls=json.loads(r[10]), flagged=r[9] > 0))
    flips = []
    for t, lv, fz in zip(paired, live, frozen, strict=True):
        if lv == fz:
            continue
        flips.append(Flip(task_id=t, category=tasks[t]["live"][4], direction="live only" if lv else "frozen only",
                          live_run=tasks[t]["live"][5], frozen_run=tasks[t]["frozen"][5],
                          frozen_misses=tasks[t]["frozen"][9]))
    requests = sum(e.requests for e in frozen_eps)
    lr, fr = rate(live), rate(frozen)
    return GroupComparison(
        agent=agent, judge=judge, paired=len(paired),
        live_unpaired=sum(1 for m in tasks.values() if "live" in m and "frozen" not in m),
        frozen_unpaired=sum(1 for m in tasks.values() if "frozen" in m and "live" not in m),
        counts=counts, live_rate=lr, frozen_rate=fr,
        difference=lr - fr if lr is not None and fr is not None else None,
        ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
        mcnemar_p=mcnemar_exact(counts.live_only, counts.frozen_only), categories=categories,
        frozen_mean_score=sum(e.score for e in frozen_eps) / len(frozen_eps) if frozen_eps else None,
        frozen_miss_rate=sum(e.misses for e in frozen_eps) / requests if requests else None,
        flagged_episodes=sum(e.flagged for e in frozen_eps), frozen_episodes=frozen_eps, flips=flips,
    )


def _rates(category: str, live: list[bool], frozen: list[bool]) -> CategoryRates:
    return CategoryRates(category=category, n=len(live), live_successes=sum(live), frozen_successes=sum(frozen),
                         live_rate=rate(live), frozen_rate=rate(frozen))


_CSV_FIELDS = ["agent", "judge", "category", "n", "live_successes", "frozen_successes", "live_rate", "frozen_rate",
               "difference", "both", "live_only", "frozen_only", "neither", "mcnemar_p", "ci_low", "ci_high",
               "frozen_mean_score", "frozen_miss_rate", "flagged_episodes", "judge_errors", "modality"]


def csv_text(comparison: Comparison) -> str:
    """One CSV row per agent, judge and category ('overall' rows carry the paired statistics)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for g in comparison.groups:
        for c in g.categories:
            row: dict[str, object] = {"agent": g.agent, "modality": g.modality, "judge": g.judge, **c.model_dump()}
            if c.live_rate is not None and c.frozen_rate is not None:
                row["difference"] = c.live_rate - c.frozen_rate
            if c.category == "overall":
                row.update(g.counts.model_dump(), mcnemar_p=g.mcnemar_p, ci_low=g.ci_low, ci_high=g.ci_high,
                           frozen_mean_score=g.frozen_mean_score, frozen_miss_rate=g.frozen_miss_rate,
                           flagged_episodes=g.flagged_episodes, judge_errors=g.judge_errors)
            w.writerow(row)
    return buf.getvalue()


def write_csv(comparison: Comparison, path: str | os.PathLike[str]) -> None:
    """Write :func:`csv_text` atomically."""
    atomic_write_text(Path(path), csv_text(comparison))


def write_json(comparison: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the whole comparison as JSON, atomically."""
    atomic_write_text(Path(path), comparison.model_dump_json(indent=2) + "\n")
