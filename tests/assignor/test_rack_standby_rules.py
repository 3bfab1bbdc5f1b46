"""Each rule of ``assignor.rack_standby`` that has a numpy twin agrees with its scalar form."""

from types import SimpleNamespace

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
def test_single_spread_is_the_spread_of_one_standby(weight, data):
    active, standby = data.draw(locations(rows=2))
    assert rack_standby._single_spread(weight, active, standby) == rack_standby._spread(weight, active, [standby])


@SETTINGS
@given(weight=st.integers(1, 6), data=st.data())
def test_spread_changes_are_spread_after_less_before(weight, data):
    """``_spread_changes`` (numpy, as ``_Standbys.moves`` and ``_AnchorReturns`` read it) of one
    standby moving, per task, is ``_spread`` after less before; padded slots (not ``staying``)
    are ignored."""
    keys = data.draw(st.integers(1, 4))
    loc = st.lists(st.integers(0, 2), min_size=keys, max_size=keys).map(tuple)
    width = data.draw(st.integers(1, 4))
    rows = data.draw(st.lists(st.tuples(loc, st.lists(loc, min_size=1, max_size=width), st.data()), max_size=6))
    active, kept, staying, left, arriving, expected = [], [], [], [], [], []
    for at, standbys, draw in rows:
        mover = draw.draw(st.integers(0, len(standbys) - 1))
        there = draw.draw(loc)
        padding = [draw.draw(loc) for _ in range(width - len(standbys))]
        active.append(at)
        kept.append(standbys + padding)
        staying.append([k != mover for k in range(len(standbys))] + [False] * len(padding))
        left.append(standbys[mover])
        arriving.append(there)
        after = [there if k == mover else s for k, s in enumerate(standbys)]
        expected.append(rack_standby._spread(weight, at, after) - rack_standby._spread(weight, at, standbys))

    def array(values, *shape):
        return np.array(values, dtype=np.int64).reshape(len(rows), *shape)

    changes = rack_standby._spread_changes(weight, array(active, keys), array(kept, width, keys),
                                           np.array(staying, dtype=bool).reshape(len(rows), width),
                                           array(left, keys), array(arriving, keys))
    assert changes.tolist() == expected


@SETTINGS
@given(data=st.data())
def test_not_ready_is_ready_for_negated(data):
    """``_AnchorReturns._not_ready`` (numpy, every mover at once) reads readiness as ``ready_for``:
    per task the clients caught up on it, or, where its whole changelog is within the lag, the
    few that are not (``everywhere_but``)."""
    clients = data.draw(st.integers(1, 6))
    tasks = data.draw(st.integers(1, 6))
    client_sets = st.frozensets(st.integers(0, clients - 1))
    ready = [data.draw(client_sets) for _ in range(tasks)]
    everywhere_but = {task: data.draw(client_sets) for task in data.draw(st.sets(st.integers(0, tasks - 1)))}
    for task in everywhere_but:
        ready[task] = frozenset()
    state = SimpleNamespace(ready=ready, everywhere_but=everywhere_but, clients=range(clients), tasks=range(tasks))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, tasks - 1), st.integers(0, clients - 1)), max_size=20))
    returns = object.__new__(rack_standby._AnchorReturns)
    returns.ready_keys = returns.inverted = None
    task_array = np.array([t for t, _ in pairs], dtype=np.int64)
    client_array = np.array([c for _, c in pairs], dtype=np.int64)
    bulk = returns._not_ready(state, task_array, client_array)
    assert bulk.tolist() == [int(not rack_standby._Standbys.ready_for(state, t, c)) for t, c in pairs]
