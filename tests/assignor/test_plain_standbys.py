"""The standbys the target placed by a tie trade places before the spread pass
(``rack_standby._spread_plain_standbys``): the target's cost, counts and restores stay as they were."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from assignor import rack_standby
from assignor.model import ClientState, TaskId, TaskSpec
from assignor.ranking import rank_clients
from assignor.target import Group

ACCEPTABLE_RECOVERY_LAG = 100


def _state(specs, clients, actives, standbys, keys=("rack",)):
    """``keys``: the location's keys, the rack or client tags (as ``rack_aware.optimize_standbys`` builds it)."""
    group = Group.of(specs, clients)
    ranking = rank_clients(specs, clients, ACCEPTABLE_RECOVERY_LAG)
    location = {c.id: tuple(c.rack if key == "rack" else c.tags[key] for key in keys) for c in clients}
    return group, ranking, rack_standby._Standbys(group, actives, standbys, location, ranking)


def _plain(group, task, client) -> bool:
    state = group.states[client]
    return (task not in state.lags and group.prev_active_owner.get(task) != client
            and client not in group.prev_standby_holders.get(task, ()))


def test_two_standbys_beside_their_actives_trade_racks():
    # | task | active (rack) | standby (rack) | plain |
    # | 0_0  | a (r1)        | b (r1)         | yes   |
    # | 0_1  | c (r2)        | d (r2)         | yes   |
    clients = [ClientState("a", rack="r1"), ClientState("b", rack="r1"),
               ClientState("c", rack="r2"), ClientState("d", rack="r2")]
    specs = [TaskSpec(TaskId(0, 0), True, 1000), TaskSpec(TaskId(0, 1), True, 1000)]
    actives = {TaskId(0, 0): "a", TaskId(0, 1): "c"}
    group, _, state = _state(specs, clients, actives, {TaskId(0, 0): ("b",), TaskId(0, 1): ("d",)})
    rack_standby._spread_plain_standbys(state, group)
    assert state.result({}) == {TaskId(0, 0): ("d",), TaskId(0, 1): ("b",)}
    assert sum(state.scores) == 0


def test_a_standby_on_a_client_with_state_stays():
    # as above, but b reports a lag on 0_0 (its standby is not plain there): nothing trades
    clients = [ClientState("a", rack="r1"), ClientState("b", rack="r1", lags={TaskId(0, 0): 5}),
               ClientState("c", rack="r2"), ClientState("d", rack="r2")]
    specs = [TaskSpec(TaskId(0, 0), True, 1000), TaskSpec(TaskId(0, 1), True, 1000)]
    actives = {TaskId(0, 0): "a", TaskId(0, 1): "c"}
    group, _, state = _state(specs, clients, actives, {TaskId(0, 0): ("b",), TaskId(0, 1): ("d",)})
    rack_standby._spread_plain_standbys(state, group)
    assert state.result({}) == {}


@st.composite
def dealt_groups(draw):
    """A group over 2-3 racks (and 2 zones, a client tag) whose clients hold some state, with its
    actives and one standby per stateful task dealt anywhere allowed (as a target's tie may deal
    them)."""
    names = [f"c{i}" for i in range(draw(st.integers(3, 8)))]
    racks = draw(st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=len(names), max_size=len(names)))
    zones = draw(st.lists(st.sampled_from(["z1", "z2"]), min_size=len(names), max_size=len(names)))
    specs = [TaskSpec(TaskId(s, p), True, 1000)
             for s in range(draw(st.integers(1, 3))) for p in range(draw(st.integers(1, 6)))]
    lags = {c: {} for c in names}
    for spec in specs:
        for client in draw(st.lists(st.sampled_from(names), max_size=2, unique=True)):
            lags[client][spec.id] = draw(st.integers(0, 2000))
    clients = [ClientState(c, rack=r, tags={"zone": z}, lags=lags[c]) for c, r, z in zip(names, racks, zones, strict=True)]
    actives, standbys = {}, {}
    for spec in specs:
        active, standby = draw(st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True))
        actives[spec.id], standbys[spec.id] = active, (standby,)
    return specs, clients, actives, standbys


@settings(max_examples=300, deadline=None)
@given(dealt_groups(), st.sampled_from([("rack",), ("rack", "zone")]))
def test_trades_keep_the_targets_cost_counts_and_restores_and_never_spread_worse(dealt, keys):
    specs, clients, actives, standbys = dealt
    group, ranking, state = _state(specs, clients, actives, standbys, keys)
    spread_before = sum(state.scores)
    rack_standby._spread_plain_standbys(state, group)
    after = {**standbys, **state.result({})}
    moved = {task for task in standbys if after[task] != standbys[task]}
    for task in moved:  # priced alike: plain where it was and where it is
        assert _plain(group, task, standbys[task][0]) and _plain(group, task, after[task][0])
    assert all(after[task][0] != actives[task] for task in after)

    def cells(placed):
        return Counter((task.subtopology, holders[0]) for task, holders in placed.items())

    def restoring(placed):
        return sum(not ranking.caught_up(task, holders[0]) for task, holders in placed.items())

    assert cells(after) == cells(standbys)
    assert restoring(after) == restoring(standbys)
    assert sum(state.scores) <= spread_before
    assert state.scores == [rack_standby._spread(state.weight, state.loc[state.active[t]],
                                                 [state.loc[c] for c in state.holders[t]])
                            for t in range(len(state.tasks))]
