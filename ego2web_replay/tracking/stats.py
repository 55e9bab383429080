"""Paired statistics for live-versus-frozen comparisons (pure functions, numpy only).

Each task run both live and frozen gives a pair of outcomes. The pairs are
counted into a 2×2 table; McNemar's exact test asks whether the discordant
pairs (success live only vs frozen only) are balanced; a paired bootstrap gives
a confidence interval of the difference of success rates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import comb

import numpy as np
from pydantic import BaseModel

__all__ = ["PairedCounts", "paired_counts", "mcnemar_exact", "bootstrap_diff_ci", "rate"]


class PairedCounts(BaseModel):
    """The 2×2 table of paired outcomes."""

    both: int = 0
    live_only: int = 0
    frozen_only: int = 0
    neither: int = 0

    @property
    def n(self) -> int:
        return self.both + self.live_only + self.frozen_only + self.neither


def paired_counts(pairs: Iterable[tuple[bool, bool]]) -> PairedCounts:
    """Count ``(live_success, frozen_success)`` pairs."""
    c = PairedCounts()
    for live, frozen in pairs:
        if live and frozen:
            c.both += 1
        elif live:
            c.live_only += 1
        elif frozen:
            c.frozen_only += 1
        else:
            c.neither += 1
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


def rate(successes: Sequence[bool]) -> float | None:
    """Share of successes, or None for no trials."""
    return sum(bool(s) for s in successes) / len(successes) if successes else None


def bootstrap_diff_ci(
    live: Sequence[bool],
    frozen: Sequence[bool],
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
