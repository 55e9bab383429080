"""Live versus frozen success, paired by task, for every agent and judge.

Which episodes count: for each (agent, judge, task, mode) the **most recent
run** (by the run's start time) that has a verdict from that judge, with all
of that run's repeats (``run --repeats``). A task is *paired* when it has both
a live and a frozen episode; rates, the paired table, McNemar's test and the
bootstrap interval use paired tasks only.

Repeats are samples of one task, never separate tasks: each task's outcome in
a mode is its success rate over its repeats (0 or 1 without repeats), the
group's rate is the mean of those, and the paired statistics compare each
task's live rate with its frozen rate (see :mod:`.stats`). ``repeats`` holds
per mode the per-task rates, pass@k and the spread of the repeats
(:mod:`.repeats`).

A verdict the judge could not make (its ``error`` is set) is neither a success
nor a failure: it is not a sample, it is counted in ``judge_errors``, and a task
left with no judged sample in one of its modes is left out of the pairs and
rates (``judge_error_tasks``). An episode that could not run (its end reason is
not the agent's: :data:`~ego2web_replay.models.EPISODE_ERRORS`) is treated the
same way whatever its verdict says (a verdict written before judges refused such
episodes included), and counted on its own: ``episode_errors`` (by end reason in
``episode_error_reasons``), ``episode_error_tasks``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field, computed_field

from ..atomic import atomic_write_text
from ..errors import TrackingError
from ..models import EPISODE_ERRORS
from .attribution import DEFAULT_PROBE_WINDOW, Attribution, attach_attributions
from .db import read_connection
from .repeats import ModeRepeats, mode_repeats
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

SELECTION = "most recent run per (agent, judge, task, mode) with a verdict, all its repeats"


class CategoryRates(BaseModel):
    """Success rates of the paired tasks of one category (or 'overall')."""

    category: str
    n: int = Field(description="Paired tasks.")
    live_successes: int = Field(description="Successful live episodes (over all repeats).")
    frozen_successes: int
    live_rate: float | None = Field(description="Mean of the tasks' live success rates.")
    frozen_rate: float | None
    live_samples: int = Field(default=0, description="Judged live episodes (n × repeats).")
    frozen_samples: int = 0


class FrozenEpisode(BaseModel):
    """A frozen episode's score with its replay misses."""

    task_id: str
    run_id: str
    category: str
    repeat: int = 0
    success: bool
    score: float
    requests: int
    misses: int
    miss_rate: float | None
    missed_urls: list[str] = Field(default_factory=list)
    flagged: bool = Field(description="True when the replay had misses: the score may reflect them.")
    validity: str | None = Field(default=None, description="complete, degraded or off-snapshot.")
    set_aside: int = Field(default=0, description="Answers that set volatile values aside: names learned volatile "
                           "at record time or fresh random ids (the recorded response of the same request).")
    set_aside_params: dict[str, int] = Field(default_factory=dict, description="Those answers per reason and "
                                             "parameters, e.g. {'fresh-id: cid, rid': 2}.")
    shared: int = Field(default=0, description="Answers from another task's snapshot (--share-window).")
    shared_from: dict[str, int] = Field(default_factory=dict, description="Those answers per source snapshot.")


