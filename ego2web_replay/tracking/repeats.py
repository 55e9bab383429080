"""What repeated episodes show: per-task success rates, pass@k and the spread of the repeats.

``run --repeats K`` runs each task K times in each mode. For one agent, judge
and mode, each task then has n judged samples with c successes (a judge error
is not a sample, nor is an episode that could not run: both are counted on their
own, ``judge_errors`` and ``episode_errors``). From them:

- the task's success rate ``c / n`` and its Bernoulli variance ``p (1 - p)``
  (how much the agent's outcome on that task varies from run to run);
- pass@k for k = 1 .. the fewest samples any task has, the mean over tasks of
  the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` (pass@1 is the mean rate);
- the success rate of each repeat index over the tasks (repeat 0, repeat 1,
  ...) and the standard deviation of those rates (ddof 1): how much a one-shot
  evaluation of the whole suite would have moved between repeats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import stdev

from pydantic import BaseModel, Field

from .stats import pass_at_k, rate

__all__ = ["TaskRate", "ModeRepeats", "mode_repeats"]


class TaskRate(BaseModel):
    """One task's repeated outcomes in one mode."""

    task_id: str
    n: int = Field(description="Judged samples (repeats without a judge error).")
    successes: int
    rate: float = Field(description="successes / n.")
    variance: float = Field(description="Bernoulli variance rate · (1 - rate) of the task's outcome.")


class ModeRepeats(BaseModel):
    """The repeats of one agent under one judge in one mode."""

    mode: str
    tasks: int = Field(description="Tasks with at least one judged sample.")
    samples: int = Field(description="Judged episodes over all tasks.")
    min_samples: int = Field(description="Fewest judged samples of any task (the largest k of pass@k).")
    max_samples: int
    mean_rate: float | None = Field(description="Mean of the per-task success rates.")
    pass_at_k: dict[int, float] = Field(description="k → mean over tasks of the unbiased pass@k estimator.")
    mean_task_variance: float | None = Field(description="Mean over tasks of the Bernoulli variance.")
    repeat_rates: list[float | None] = Field(description="Success rate over the tasks of each repeat index.")
    repeat_std: float | None = Field(description="Standard deviation (ddof 1) of repeat_rates; None for one repeat.")
    per_task: list[TaskRate]
    judge_errors: int = Field(default=0, description="Episodes of this mode whose verdict is a judge error "
                                                     "(not samples).")
    episode_errors: int = Field(default=0, description="Episodes of this mode that could not run (not samples).")


def mode_repeats(mode: str, samples: Mapping[str, Sequence[tuple[int, bool]]]) -> ModeRepeats:
    """Summarise ``task → [(repeat index, success), ...]`` (judged samples only) for one mode."""
    per_task = []
    by_repeat: dict[int, list[bool]] = {}
    for task_id, outcomes in sorted(samples.items()):
        if not outcomes:
            continue
        n, c = len(outcomes), sum(ok for _, ok in outcomes)
        p = c / n
        per_task.append(TaskRate(task_id=task_id, n=n, successes=c, rate=p, variance=p * (1 - p)))
        for repeat, ok in outcomes:
            by_repeat.setdefault(repeat, []).append(ok)
    ns = [t.n for t in per_task]
    kmax = min(ns) if ns else 0
    repeat_rates = [rate(by_repeat.get(r, [])) for r in range(max(by_repeat, default=-1) + 1)]
    present = [r for r in repeat_rates if r is not None]
    return ModeRepeats(
        mode=mode, tasks=len(per_task), samples=sum(ns), min_samples=kmax, max_samples=max(ns, default=0),
        mean_rate=rate([t.rate for t in per_task]),
        pass_at_k={k: sum(pass_at_k(t.n, t.successes, k) for t in per_task) / len(per_task)
                   for k in range(1, kmax + 1)},
        mean_task_variance=rate([t.variance for t in per_task]),
        repeat_rates=repeat_rates, repeat_std=stdev(present) if len(present) > 1 else None, per_task=per_task)
