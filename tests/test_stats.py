"""harness/stats.py at the edges of its input: too few samples, no spread, values at zero.
A verdict is built on these answers, so each says "nothing can be concluded" (None) rather
than a number the samples do not support."""

from __future__ import annotations

import pytest

from harness import stats


def test_too_few_samples_give_no_interval_and_no_test():
    assert stats.quantile_ci([1.0]) == (None, None)
    assert stats.bootstrap_ci(stats.median_ratio, [1.0], [1.0, 2.0]) == (None, None)
    assert stats.shift_pvalue([1.0, 2.0], [1.0, 2.0, 3.0]) is None
    assert stats.rate_pvalue([0, 1], [1, 1, 1]) is None
    assert stats.session_shift([1.0, 2.0], [1.0, 2.0, 3.0]) is None
    with pytest.raises(ValueError, match="at least 2 samples"):
        stats.mean_ci([1.0])


def test_no_samples_summarize_to_their_count_alone():
    assert stats.summarize([]) == {"n": 0}
    assert stats.summarize([], count=7) == {"n": 7}


# scipy warns of identical samples before answering NaN, which is the case under test
@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")
def test_sessions_at_zero_or_without_spread_are_not_judged():
    assert stats.session_shift([1.0, 0.0, 2.0], [1.0, 2.0, 3.0]) is None
    assert stats.session_shift([2.0] * 3, [2.0] * 3) is None


def test_moderated_tests_without_any_spread():
    # no run of its own and no family to lend one: nothing to test against
    assert stats.moderated_test([], [1.0], None) is None
    assert stats.moderated_test([1.0], [1.0], None) is None
    assert stats.moderated_paired_test([], [], None) is None
    assert stats.moderated_paired_test([1.0], [2.0], None) is None
    # identical values on each side, the family's spread zero: a change is certain, none is not
    assert stats.moderated_test([1.0, 1.0], [2.0, 2.0], 0.0)[:2] == (0.0, 0.0)
    assert stats.moderated_test([1.0, 1.0], [1.0, 1.0], 0.0)[:2] == (1.0, 0.0)
    assert stats.moderated_paired_test([1.0, 1.0], [2.0, 2.0], 0.0)[:2] == (0.0, 0.0)
    assert stats.moderated_paired_test([1.0, 1.0], [1.0, 1.0], 0.0)[:2] == (1.0, 0.0)
