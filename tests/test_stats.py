"""Paired statistics against hand-computed values."""

from __future__ import annotations

import pytest

from ego2web_replay.tracking.stats import (
    PairedCounts,
    bootstrap_diff_ci,
    mcnemar_exact,
    paired_counts,
    rate,
)


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 0, 1.0),            # no discordant pairs
    (1, 0, 1.0),            # 2 * C(1,0)/2 = 1
    (5, 0, 0.0625),         # 2 * 1/32
    (0, 5, 0.0625),         # symmetric
    (6, 1, 0.125),          # 2 * (1 + 7)/128
    (10, 2, 158 / 4096),    # 2 * (1 + 12 + 66)/4096
    (3, 1, 0.625),          # 2 * (1 + 4)/16
    (3, 3, 1.0),            # 2 * 42/64 > 1, capped
])
def test_mcnemar_exact(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, abs=1e-15)


def test_mcnemar_rejects_negative() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_counts_and_rate() -> None:
    pairs = [(True, True), (True, False), (True, False), (False, True), (False, False)]
    assert paired_counts(pairs) == PairedCounts(both=1, live_only=2, frozen_only=1, neither=1)
    assert paired_counts(pairs).n == 5
    assert rate([True, False, True, True]) == 0.75
    assert rate([]) is None


def test_bootstrap_degenerate_intervals() -> None:
    assert bootstrap_diff_ci([True] * 5, [False] * 5, iterations=200) == (1.0, 1.0)
    assert bootstrap_diff_ci([True, False, True], [True, False, True], iterations=200) == (0.0, 0.0)
    assert bootstrap_diff_ci([], []) is None


def test_bootstrap_two_pairs_hand_computed() -> None:
    # diffs [1, 0]: a resample's mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4,
    # so the 5% and 95% quantiles are 0 and 1, and the 30% and 70% quantiles are both 0.5.
    live, frozen = [True, False], [False, False]
    assert bootstrap_diff_ci(live, frozen, iterations=4000, seed=3, level=0.9) == (0.0, 1.0)
    assert bootstrap_diff_ci(live, frozen, iterations=4000, seed=3, level=0.4) == (0.5, 0.5)


def test_bootstrap_stable_under_fixed_seed() -> None:
    live = [True] * 30 + [False] * 10 + [True] * 5 + [False] * 15
    frozen = [True] * 30 + [False] * 10 + [False] * 5 + [True] * 15   # diff = (35-45)/60
    a = bootstrap_diff_ci(live, frozen, iterations=3000, seed=42)
    b = bootstrap_diff_ci(live, frozen, iterations=3000, seed=42)
    assert a == b
    assert a is not None
    lo, hi = a
    point = (35 - 45) / 60
    assert lo < point < hi
    # the normal approximation: sd of the mean diff = sqrt((20/60 - point^2)/60) ≈ 0.0703
    assert hi - lo == pytest.approx(2 * 1.96 * 0.0703, rel=0.12)
    other = bootstrap_diff_ci(live, frozen, iterations=3000, seed=43)
    assert other != a and other is not None
    assert abs(other[0] - lo) < 0.03 and abs(other[1] - hi) < 0.03


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        bootstrap_diff_ci([True], [True, False])
    with pytest.raises(ValueError):
        bootstrap_diff_ci([True], [True], level=1.5)
