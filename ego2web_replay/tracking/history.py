"""Every run over time: each run's success rate per judge and mode, not only the newest run's.

``compare`` pairs the newest episode of each (agent, judge, task, mode); this
reads them all, one point per run × judge × mode: the share of the run's
judged episodes judged a success, at the time the run started. As everywhere,
a judge error and an episode that could not run are in no rate; they are
counted on the point (``judge_errors``, ``episode_errors``).
"""

from __future__ import annotations

import csv
import io
import os
from datetime import datetime

from pydantic import BaseModel

from ..models import EPISODE_ERRORS
from .db import read_connection

__all__ = ["RunPoint", "history_csv", "run_history"]

_QUERY = """
SELECT e.run_id, r.started_at, coalesce(r.agent, e.agent, '?'), v.judge, e.mode,
       count(*) FILTER (WHERE v.error IS NULL AND NOT coalesce(e.end_reason IN ({errors}), false)) AS judged,
       count(*) FILTER (WHERE v.error IS NULL AND NOT coalesce(e.end_reason IN ({errors}), false)
                        AND v.success) AS successes,
       count(*) FILTER (WHERE v.error IS NOT NULL AND NOT coalesce(e.end_reason IN ({errors}), false)) AS judge_errors,
       count(*) FILTER (WHERE coalesce(e.end_reason IN ({errors}), false)) AS episode_errors
FROM episodes e
JOIN verdicts v ON v.run_id = e.run_id AND v.task_id = e.task_id AND v.mode = e.mode
               AND coalesce(v.repeat_index, 0) = coalesce(e.repeat_index, 0)
LEFT JOIN runs r ON r.run_id = e.run_id
GROUP BY ALL
ORDER BY r.started_at NULLS LAST, e.run_id, v.judge, e.mode
"""


class RunPoint(BaseModel):
    """One run's result under one judge in one mode."""

    run_id: str
    started_at: datetime | None
    agent: str
    judge: str
    mode: str
    judged: int
    successes: int
    success_rate: float | None  # successes / judged; None with nothing judged
    judge_errors: int
    episode_errors: int


def run_history(db_path: str | os.PathLike[str]) -> list[RunPoint]:
    """Every run × judge × mode in the database, oldest run first."""
    errors = ", ".join(f"'{reason}'" for reason in sorted(EPISODE_ERRORS))
    with read_connection(db_path) as con:
        rows = con.execute(_QUERY.format(errors=errors)).fetchall()
    return [RunPoint(run_id=r[0], started_at=r[1], agent=r[2], judge=r[3], mode=r[4], judged=r[5], successes=r[6],
                     success_rate=r[6] / r[5] if r[5] else None, judge_errors=r[7], episode_errors=r[8])
            for r in rows]


def history_csv(points: list[RunPoint]) -> str:
    """One CSV row per point."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(RunPoint.model_fields), lineterminator="\n")
    w.writeheader()
    for p in points:
        w.writerow(p.model_dump(mode="json"))
    return buf.getvalue()
