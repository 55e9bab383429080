"""The report's repeats section: per-task success rates, pass@k and the spread of repeated episodes."""

from __future__ import annotations

from html import escape

from .compare import Comparison
from .tables import pct

__all__ = ["repeats_html"]


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i else f"<td>{c}</td>" for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def repeats_html(comp: Comparison) -> str:
    """pass@k and variance per agent, judge and mode, then each task's rates; a note when nothing was repeated."""
    groups = [g for g in comp.groups if g.max_repeats > 1]
    if not groups:
        return ('<p class="note">No repeated episodes (<code>run --repeats K</code> runs each task K times: '
                "pass@k and the variance of the repeats appear here).</p>")
    parts = ["<h3>Repeats</h3><p>Each task's outcome is its success rate over its repeats; pass@k is the mean "
             "over tasks of the unbiased estimator 1 − C(n−c, k)/C(n, k); task variance is the mean Bernoulli "
             "variance p(1 − p); repeat std is the standard deviation of the suite's success rate across repeat "
             "indices. Judge errors and episodes that could not run are not samples; they are counted apart.</p>"]
    for g in groups:
        ks = sorted({k for m in g.repeats for k in m.pass_at_k})
        rows = [[escape(m.mode), str(m.tasks), str(m.samples), pct(m.mean_rate),
                 *[pct(m.pass_at_k.get(k)) for k in ks],
                 "–" if m.mean_task_variance is None else f"{m.mean_task_variance:.3f}",
                 "–" if m.repeat_std is None else pct(m.repeat_std), str(m.judge_errors), str(m.episode_errors)]
                for m in g.repeats]
        parts.append(f"<h4>{escape(g.agent)} · {escape(g.judge)}</h4>")
        parts.append(_table(["mode", "tasks", "episodes", "mean rate", *[f"pass@{k}" for k in ks],
                             "task variance", "repeat std", "judge errors", "episode errors"], rows))
        per_task: dict[str, dict[str, str]] = {}
        for m in g.repeats:
            for t in m.per_task:
                per_task.setdefault(t.task_id, {})[m.mode] = f"{t.successes}/{t.n} ({pct(t.rate)})"
        modes = [m.mode for m in g.repeats]
        parts.append(_table(["task", *modes], [[escape(t), *[cells.get(m, "–") for m in modes]]
                                               for t, cells in sorted(per_task.items())]))
    return "\n".join(parts)