class Flip(BaseModel):
    """A task that succeeded in one mode only, with what had changed at the time of its live run."""

    task_id: str
    category: str
    direction: str = Field(description="'live only' or 'frozen only' (with repeats: the mode whose success "
                                       "rate on the task is higher).")
    live_rate: float = Field(default=0.0, description="The task's live success rate over its repeats.")
    frozen_rate: float = 0.0
    live_run: str
    frozen_run: str
    live_repeat: int = Field(default=0, description="The live repeat the flip is explained by: the first whose "
                             "outcome is the live side's (a failure when frozen is higher, else a success).")
    frozen_repeat: int = Field(default=0, description="Likewise on the frozen side.")
    drift_status: str = Field(default="unknown", description="unchanged/changed/gone/blocked/unreachable at "
                              "the time of the live run, or 'unknown' (see ``attribution``).")
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
    mcnemar_p: float | None = Field(description="Exact McNemar p on the discordant pairs; None when no task is "
                                    "paired (no test was made, which is not p = 1).")
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
    episode_errors: int = Field(default=0, description="Episodes that could not run (an end reason that is not the "
                                "agent's): in no rate, pair or pass@k, whatever their verdict says.")
    episode_error_reasons: dict[str, int] = Field(default_factory=dict, description="episode_errors by end reason.")
    episode_error_tasks: list[str] = Field(default_factory=list, description="Tasks left out because a mode's "
                                           "episodes all could not run.")
    frozen_validity: FrozenValidity | None = Field(default=None, description="Frozen success over all and over "
                                                   "complete episodes, and the share of each validity class.")
    max_repeats: int = Field(default=1, description="Most judged samples of any task in any mode.")
    repeats: list[ModeRepeats] = Field(default_factory=list, description="Per mode: per-task success rates, "
                                       "pass@k and the variance the repeats show.")
    shared_episodes: dict[str, int] = Field(default_factory=dict, description="Per mode: the selected episodes "
                                            "that used shared captures (answers from another task's snapshot).")
    judge_models: dict[str, list[str]] = Field(default_factory=dict, description="Per mode: the judge models "
                                               "(and prompt versions) of the selected verdicts. Live and frozen "
                                               "judged with different ones are not comparable: see judge_mixed.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def judge_mixed(self) -> bool:
        """Whether the selected verdicts were not all made with one judge model and prompt version."""
        return len({m for models in self.judge_models.values() for m in models}) > 1


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
               + coalesce(e.replay_miss, 0) + coalesce(e.replay_shared, 0) AS requests,
           coalesce(e.replay_miss, 0) AS misses, coalesce(e.missed_urls, '[]') AS missed_urls,
           v.error AS judge_error, coalesce(e.input_modality, 'none') AS modality,
           coalesce(e.repeat_index, 0) AS repeat_index, e.end_reason,
           coalesce(e.replay_learned, 0) + coalesce(e.replay_fresh_id, 0) AS set_aside,
           coalesce(e.set_aside, '{}') AS set_aside_params,
           coalesce(e.replay_shared, 0) AS shared, coalesce(e.shared_from, '{}') AS shared_from,
           v.judge_model, json_extract_string(v.judge_spec, '$.prompt_version') AS prompt_version,
           dense_rank() OVER (PARTITION BY e.agent, v.judge, e.task_id, e.mode
                              ORDER BY r.started_at DESC NULLS LAST, e.run_id DESC) AS rn
    FROM episodes e
    JOIN verdicts v ON v.run_id = e.run_id AND v.task_id = e.task_id AND v.mode = e.mode
                   AND coalesce(v.repeat_index, 0) = coalesce(e.repeat_index, 0)
    LEFT JOIN runs r ON r.run_id = e.run_id
)
SELECT agent, judge, task_id, mode, category, run_id, success, score, requests, misses, missed_urls, judge_error,
       modality, repeat_index, end_reason, set_aside, set_aside_params, shared, shared_from, judge_model,
       prompt_version
