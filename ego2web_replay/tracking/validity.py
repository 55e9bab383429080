"""Frozen success with its coverage: over all frozen episodes, over ``complete`` ones, and each class's share.

A frozen score is never shown without its coverage: an ``off-snapshot``
episode saw pages that were not recorded (a missed document or content fetch),
a ``degraded`` one missed only subresources, a ``complete`` one saw only
recorded pages (see ``ego2web_replay.validity``). Selection is the one
``compare`` uses: the most recent run per (agent, judge, task) with a verdict.

A verdict the judge could not make (its ``error`` is set) is neither a success
nor a failure: its episode still counts in the coverage (the episode happened and
saw what it saw), but it is left out of the success rates and counted in
``judge_errors`` (``complete_judge_errors`` among the complete episodes). An
episode that could not run (:data:`~ego2web_replay.models.EPISODE_ERRORS`) saw
nothing: it is in no share and no rate, only in ``episode_errors``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, Field

from ..errors import Ego2WebError
from ..models import EPISODE_ERRORS, Verdict, episode_dir, load_trajectory
from ..validity import VALIDITIES, episode_validity
from .stats import rate

__all__ = ["FrozenValidity", "frozen_validity", "attach_validity", "validity_note", "frozen_coverage"]

_QUERY = """
WITH joined AS (
    SELECT e.agent, v.judge, e.task_id, v.success, v.error, coalesce(e.validity, 'unknown') AS validity,
           coalesce(e.repeat_index, 0) AS repeat_index, e.end_reason,
           dense_rank() OVER (PARTITION BY e.agent, v.judge, e.task_id
                              ORDER BY r.started_at DESC NULLS LAST, e.run_id DESC) AS rn
    FROM episodes e
    JOIN verdicts v ON v.run_id = e.run_id AND v.task_id = e.task_id AND v.mode = e.mode
                   AND coalesce(v.repeat_index, 0) = coalesce(e.repeat_index, 0)
    LEFT JOIN runs r ON r.run_id = e.run_id
    WHERE e.mode = 'frozen'
)
SELECT agent, judge, task_id, success, error, validity, repeat_index, end_reason FROM joined WHERE rn = 1
ORDER BY agent, judge, task_id, repeat_index
"""


class FrozenValidity(BaseModel):
    """One agent's frozen success under one judge, with the validity of its episodes."""

    episodes: int = Field(description="Frozen episodes (all, paired or not).")
    successes: int
    success_rate: float | None = Field(description="Frozen success over all judged frozen episodes "
                                                   "(judge errors left out).")
    complete: int = Field(description="Episodes that saw only recorded pages.")
    complete_successes: int
    complete_success_rate: float | None = Field(description="Frozen success over judged complete episodes only.")
    judge_errors: int = Field(default=0, description="Frozen episodes whose verdict is a judge error: neither "
                                                     "success nor failure, left out of both rates.")
    complete_judge_errors: int = Field(default=0, description="Judge errors among the complete episodes.")
    episode_errors: int = Field(default=0, description="Frozen episodes that could not run: in no share, no rate "
                                                       "and not in ``episodes``.")
    counts: dict[str, int] = Field(description="Episodes per class: complete, degraded, off-snapshot, unknown.")
    shares: dict[str, float | None] = Field(description="Share of each class among the frozen episodes.")


def frozen_validity(con: duckdb.DuckDBPyConnection) -> tuple[dict[tuple[str, str], FrozenValidity],
                                                              dict[tuple[str, str, str, int], str]]:
    """Per (agent, judge): frozen success and validity shares; per (agent, judge, task, repeat) the validity."""
    rows = con.execute(_QUERY).fetchall()
    groups: dict[tuple[str, str], list[tuple[bool | None, str]]] = defaultdict(list)
    unrun: dict[tuple[str, str], int] = defaultdict(int)
    per_task: dict[tuple[str, str, str, int], str] = {}
    for agent, judge, task, success, error, validity, repeat, end_reason in rows:
        per_task[(agent, judge, task, int(repeat))] = validity
        if end_reason in EPISODE_ERRORS:
            unrun[(agent, judge)] += 1
            continue
        groups[(agent, judge)].append((None if error else bool(success), validity))
    summaries = {key: _summary(groups.get(key, [])) for key in {*groups, *unrun}}
    for key, n in unrun.items():
        summaries[key].episode_errors = n
    return summaries, per_task


def _summary(eps: list[tuple[bool | None, str]]) -> FrozenValidity:
    """``ok`` is None for a judge error: counted in the coverage, never in a rate."""
    counts = {name: 0 for name in (*VALIDITIES, "unknown")}
    for _, validity in eps:
        counts[validity if validity in counts else "unknown"] += 1
    judged = [ok for ok, _ in eps if ok is not None]
    complete = [ok for ok, validity in eps if validity == "complete"]
    complete_judged = [ok for ok in complete if ok is not None]
    n = len(eps)
    return FrozenValidity(
        episodes=n, successes=sum(judged), success_rate=rate(judged),
        complete=len(complete), complete_successes=sum(complete_judged), complete_success_rate=rate(complete_judged),
        judge_errors=n - len(judged), complete_judge_errors=len(complete) - len(complete_judged),
        counts=counts, shares={k: (v / n if n else None) for k, v in counts.items()})


def attach_validity(db_path: Any, groups: list[Any]) -> None:
    """Put each group's :class:`FrozenValidity` and each frozen episode's class onto compare's groups."""
    from .db import read_connection

    with read_connection(db_path) as con:
        summaries, per_task = frozen_validity(con)
    for g in groups:
        g.frozen_validity = summaries.get((g.agent, g.judge))
        for e in g.frozen_episodes:
            e.validity = per_task.get((g.agent, g.judge, e.task_id, e.repeat))


def validity_note(v: FrozenValidity | None) -> str:
    """``complete 3/4 (75%), success on complete 67%, off-snapshot 25%``: the coverage beside a frozen score."""
    if v is None or not v.episodes:
        return "no frozen episodes" + (f" that ran ({v.episode_errors} could not run)" if v and v.episode_errors else "")
    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.0f}%"
    return (f"complete {v.complete}/{v.episodes}, success over all {pct(v.success_rate)}, over complete "
            f"{pct(v.complete_success_rate)}; degraded {pct(v.shares['degraded'])}, "
            f"off-snapshot {pct(v.shares['off-snapshot'])}"
            + (f"; judge errors {v.judge_errors} (not in the rates)" if v.judge_errors else "")
            + (f"; episode errors {v.episode_errors} (could not run; not counted)" if v.episode_errors else ""))


def frozen_coverage(run_dir: Path, verdicts: list[Verdict]) -> dict[str, Any] | None:
    """The coverage beside a frozen score: how many judged frozen episodes are ``complete`` (saw only
    recorded pages) and the success over those; None without frozen verdicts. Judge errors are in no rate."""
    frozen = [v for v in verdicts if v.mode == "frozen" and v.episode_error is None]  # those that ran
    if not frozen:
        return None
    complete: list[Verdict] = []
    for v in frozen:
        try:
            validity = episode_validity(load_trajectory(episode_dir(run_dir, v.task_id, v.mode, v.repeat)))
        except Ego2WebError:
            validity = None
        if validity == "complete":
            complete.append(v)
    judged = [v for v in complete if v.error is None]
    wins = sum(v.success for v in judged)
    return {"episodes": len(frozen), "complete": len(complete), "complete_success": wins,
            "complete_judged": len(judged), "complete_success_rate": wins / len(judged) if judged else None}
