"""benchmarks/_common.py ratio_ci: median of paired per-round ratios and a bootstrap interval of it."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _common  # noqa: E402


def test_ratio_ci_pairs_rounds_not_medians() -> None:
    # direct drifts 1 -> 10 ms over the rounds; ours is always 1.1x the direct fetch of its own round
    den = [1.0 + 0.3 * i for i in range(31)]
    num = [1.1 * d for d in den]
    med, lo, hi = _common.ratio_ci(num, den)
    assert med == pytest.approx(1.1) and lo == pytest.approx(1.1) and hi == pytest.approx(1.1)


def test_ratio_ci_interval_brackets_the_median_and_narrows_with_samples() -> None:
    noise = [0.5, 1.8, 0.9, 1.3, 0.7, 2.4, 1.0, 1.1, 0.6, 1.6]
    med, lo, hi = _common.ratio_ci(noise, [1.0] * len(noise))
    assert med == pytest.approx(1.05) and lo < med < hi
    med30, lo30, hi30 = _common.ratio_ci(noise * 3, [1.0] * 30)
    assert med30 == pytest.approx(med) and hi30 - lo30 < hi - lo
    assert _common.ratio_ci(noise, [1.0] * 10) == (med, lo, hi)  # seeded: the same samples, the same interval


@pytest.mark.parametrize("num,den", [([], []), ([1.0, 2.0], [1.0])])
def test_ratio_ci_refuses_unpaired_samples(num: list[float], den: list[float]) -> None:
    with pytest.raises(ValueError, match="paired"):
        _common.ratio_ci(num, den)