FROM joined WHERE rn = 1 ORDER BY agent, judge, task_id, mode, repeat_index
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
    by_group: dict[tuple[str, str], dict[str, dict[str, list[tuple]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for row in rows:
        agent, judge, task, mode = row[:4]
        if (agents and agent not in agents) or (judges and judge not in judges):
            continue
        by_group[(agent, judge)][task][mode].append(row)
    groups = []
    for (agent, judge), tasks in sorted(by_group.items()):
        kept = _without_errors(tasks)
        g = _group(agent, judge, kept.samples, iterations, seed, level)
        g.judge_errors, g.judge_error_tasks = kept.judge_errors, kept.judge_error_tasks
        g.episode_errors, g.episode_error_tasks = sum(kept.episode_errors.values()), kept.episode_error_tasks
        g.episode_error_reasons = dict(sorted(kept.episode_errors.items()))
        for m in g.repeats:
            m.judge_errors, m.episode_errors = kept.by_mode.get(m.mode, (0, 0))
        g.modality = _modalities(tasks)
        g.judge_models = _judge_models(tasks)
        groups.append(g)
    attach_attributions(db_path, groups, probe_window)
    attach_validity(db_path, groups)
    return Comparison(db=str(db_path), generated_at=datetime.now(UTC), iterations=iterations, seed=seed,
                      level=level, groups=groups)


Samples = dict[str, dict[str, list[tuple]]]  # task → mode → the selected rows (one per repeat)


def _modalities(tasks: Samples) -> str:
    """The input modalities of the selected episodes (``keyframes``; ``captions+video`` when mixed)."""
    return "+".join(sorted({row[12] for modes in tasks.values() for rows in modes.values() for row in rows})) or "none"


def _judge_models(tasks: Samples) -> dict[str, list[str]]:
    """Per mode, the judge models (and prompt versions) of the selected verdicts: ``model (prompts v3)``."""
    out: dict[str, set[str]] = defaultdict(set)
    for modes in tasks.values():
        for mode, rows in modes.items():
            for row in rows:
                model, prompts = row[19], row[20]
                out[mode].add((model or "no model") + (f" (prompts {prompts})" if prompts else ""))
    return {mode: sorted(found) for mode, found in sorted(out.items())}


@dataclass
class _Kept:
    samples: Samples
    judge_errors: int
    judge_error_tasks: list[str]
    episode_errors: dict[str, int]  # end reason → episodes
    episode_error_tasks: list[str]
    by_mode: dict[str, tuple[int, int]]  # mode → (judge errors, episode errors)


def _episode_error(row: tuple) -> bool:
    return row[14] in EPISODE_ERRORS


def _without_errors(tasks: Samples) -> _Kept:
    """The judged samples of episodes that ran, with what was dropped and the tasks left out.

    An episode that could not run, and an errored verdict, is dropped (neither a
    success nor a failure). A task left with no sample in one of its modes is left
    out entirely: pairing its other mode would count an unmade verdict as a failure
    (a spurious flip). It is an episode-error task when that mode's episodes include
    one that could not run, else a judge-error task.
    """
    kept = _Kept({}, 0, [], defaultdict(int), [], {})
    by_mode: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, modes in tasks.items():
        judged = {mode: [r for r in rows if not r[11] and not _episode_error(r)] for mode, rows in modes.items()}
        for mode, rows in modes.items():
            unrun = [r for r in rows if _episode_error(r)]
            for r in unrun:
                kept.episode_errors[r[14]] += 1
            by_mode[mode][1] += len(unrun)
            by_mode[mode][0] += len(rows) - len(unrun) - len(judged[mode])
        if all(judged.values()):
            kept.samples[task] = judged
        elif any(_episode_error(r) for mode, rows in modes.items() if not judged[mode] for r in rows):
            kept.episode_error_tasks.append(task)
        else:
            kept.judge_error_tasks.append(task)
    kept.judge_errors = sum(judge for judge, _ in by_mode.values())
    kept.by_mode = {mode: (judge, unrun) for mode, (judge, unrun) in by_mode.items()}
    kept.judge_error_tasks.sort()
    kept.episode_error_tasks.sort()
    return kept


def _task_rate(rows: list[tuple]) -> float:
    return sum(bool(r[6]) for r in rows) / len(rows)


def _repeats(tasks: Samples) -> list[ModeRepeats]:
    modes = sorted({m for ms in tasks.values() for m in ms}, key=lambda m: (m != "live", m))
    return [mode_repeats(mode, {t: [(int(r[13]), bool(r[6])) for r in ms[mode]] for t, ms in tasks.items()
                                if mode in ms}) for mode in modes]


def _telling(rows: list[tuple], success: bool) -> tuple:
    """The first repeat (lowest index) whose outcome is ``success``: the one a flip on that side is
    about (a task that failed live in one repeat of three is explained by that repeat's pages)."""
    ordered = sorted(rows, key=lambda r: int(r[13]))
    return next((r for r in ordered if bool(r[6]) == success), ordered[0])


def _group(agent: str, judge: str, tasks: Samples, iterations: int,
           seed: int, level: float) -> GroupComparison:
    paired = sorted(t for t, m in tasks.items() if "live" in m and "frozen" in m)
    live = [_task_rate(tasks[t]["live"]) for t in paired]
    frozen = [_task_rate(tasks[t]["frozen"]) for t in paired]
    counts = paired_counts(zip(live, frozen, strict=True))
    ci = bootstrap_diff_ci(live, frozen, iterations=iterations, seed=seed, level=level) if paired else None
    by_cat: dict[str, list[str]] = defaultdict(list)
    for t in paired:
        by_cat[tasks[t]["live"][0][4]].append(t)
    categories = [_rates(cat, ts, tasks) for cat, ts in sorted(by_cat.items())]
    categories.append(_rates("overall", paired, tasks))
    frozen_eps = []
    for t in paired:
        for r in tasks[t]["frozen"]:
            frozen_eps.append(FrozenEpisode(
                task_id=t, run_id=r[5], category=r[4], repeat=int(r[13]), success=bool(r[6]),
                score=float(r[7] or 0.0), requests=r[8], misses=r[9], miss_rate=r[9] / r[8] if r[8] else None,
                missed_urls=json.loads(r[10]), flagged=r[9] > 0, set_aside=int(r[15]),
                set_aside_params=json.loads(r[16]), shared=int(r[17]), shared_from=json.loads(r[18])))
    flips = []
    for t, lv, fz in zip(paired, live, frozen, strict=True):
        if lv == fz:
            continue
        fz_rows = tasks[t]["frozen"]
        live_row = _telling(tasks[t]["live"], lv > fz)
        frozen_row = _telling(fz_rows, fz > lv)
        flips.append(Flip(task_id=t, category=tasks[t]["live"][0][4], direction="live only" if lv > fz else "frozen only",
                          live_rate=lv, frozen_rate=fz, live_run=live_row[5], frozen_run=frozen_row[5],
                          live_repeat=int(live_row[13]), frozen_repeat=int(frozen_row[13]),
                          frozen_misses=sum(r[9] for r in fz_rows)))
    requests = sum(e.requests for e in frozen_eps)
    lr, fr = rate(live), rate(frozen)
    return GroupComparison(
        agent=agent, judge=judge, paired=len(paired),
        live_unpaired=sum(1 for m in tasks.values() if "live" in m and "frozen" not in m),
        frozen_unpaired=sum(1 for m in tasks.values() if "frozen" in m and "live" not in m),
        counts=counts, live_rate=lr, frozen_rate=fr,
        difference=lr - fr if lr is not None and fr is not None else None,
        ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
        mcnemar_p=mcnemar_exact(counts.live_only, counts.frozen_only) if paired else None, categories=categories,
        frozen_mean_score=sum(e.score for e in frozen_eps) / len(frozen_eps) if frozen_eps else None,
        frozen_miss_rate=sum(e.misses for e in frozen_eps) / requests if requests else None,
        flagged_episodes=sum(e.flagged for e in frozen_eps), frozen_episodes=frozen_eps, flips=flips,
        max_repeats=max((len(rows) for ms in tasks.values() for rows in ms.values()), default=1),
        repeats=_repeats(tasks),
        shared_episodes=_shared_episodes(tasks),
    )


def _shared_episodes(tasks: Samples) -> dict[str, int]:
    """Per mode (live first), how many selected episodes had answers from shared captures."""
    modes = sorted({m for ms in tasks.values() for m in ms}, key=lambda m: (m != "live", m))
    return {mode: sum(1 for ms in tasks.values() for r in ms.get(mode, ()) if r[17]) for mode in modes}


def _rates(category: str, task_ids: list[str], tasks: Samples) -> CategoryRates:
    live, frozen = [tasks[t]["live"] for t in task_ids], [tasks[t]["frozen"] for t in task_ids]
    return CategoryRates(category=category, n=len(task_ids),
                         live_successes=sum(bool(r[6]) for rows in live for r in rows),
                         frozen_successes=sum(bool(r[6]) for rows in frozen for r in rows),
                         live_rate=rate([_task_rate(rows) for rows in live]),
                         frozen_rate=rate([_task_rate(rows) for rows in frozen]),
                         live_samples=sum(map(len, live)), frozen_samples=sum(map(len, frozen)))


_CSV_FIELDS = ["agent", "judge", "category", "n", "live_successes", "frozen_successes", "live_rate", "frozen_rate",
               "difference", "both", "live_only", "frozen_only", "neither", "mcnemar_p", "ci_low", "ci_high",
               "frozen_mean_score", "frozen_miss_rate", "flagged_episodes", "judge_errors", "modality",
               "live_samples", "frozen_samples", "max_repeats", "episode_errors", "live_shared_episodes",
               "frozen_shared_episodes", "judge_models"]


def csv_text(comparison: Comparison) -> str:
    """One CSV row per agent, judge and category ('overall' rows carry the paired statistics)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for g in comparison.groups:
        for c in g.categories:
            row: dict[str, object] = {"agent": g.agent, "modality": g.modality, "judge": g.judge, **c.model_dump(),
                                      "judge_models": "; ".join(f"{mode}: {' + '.join(found)}"
                                                                for mode, found in g.judge_models.items())}
            if c.live_rate is not None and c.frozen_rate is not None:
                row["difference"] = c.live_rate - c.frozen_rate
            if c.category == "overall":
                row.update(g.counts.model_dump(), mcnemar_p=g.mcnemar_p, ci_low=g.ci_low, ci_high=g.ci_high,
                           frozen_mean_score=g.frozen_mean_score, frozen_miss_rate=g.frozen_miss_rate,
                           flagged_episodes=g.flagged_episodes, judge_errors=g.judge_errors,
                           max_repeats=g.max_repeats, episode_errors=g.episode_errors,
                           live_shared_episodes=g.shared_episodes.get("live", 0),
                           frozen_shared_episodes=g.shared_episodes.get("frozen", 0))
            w.writerow(row)
    return buf.getvalue()


def write_csv(comparison: Comparison, path: str | os.PathLike[str]) -> None:
    """Write :func:`csv_text` atomically."""
    atomic_write_text(Path(path), csv_text(comparison))


def write_json(comparison: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the whole comparison as JSON, atomically."""
    atomic_write_text(Path(path), comparison.model_dump_json(indent=2) + "\n")
