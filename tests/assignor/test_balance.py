"""scenario.md "Balance": the O(n) check against the rule as written, pair by pair."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from assignor.balance import is_balanced


def _balanced_pairwise(counts: dict[str, int], threads: dict[str, int], b: int) -> bool:
    """For every s, d with load(s) > load(d): (n_s - b) / t_s < (n_d + b) / t_d."""
    return not any(
        Fraction(counts[s], threads[s]) > Fraction(counts[d], threads[d])
        and not Fraction(counts[s] - b, threads[s]) < Fraction(counts[d] + b, threads[d])
        for s in counts for d in counts if s != d
    )


@settings(max_examples=400, deadline=None)
@given(
    loads=st.lists(st.tuples(st.integers(0, 60), st.sampled_from([1, 1, 2, 3, 4, 6, 7, 64])), min_size=0, max_size=9),
    balance_factor=st.integers(0, 3),
)
def test_the_extreme_pair_decides_as_every_pair_does(loads, balance_factor):
    counts = {f"c{index}": count for index, (count, _) in enumerate(loads)}
    threads = {f"c{index}": thread_count for index, (_, thread_count) in enumerate(loads)}
    assert is_balanced(counts, threads, balance_factor) == _balanced_pairwise(counts, threads, balance_factor)


def test_loads_that_differ_by_less_than_a_float_can_tell():
    """Loads are compared exactly: 2^60 + 1 tasks on one thread is more than 2^60 on one."""
    counts = {"a": 2**60 + 1, "b": 2**60 - 1}
    threads = {"a": 1, "b": 1}
    assert not is_balanced(counts, threads, 1)
    assert is_balanced(counts, threads, 2)
