"""Paired statistics for live-versus-frozen comparisons (pure functions, numpy only).

Each task run both live and frozen gives a pair of outcomes: successes (one
episode per mode) or, with ``run --repeats``, per-task success rates. The
pairs are counted into a 2×2 table (a task is "live only" when its live rate is
the higher one); McNemar's exact test asks whether those discordant pairs are
balanced (with rates it is the sign test on the per-task differences, which is
McNemar's test when every rate is 0 or 1); a paired bootstrap over tasks gives
a confidence interval of the difference of the mean rates. ``pass_at_k`` is the
unbiased estimator of the chance that at least one of k samples succeeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import comb

import numpy as np
from pydantic import BaseModel

__all__ = ["PairedCounts", "paired_counts", "mcnemar_exact", "bootstrap_diff_ci", "rate", "pass_at_k"]


class PairedCounts(BaseModel):
    """The 2×2 table of paired outcomes."""

    both: int = 0
    live_only: int = 0
    frozen_only: int = 0
    neither: int = 0

    @property
    def n(self) -> int:
        return self.both + self.live_only + self.frozen_only + self.neither


def paired_counts(pairs: Iterable[tuple[float, float]]) -> PairedCounts:
    """Count ``(live, frozen)`` pairs of successes (bools) or per-task success rates.

    Equal values count as ``both`` (above 0) or ``neither`` (0); otherwise the
    higher side's "only" cell.
    """
    c = PairedCounts()
    for live, frozen in pairs:
        if live == frozen:
            if live:
                c.both += 1
            else:
                c.neither += 1
        elif live > frozen:
            c.live_only += 1
        else:
            c.frozen_only += 1
    return c


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs.

    Under the null each discordant pair falls either way with probability ½, so
    ``p = min(1, 2 · Σ_{k ≤ min(b, c)} C(b+c, k) / 2^(b+c))``; 1.0 when there are none.
    """
    if b < 0 or c < 0:
        raise ValueError("counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def rate(successes: Sequence[float]) -> float | None:
    """Share of successes (or mean of per-task rates), or None for no trials."""
    return sum(float(s) for s in successes) / len(successes) if successes else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples with ``c`` successes: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n:
        raise ValueError("successes must be between 0 and the number of samples")
    if not 1 <= k <= n:
        raise ValueError("k must be between 1 and the number of samples")
    return 1.0 - comb(n - c, k) / comb(n, k)


def bootstrap_diff_ci(
    live: Sequence[float],
    frozen: Sequence[float],
    *,
    iterations: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``rate(live) - rate(frozen)``, resampling pairs.

    The same ``seed`` gives the same interval. None when there are no pairs.
    """
    if len(live) != len(frozen):
        raise ValueError("live and frozen outcomes must be paired (same length)")
    if not 0 < level < 1:
        raise ValueError("level must be between 0 and 1")
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    n = len(live)
    if n == 0:
        return None
    diff = np.asarray(live, dtype=float) - np.asarray(frozen, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.empty(iterations)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, iterations, chunk):
        stop = min(iterations, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)
