"""Each rule of ``assignor.rack_standby`` that has a numpy twin agrees with its scalar form."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from assignor import rack_standby

SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def locations(draw, rows: int | None = None):
    """(keys, rows of location values): few values per key, so that they often meet."""
    keys = draw(st.integers(1, 5))
    count = draw(st.integers(0, 8)) if rows is None else rows
    return [tuple(draw(st.lists(st.integers(0, 2), min_size=keys, max_size=keys))) for _ in range(count)]


@SETTINGS
@given(weight=st.integers(1, 6), data=st.data())
def test_single_spreads_is_single_spread_of_each_task(weight, data):
    active = data.draw(locations())
    keys = len(active[0]) if active else data.draw(st.integers(1, 5))
    standby = [tuple(data.draw(st.lists(st.integers(0, 2), min_size=keys, max_size=keys))) for _ in active]
    shape = (len(active), keys)
    bulk = rack_standby._single_spreads(weight, np.array(active, dtype=np.int64).reshape(shape),
                                        np.array(standby, dtype=np.int64).reshape(shape))
    assert bulk.tolist() == [rack_standby._single_spread(weight, a, s) for a, s in zip(active, standby, strict=True)]
    if active:  # one standby location for every task (broadcast), as ``_PairLosses`` and ``_ZoneDeltas`` pass it
        there = standby[0]
        bulk = rack_standby._single_spreads(weight, np.array(active, dtype=np.int64), np.array(there, dtype=np.int64))
        assert bulk.tolist() == [rack_standby._single_spread(weight, a, there) for a in active]


@SETTINGS
@given(weight=st.integers(1, 6), data=st.data())
def test_single_spread_is_the_general_spread_with_one_standby(weight, data):
    """Per key, ``weight`` per standby sharing the active's value and one per repeated value:
    with one standby, ``weight`` + 1 exactly where it shares the active's value."""
    active, standby = data.draw(locations(rows=2))
    general = sum(weight * (s == a) + 2 - len({s, a}) for a, s in zip(active, standby, strict=True))
    assert rack_standby._single_spread(weight, active, standby) == general
