"""KIP-925 rack awareness and KIP-708 tags through the assignors: tables, then invariants.

Cross-rack counts, caps and spreads are recomputed here from the inputs and outputs alone.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import assign, rack_standby
from assignor.balance import quotas
from assignor.convergence import settle
from assignor.lag import Lag
from assignor.model import LATEST, AssignmentConfig, ClientState, TaskId, TaskSpec, TopicPartition
from assignor.rack_aware import cross_rack_matrix, optimize_actives, optimize_standbys
from assignor.ranking import rank_clients
from assignor.target import CostModel, Group, active_target, standby_target
from tests.assignor.invariants import broken_rules
from tests.assignor.strategies import configs, groups

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRATEGIES = st.sampled_from(["min_traffic", "balance_subtopology"])


def _tp(topic: str, partition: int, *racks: str) -> TopicPartition:
    return TopicPartition(topic, partition, frozenset(racks))


def _cross(specs, clients, task: TaskId, client_id: str) -> int:
    rack = {c.id: c.rack for c in clients}[client_id]
    spec = next(s for s in specs if s.id == task)
    return sum(1 for tp in spec.partitions if rack not in tp.racks)


def _active_cross(specs, clients, actives) -> int:
    return sum(_cross(specs, clients, task, client) for task, client in actives.items())


# --- stand-down table (KIP-925 section 6) --------------------------------------------------

RACKED = [ClientState("a", rack="r1"), ClientState("b", rack="r2")]
SPLIT = [TaskSpec(TaskId(0, 0), False, partitions=(_tp("t", 0, "r1"),)),
         TaskSpec(TaskId(0, 1), False, partitions=(_tp("t", 1, "r2"),))]


@pytest.mark.parametrize(
    ("tasks", "clients", "strategy", "reason"),
    [
        pytest.param(SPLIT, RACKED, "none", "strategy is none", id="strategy-none"),
        pytest.param(SPLIT, [RACKED[0], ClientState("b")], "min_traffic", "client b has no rack",
                     id="client-without-rack"),
        pytest.param([SPLIT[0], TaskSpec(TaskId(0, 1), False, partitions=(_tp("t", 1),))], RACKED, "min_traffic",
                     "input partition t-1 of task 0_1 lists no racks", id="partition-without-racks"),
        pytest.param([TaskSpec(TaskId(0, 0), False, partitions=(_tp("t", 0, "r1", "r2"),))], RACKED,
                     "balance_subtopology", "no placement changes any cross-rack cost", id="replicated-everywhere"),
        pytest.param(SPLIT, [ClientState("a", rack="r3"), ClientState("b", rack="r3")], "min_traffic",
                     "no placement changes any cross-rack cost", id="no-client-rack-holds-replicas"),
    ],
)
def test_rack_awareness_stands_down_with_a_reason(tasks, clients, strategy, reason):
    result = assign(tasks, clients, AssignmentConfig(rack_aware_strategy=strategy))
    assert not result.rack_awareness.enabled
    assert result.rack_awareness.disabled_reason == reason


def test_rack_awareness_stands_down_beyond_max_racks_and_assigns_as_without_it():
    """One rack per client (host names given as racks) would make rack-aware work grow with
    tasks x clients: beyond ``MAX_RACKS`` racks the assignment is the one without racks."""
    from assignor.rack_aware import MAX_RACKS

    count = MAX_RACKS + 1
    clients = [ClientState(f"c{i:03d}", rack=f"host-{i:03d}") for i in range(count)]
    tasks = [TaskSpec(TaskId(0, p), False, partitions=(_tp("t", p, f"host-{p % count:03d}"),))
             for p in range(2 * count)]
    result = assign(tasks, clients, AssignmentConfig(rack_aware_strategy="min_traffic"))
    assert not result.rack_awareness.enabled
    assert result.rack_awareness.disabled_reason == f"{count} client racks, more than {MAX_RACKS}"
    without = assign(tasks, clients, AssignmentConfig())
    assert {c: a.active for c, a in result.clients.items()} == {c: a.active for c, a in without.clients.items()}
    at_bound = assign(tasks[:2 * MAX_RACKS], clients[:MAX_RACKS], AssignmentConfig(rack_aware_strategy="min_traffic"))
    assert at_bound.rack_awareness.enabled


def test_cross_rack_counts_every_input_partition_of_a_task():
    """KIP-925 getCost per (task, rack): a task reading several partitions, or none, beside
    the common one-partition tasks."""
    tasks = [TaskSpec(TaskId(0, 0), False, partitions=(_tp("t", 0, "r1"), _tp("u", 0, "r1", "r2"))),
             TaskSpec(TaskId(0, 1), False),
             TaskSpec(TaskId(0, 2), False, partitions=(_tp("t", 2, "r3"),))]
    clients = [ClientState("a", rack="r1"), ClientState("b", rack="r2"), ClientState("c", rack="r3")]
    group = Group.of(tasks, clients)
    cross = cross_rack_matrix(group, group.stateless, ["r1", "r2", "r3"])
    assert cross.tolist() == [[0, 1, 2], [0, 0, 0], [1, 1, 0]]


def test_report_counts_active_cross_rack_partitions_before_and_after():
    # The balanced target puts 0_0 on a and 0_1 on b; traffic wants them swapped.
    tasks = [TaskSpec(TaskId(0, 0), False, partitions=(_tp("t", 0, "r2"),)),
             TaskSpec(TaskId(0, 1), False, partitions=(_tp("t", 1, "r1"),))]
    result = assign(tasks, RACKED, AssignmentConfig(rack_aware_strategy="min_traffic"))
    report = result.rack_awareness
    assert (report.enabled, report.cross_rack_before, report.cross_rack_after) == (True, 2, 0)
    assert result.clients["a"].active == (TaskId(0, 1),)


@pytest.mark.parametrize("strategy", ["min_traffic", "balance_subtopology"])
def test_stateless_tasks_nobody_ran_are_packed_at_the_least_traffic(strategy):
    """An assignor audit's find (KIP-925 4.E): while a stateful active waits on c0 for its
    warm-up, the stateless tasks nobody ran are packed on the idle clients one at a time, in
    task order (``_pack_stateless_orphans``): 2_0, reading a partition only rack r3 holds, went
    to c2 in r2 and 1_1, reading nothing, to c1 in r3, and the result was final. Among the
    clients the packing chose, the least cross-rack traffic: 2_0 on c1."""
    tasks = [TaskSpec(TaskId(0, 1), True), TaskSpec(TaskId(1, 1), False),
             TaskSpec(TaskId(2, 0), False, partitions=(_tp("t2", 0, "r3"),)), TaskSpec(TaskId(2, 1), True)]
    clients = [ClientState("c0", rack="r1", lags=MappingProxyType({TaskId(0, 1): Lag.behind(5), TaskId(2, 1): LATEST})),
               ClientState("c1", rack="r3"),
               ClientState("c2", rack="r2", lags=MappingProxyType({TaskId(2, 1): Lag.behind(10_000_000)}))]
    config = AssignmentConfig(num_standby_replicas=3, rack_aware_strategy=strategy, rack_aware_non_overlap_cost=0)
    result = assign(tasks, clients, config)
    actives = {task: client for client, a in result.clients.items() for task in a.active}
    assert actives[TaskId(2, 0)] == "c1" and actives[TaskId(1, 1)] == "c2"
    assert _active_cross(tasks, clients, actives) == 0


def test_a_placement_that_settles_as_it_is_spreads_its_standbys_over_tags():
    """An assignor audit's find (KIP-708; 36 of 1,500 random tagged groups): the spread ran on the
    target, which moves 0_1 off a1 and 0_2 off b1; the placement keeps both on their caught-up
    owners, gives a2 and b2 the freed standby slots, and settles as balanced: 0_1's standby in
    its own cluster a, 0_2's in b, for good, while swapping the two spreads both at no cost
    (neither a2 nor b2 holds state)."""
    tasks = [TaskSpec(TaskId(0, p), True, 100_000) for p in range(3)]
    clients = [ClientState("a1", tags=MappingProxyType({"cluster": "a"}), prev_active=frozenset({TaskId(0, 1)}),
                           lags=MappingProxyType({TaskId(0, 1): LATEST})),
               ClientState("a2", 3, tags=MappingProxyType({"cluster": "a"})),
               ClientState("b1", tags=MappingProxyType({"cluster": "b"}), prev_active=frozenset({TaskId(0, 2)}),
                           lags=MappingProxyType({TaskId(0, 2): LATEST})),
               ClientState("b2", 3, tags=MappingProxyType({"cluster": "b"}))]
    result = assign(tasks, clients, AssignmentConfig(num_standby_replicas=1, rack_aware_assignment_tags=("cluster",)))
    assert not result.probing_rebalance_needed
    cluster = {c.id: c.tags["cluster"] for c in clients}
    for client, roles in result.clients.items():
        for task in roles.active:
            (holder,) = [c for c, r in result.clients.items() if task in r.standby]
            assert cluster[holder] != cluster[client], (task, client, holder)


def test_a_member_joining_a_spread_group_gets_the_standby_that_keeps_every_task_spread():
    """An assignor audit's find (KIP-708; 18% of its tagged join rounds settled with more
    standbys beside their actives than a fresh assignment): c0 (z2) runs 0_0 and stands by
    for 0_1, c1 (z1) the reverse; c2 (z1) joins and balance gives it one standby. The target
    gave it 0_1's, whose active c1 is in z1 too, and neither a swap (c1 runs 0_1) nor a move
    (c2 at its floor) could undo that; for good once caught up. Given 0_0's instead (the same
    one restoration on c2), both stay spread: ``rack_standby._find_refill``."""
    tasks = [TaskSpec(TaskId(0, p), True, 100_000) for p in range(2)]
    zone = {"c0": "z2", "c1": "z1", "c2": "z1"}
    clients = [ClientState("c0", tags=MappingProxyType({"zone": "z2"}), prev_active=frozenset({TaskId(0, 0)}),
                           prev_standby=frozenset({TaskId(0, 1)}), lags=MappingProxyType({TaskId(0, 0): LATEST, TaskId(0, 1): Lag.behind(0)})),
               ClientState("c1", tags=MappingProxyType({"zone": "z1"}), prev_active=frozenset({TaskId(0, 1)}),
                           prev_standby=frozenset({TaskId(0, 0)}), lags=MappingProxyType({TaskId(0, 1): LATEST, TaskId(0, 0): Lag.behind(0)})),
               ClientState("c2", tags=MappingProxyType({"zone": "z1"}))]
    config = AssignmentConfig(num_standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=1,
                              rack_aware_assignment_tags=("zone",))
    results, _ = settle(tasks, clients, config, max_rounds=10)
    result = results[-1]
    assert not result.probing_rebalance_needed
    active = {task: client for client, roles in result.clients.items() for task in roles.active}
    for client, roles in result.clients.items():
        for task in roles.standby:
            assert zone[client] != zone[active[task]], (task, client, active[task])


# --- standbys: spread first, then traffic (KIP-925 C, KIP-708) ------------------------------

def _standby_case(clients, specs, actives, standbys, **config):
    group = Group.of(specs, clients)
    return optimize_standbys(group, actives, standbys, AssignmentConfig(num_standby_replicas=1, **config))


def test_standby_leaves_the_active_rack_by_a_swap():
    # a, b in r1; c, d in r2. 0_0 active on a with its standby on b (same rack); 0_1 active on c,
    # standby on d (same rack). Swapping the standbys puts each in the other rack.
    clients = [ClientState("a", rack="r1"), ClientState("b", rack="r1"),
               ClientState("c", rack="r2"), ClientState("d", rack="r2")]
    specs = [TaskSpec(TaskId(0, p), True, 100, (_tp("t", p, "r1", "r2"),)) for p in range(2)]
    out = _standby_case(clients, specs, {TaskId(0, 0): "a", TaskId(0, 1): "c"},
                        {TaskId(0, 0): ("b",), TaskId(0, 1): ("d",)}, rack_aware_strategy="min_traffic")
    assert out == {TaskId(0, 0): ("d",), TaskId(0, 1): ("b",)}


def test_tags_spread_standbys_and_a_key_with_too_few_values_is_relaxed():
    # zone has 3 values, cluster only 1: standbys of 0_0 go to other zones; cluster cannot differ.
    clients = [ClientState(f"c{i}", tags=MappingProxyType({"zone": f"z{i % 3}", "cluster": "k"})) for i in range(6)]
    specs = [TaskSpec(TaskId(0, p), True, 100) for p in range(3)]
    actives = {TaskId(0, 0): "c0", TaskId(0, 1): "c1", TaskId(0, 2): "c2"}
    standbys = {TaskId(0, 0): ("c3", "c4"), TaskId(0, 1): ("c4", "c5"), TaskId(0, 2): ("c3", "c5")}
    group = Group.of(specs, clients)
    config = AssignmentConfig(num_standby_replicas=2, rack_aware_assignment_tags=("zone", "cluster"))
    out = optimize_standbys(group, actives, standbys, config)
    zone = {c.id: c.tags["zone"] for c in clients}
    for task, holders in out.items():
        assert len({zone[actives[task]], *(zone[h] for h in holders)}) == 3, (task, holders)
    assert Counter(h for hs in out.values() for h in hs) == Counter(h for hs in standbys.values() for h in hs)


def _zoned(client_id: str, zone: str, rack: str | None = None, **lags) -> ClientState:
    return ClientState(client_id, rack=rack, tags=MappingProxyType({"zone": zone}),
                       lags=MappingProxyType({TaskId.parse(t): Lag.behind(n) for t, n in lags.items()}))


def _moving_case(zones, actives, standbys, by, standby_replicas=1, lags=None):
    """Clients named by ``zones`` (client -> zone), located by tag ``zone`` or, with ``by`` =
    "rack", by a rack of that name under min_traffic (every partition in every rack: no traffic
    term). Task ids as strings; ``lags``: client -> {task: lag} (then with readiness)."""
    racks = by == "rack"
    clients = [_zoned(c, z, rack=z if racks else None, **(lags or {}).get(c, {})) for c, z in zones.items()]
    every_rack = sorted(set(zones.values()))
    specs = [TaskSpec(TaskId.parse(t), True, 100_000, (_tp("t", TaskId.parse(t).partition, *every_rack),))
             for t in actives]
    config = AssignmentConfig(num_standby_replicas=standby_replicas,
                              **({"rack_aware_strategy": "min_traffic"} if racks
                                 else {"rack_aware_assignment_tags": ("zone",)}))
    ranking = rank_clients(specs, clients, config.acceptable_recovery_lag) if lags else None
    out = optimize_standbys(Group.of(specs, clients), {TaskId.parse(t): c for t, c in actives.items()},
                            {TaskId.parse(t): tuple(h) for t, h in standbys.items()}, config, ranking)
    return {str(t): tuple(h) for t, h in out.items()}


# (zones, actives, standbys given, standbys expected, standby replicas, lags)
MOVES = [
    # KIP-708: the repro of the Kafka situation. b and c are alike but for the zone; no swap
    # partner exists, and c is free: the standby moves there.
    pytest.param({"a": "z1", "b": "z1", "c": "z2"}, {"0_0": "a"}, {"0_0": "b"}, {"0_0": ("c",)}, 1, None,
                 id="free-client-of-another-zone-takes-it"),
    # Two standbys over three zones: the one beside the active moves to the free third zone.
    pytest.param({"a": "z1", "b": "z1", "c": "z2", "d": "z3"}, {"0_0": "a"}, {"0_0": "bc"}, {"0_0": ("c", "d")},
                 2, None, id="second-standby-to-a-third-zone"),
    # The free client of z2 is the more caught up one, so a move restores no more: allowed.
    pytest.param({"a": "z1", "b": "z1", "c": "z2"}, {"0_0": "a"}, {"0_0": "b"}, {"0_0": ("c",)}, 1,
                 {"c": {"0_0": 0}}, id="to-a-caught-up-client"),
    # Windows: 3 tasks, 6 replicas over 4 clients (floor 1, ceiling 2). d, the only z2 client,
    # holds its active and 0_2's standby: at its ceiling. 0_0's standby on c stays in z1 (a swap
    # with 0_2 would put 0_2 beside its own active, as bad as it is good).
    pytest.param({"a": "z1", "b": "z1", "c": "z1", "d": "z2"}, {"0_0": "a", "0_1": "d", "0_2": "b"},
                 {"0_0": "c", "0_1": "c", "0_2": "d"}, {"0_0": ("c",), "0_1": ("c",), "0_2": ("d",)}, 1, None,
                 id="free-client-at-its-ceiling-takes-none"),
    # The standby is caught up where it is and c has no state: moving it would make it restore.
    pytest.param({"a": "z1", "b": "z1", "c": "z2"}, {"0_0": "a"}, {"0_0": "b"}, {"0_0": ("b",)}, 1,
                 {"a": {"0_0": 0}, "b": {"0_0": 0}}, id="never-to-restore-more"),
]


@pytest.mark.parametrize("by", ["tag", "rack"])
@pytest.mark.parametrize(("zones", "actives", "standbys", "expected", "replicas", "lags"), MOVES)
def test_spread_moves_a_standby_to_a_free_client_within_the_windows(zones, actives, standbys, expected, replicas,
                                                                      lags, by):
    """KIP-708 / KIP-925 C: a standby beside its active goes to a client of another location
    that has room in its window of stateful replicas, when no swap serves; never above that
    window's ceiling, below the leaving client's floor, or onto a client that must restore it
    where it was caught up."""
    assert _moving_case(zones, actives, standbys, by, replicas, lags) == expected


def _many_tags_case(keys: int):
    """Clients tagged with ``keys`` keys of 2 values each, one client per location, 2 standbys
    per task: 3 replicas over 2 values repeat one on every key, so no task's spread reaches 0
    and searches keep failing."""
    clients = [ClientState(f"c{i:02d}", tags=MappingProxyType({f"k{k}": f"v{(i >> k) & 1}" for k in range(keys)}))
               for i in range(2 ** keys)]
    specs = [TaskSpec(TaskId(0, p), True, 100) for p in range(len(clients))]
    actives = {spec.id: clients[p].id for p, spec in enumerate(specs)}
    standbys = {spec.id: tuple(sorted((clients[p ^ 1].id, clients[p ^ 2].id))) for p, spec in enumerate(specs)}
    config = AssignmentConfig(num_standby_replicas=2, rack_aware_assignment_tags=tuple(f"k{k}" for k in range(keys)))
    return Group.of(specs, clients), actives, standbys, config


def test_spread_searches_stop_at_their_budget(monkeypatch):
    """Spread searches are bounded per standby (SPREAD_BUDGET): with none left, no search runs
    and the standbys stay as given; with a little, the searches stop within it."""
    group, actives, standbys, config = _many_tags_case(keys=5)
    searches = []
    scan = rack_standby._members_to_scan
    monkeypatch.setattr(rack_standby, "_members_to_scan", lambda *args: searches.append(1) or scan(*args))
    monkeypatch.setattr(rack_standby, "SPREAD_BUDGET", 0)
    assert optimize_standbys(group, actives, standbys, config) == standbys
    assert searches == []
    monkeypatch.setattr(rack_standby, "SPREAD_BUDGET", 1)  # 64 units: two locations weighed
    bounded = optimize_standbys(group, actives, standbys, config)
    bounded_searches = len(searches)
    assert 0 < bounded_searches < 2 * len(group.clients)
    monkeypatch.setattr(rack_standby, "SPREAD_BUDGET", 10**6)
    searches.clear()
    unbounded = optimize_standbys(group, actives, standbys, config)
    assert len(searches) > 3 * bounded_searches
    for out in (bounded, unbounded):
        assert Counter(h for hs in out.values() for h in hs) == Counter(h for hs in standbys.values() for h in hs)
        assert all(actives[task] not in holders for task, holders in out.items())


def test_traffic_swap_between_racks():
    # Standbys are already in another rack than their actives; a swap puts each next to its input.
    clients = [ClientState("a", rack="r1"), ClientState("b", rack="r2"), ClientState("c", rack="r3"),
               ClientState("d", rack="r3")]
    specs = [TaskSpec(TaskId(0, 0), True, 100, (_tp("t", 0, "r1"),)),
             TaskSpec(TaskId(0, 1), True, 100, (_tp("t", 1, "r2"),))]
    out = _standby_case(clients, specs, {TaskId(0, 0): "c", TaskId(0, 1): "d"},
                        {TaskId(0, 0): ("b",), TaskId(0, 1): ("a",)}, rack_aware_strategy="min_traffic")
    assert out == {TaskId(0, 0): ("a",), TaskId(0, 1): ("b",)}


@pytest.mark.parametrize(("changelog", "swapped"), [
    pytest.param(50, True, id="changelog-within-acceptable-lag"),
    pytest.param(50_000, False, id="changelog-beyond-acceptable-lag"),
])
def test_traffic_swap_counts_clients_without_a_report_as_caught_up_on_a_small_changelog(changelog, swapped):
    # As test_traffic_swap_between_racks, but b and a report their standbys' state caught up.
    # A client with no state must restore the whole changelog: within acceptable_recovery_lag
    # (10,000) it is caught up too (docs/assignor.md, "Caught up"), so the swap restores no
    # more; beyond it, the swap would put both standbys on clients that must restore.
    latest = Lag.behind(0)
    clients = [ClientState("a", rack="r1", lags={TaskId(0, 1): latest}),
               ClientState("b", rack="r2", lags={TaskId(0, 0): latest}),
               ClientState("c", rack="r3"), ClientState("d", rack="r3")]
    specs = [TaskSpec(TaskId(0, 0), True, changelog, (_tp("t", 0, "r1"),)),
             TaskSpec(TaskId(0, 1), True, changelog, (_tp("t", 1, "r2"),))]
    config = AssignmentConfig(num_standby_replicas=1, rack_aware_strategy="min_traffic")
    ranking = rank_clients(specs, clients, config.acceptable_recovery_lag)
    standbys = {TaskId(0, 0): ("b",), TaskId(0, 1): ("a",)}
    out = optimize_standbys(Group.of(specs, clients), {TaskId(0, 0): "c", TaskId(0, 1): "d"}, standbys, config,
                            ranking)
    assert out == ({TaskId(0, 0): ("a",), TaskId(0, 1): ("b",)} if swapped else standbys)


# --- invariants on random groups --------------------------------------------------------------

@st.composite
def racked_groups(draw, max_clients: int = 20, max_tasks: int = 150):
    """A random group of ``strategies.groups`` given racks on clients and on input partitions."""
    specs, clients = draw(groups(max_clients=max_clients, max_tasks=max_tasks))
    rack_count = draw(st.integers(2, 4))
    racks = [f"r{i}" for i in range(rack_count)]
    rng = draw(st.randoms(use_true_random=False))
    specs = [replace(s, partitions=tuple(_tp(f"in{s.id.subtopology}-{k}", s.id.partition,
                                            *rng.sample(racks, rng.randint(1, rack_count - 1)))
                                        for k in range(rng.randint(1, 2)))) for s in specs]
    clients = [replace(c, rack=rng.choice(racks)) for c in clients]
    return specs, clients


def _target(specs, clients, config):
    group = Group.of(specs, clients)
    ranking = rank_clients(specs, clients, config.acceptable_recovery_lag)
    costs = CostModel(lag_aware=config.assignor == "high_availability")
    return group, ranking, costs, active_target(group, ranking, costs)


@SETTINGS
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES)
def test_high_availability_rules_hold_with_rack_awareness(group, config, strategy):
    tasks, clients = group
    config = replace(config, rack_aware_strategy=strategy)
    assert broken_rules(tasks, clients, config, assign(tasks, clients, config)) == []


@SETTINGS
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES)
def test_never_more_cross_rack_traffic_than_none_and_counts_kept(group, config, strategy):
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy)
    graph, _, _, target = _target(specs, clients, config)
    optimized, report = optimize_actives(graph, target, config)
    assert set(optimized) == set(target)
    assert _active_cross(specs, clients, optimized) <= _active_cross(specs, clients, target)
    stateful = {s.id for s in specs if s.stateful}
    for kind in (stateful, {s.id for s in specs} - stateful):
        assert (Counter(c for t, c in optimized.items() if t in kind)
                == Counter(c for t, c in target.items() if t in kind))
    if report.enabled:
        assert report.cross_rack_after == _active_cross(specs, clients, optimized)
        assert report.cross_rack_before == _active_cross(specs, clients, target)


@SETTINGS
@given(group=racked_groups(), config=configs())
def test_balance_subtopology_caps_hold(group, config):
    specs, clients = group
    config = replace(config, rack_aware_strategy="balance_subtopology")
    graph, _, _, target = _target(specs, clients, config)
    optimized, report = optimize_actives(graph, target, config)
    if not report.enabled:
        return
    stateful = {s.id: s.stateful for s in specs}
    for kind in (True, False):
        tasks = [t for t in optimized if stateful[t] == kind]
        slots = Counter(optimized[t] for t in tasks)
        sizes = Counter(t.subtopology for t in tasks)
        held = Counter((t.subtopology, optimized[t]) for t in tasks)
        for (subtopology, client), count in held.items():
            assert count <= math.ceil(sizes[subtopology] * slots[client] / len(tasks))


@SETTINGS
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES, data=st.data())
def test_one_partition_changing_racks_moves_few_tasks(group, config, strategy, data):
    """KIP-925 4.B.III: the non-overlap cost keeps the rest of the assignment in place.

    As in a running group, the previous (rack-optimised) assignment is the next balanced
    target. A changed price of one task changes the optimum by one alternating cycle through
    it (any other difference would be a tie, and ties go to the target): at most one move per
    rack, plus the changed task.
    """
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy)
    graph, _, _, target = _target(specs, clients, config)
    before, report = optimize_actives(graph, target, config)
    if not report.enabled:
        return
    index = data.draw(st.integers(0, len(specs) - 1))
    racks = sorted({c.rack for c in clients})
    new_racks = data.draw(st.sets(st.sampled_from(racks), min_size=1))
    spec = specs[index]
    changed = replace(spec, partitions=(replace(spec.partitions[0], racks=frozenset(new_racks)),
                                        *spec.partitions[1:]))
    specs2 = [*specs[:index], changed, *specs[index + 1:]]
    after, _ = optimize_actives(Group.of(specs2, clients), before, config)
    moved = sum(1 for t in before if before[t] != after[t])
    assert moved <= len(racks) + 1, (moved, len(specs))


@SETTINGS
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES)
def test_rack_steps_are_idempotent(group, config, strategy):
    """Fed their own output as the target, both steps return it unchanged (convergence)."""
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy, num_standby_replicas=max(1, config.num_standby_replicas))
    graph, ranking, costs, target = _target(specs, clients, config)
    actives, _ = optimize_actives(graph, target, config)
    assert optimize_actives(graph, actives, config)[0] == actives
    standbys = optimize_standbys(graph, actives, standby_target(graph, ranking, costs, actives,
                                                                config.num_standby_replicas), config)
    assert optimize_standbys(graph, actives, standbys, config) == standbys


def _spread(holders, active, location) -> tuple[int, int]:
    """(standbys sharing the active's location, repeated locations among all replicas)."""
    locations = [location[c] for c in holders]
    return sum(1 for x in locations if x == location[active]), len(holders) + 1 - len({location[active], *locations})


def _windows(graph, actives, config) -> dict[str, tuple[int, int]]:
    """Per client, the (floor, ceiling) of standbys that keep stateful replicas within their
    thread share (scenario.md "Stateful balance"), recomputed from ``balance.quotas``."""
    per_task = graph.standby_count(config.num_standby_replicas)
    stateful = graph.stateful
    shares = quotas(len(stateful) * (1 + per_task), graph.threads, limit=len(stateful))
    running = Counter(actives[t] for t in stateful)
    return {c: (max(0, shares[c].floor - running[c]), max(0, shares[c].floor - running[c],
                                                            shares[c].ceiling - running[c])) for c in graph.clients}


@SETTINGS
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES)
def test_standby_spread_keeps_clients_within_their_windows_and_never_worsens_spread(group, config, strategy):
    """Swaps keep every client's standby count; moves change it only within the client's window."""
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy, num_standby_replicas=max(1, config.num_standby_replicas))
    graph, ranking, costs, target = _target(specs, clients, config)
    actives, _ = optimize_actives(graph, target, config)
    planned = standby_target(graph, ranking, costs, actives, config.num_standby_replicas)
    out = optimize_standbys(graph, actives, planned, config)
    before = Counter(c for hs in planned.values() for c in hs)
    after = Counter(c for hs in out.values() for c in hs)
    windows = _windows(graph, actives, config)
    for client in graph.clients:
        floor, ceiling = windows[client]
        assert after[client] == before[client] or floor <= after[client] <= ceiling, (client, windows[client])
    rack = {c.id: c.rack for c in clients}
    same_before = same_after = 0
    for task, holders in out.items():
        assert len(set(holders)) == len(holders) == len(planned[task])
        assert actives[task] not in holders
        same_before += _spread(planned[task], actives[task], rack)[0]
        same_after += _spread(holders, actives[task], rack)[0]
    assert same_after <= same_before


def _score(holders, active, locations, weight) -> int:
    """The spread measure of docs/rack-awareness.md, per location key: ``weight`` per standby
    sharing the active's value, one per further repeated value."""
    score = 0
    for key in range(len(locations[active])):
        seen = [locations[h][key] for h in holders]
        value = locations[active][key]
        score += weight * seen.count(value) + len(seen) + 1 - len({value, *seen})
    return score


@SETTINGS
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES, tagged=st.booleans())
def test_no_allowed_move_would_improve_a_spread(group, config, strategy, tagged):
    """After the passes, no single move of a standby to a client with room in its window, off
    a client above its floor, to a client that may take it and restores it only if it did
    before, lowers its task's spread (what the spread pass looks for, found exhaustively)."""
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy, num_standby_replicas=max(1, config.num_standby_replicas))
    if tagged:
        clients = [replace(c, tags=MappingProxyType({"zone": c.rack, "host": f"h{i % 3}"}))
                   for i, c in enumerate(clients)]
        config = replace(config, rack_aware_assignment_tags=("zone", "host"))
    graph, ranking, costs, target = _target(specs, clients, config)
    actives, _ = optimize_actives(graph, target, config, ranking)
    out = optimize_standbys(graph, actives, standby_target(graph, ranking, costs, actives,
                                                            config.num_standby_replicas), config, ranking)
    locations = {c.id: (c.tags["zone"], c.tags["host"]) if tagged else (c.rack,) for c in clients}
    windows = _windows(graph, actives, config)
    held = Counter(c for hs in out.values() for c in hs)
    weight = max((len(hs) for hs in out.values()), default=0) + 1
    for task, holders in out.items():
        if not holders:
            continue
        current = _score(holders, actives[task], locations, weight)
        for leaving in holders:
            if held[leaving] <= windows[leaving][0]:
                continue
            for there in graph.clients:
                if (there == actives[task] or there in holders or held[there] >= windows[there][1]
                        or ranking.caught_up(task, leaving) and not ranking.caught_up(task, there)):
                    continue
                moved = [there if h == leaving else h for h in holders]
                assert _score(moved, actives[task], locations, weight) >= current, (task, leaving, there)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=racked_groups(), config=configs(), strategy=STRATEGIES, tagged=st.booleans())
def test_narrowed_standby_searches_find_what_full_scans_find(group, config, strategy, tagged):
    """The traffic pass's readiness shortlist and the spread search's loss index skip only
    partners that the rules refuse, and a failed spread search is skipped only while nothing
    it reads has changed: the standbys come out as with every partner checked every time."""
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy, num_standby_replicas=max(1, config.num_standby_replicas))
    if tagged:  # two location keys (KIP-708)
        clients = [replace(c, tags=MappingProxyType({"zone": c.rack, "host": f"h{i % 3}"}))
                   for i, c in enumerate(clients)]
        config = replace(config, rack_aware_assignment_tags=("zone", "host"))
    graph, ranking, costs, target = _target(specs, clients, config)
    actives, _ = optimize_actives(graph, target, config, ranking)
    planned = standby_target(graph, ranking, costs, actives, config.num_standby_replicas)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rack_standby, "LOSS_INDEX_AFTER", 0)  # the index from the first search on
        narrowed = optimize_standbys(graph, actives, planned, config, ranking)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rack_standby, "_ReadyPartners", lambda *args: None)
        patch.setattr(rack_standby._Losses, "below", lambda *args: None)
        patch.setattr(rack_standby, "REMEMBER_FAILED", False)
        assert optimize_standbys(graph, actives, planned, config, ranking) == narrowed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=racked_groups(), config=st.sampled_from(["high_availability", "sticky"]).flatmap(configs),
       strategy=STRATEGIES)
def test_the_anchor_return_search_meets_only_partners_its_checks_accept(group, config, strategy):
    """With several standbys per task, the pairs whose spread, readiness or clients the checks
    refuse reached them one by one (100 clients x 20,000 tasks, 2 standbys: 1.8M checks for
    721 swaps, most of the search budget). Each client pair's partners are now filed by what
    the checks ask of them, so every check the search makes takes its swap."""
    specs, clients = group
    config = replace(config, rack_aware_strategy=strategy, num_standby_replicas=2)
    graph, ranking, costs, target = _target(specs, clients, config)
    actives, _ = optimize_actives(graph, target, config, ranking)
    planned = standby_target(graph, ranking, costs, actives, config.num_standby_replicas)
    searching, checks = [], []
    search, check = rack_standby._AnchorReturns._swap, rack_standby._traffic_swap_ok

    def counted_search(self, *args):
        searching.append(True)
        try:
            return search(self, *args)
        finally:
            searching.pop()

    def counted_check(*args):
        accepted = check(*args)
        if searching:
            checks.append(accepted)
        return accepted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rack_standby._AnchorReturns, "_swap", counted_search)
        patch.setattr(rack_standby, "_traffic_swap_ok", counted_check)
        optimize_standbys(graph, actives, planned, config, ranking)
    assert all(checks)


@SETTINGS
@given(group=racked_groups(max_clients=12, max_tasks=80), config=configs(), strategy=STRATEGIES,
       seed=st.integers(0, 2**32))
def test_same_output_for_any_input_order(group, config, strategy, seed):
    tasks, clients = group
    config = replace(config, rack_aware_strategy=strategy)
    rng = random.Random(seed)
    shuffled_tasks, shuffled_clients = list(tasks), list(clients)
    rng.shuffle(shuffled_tasks)
    rng.shuffle(shuffled_clients)
    assert assign(shuffled_tasks, shuffled_clients, config) == assign(tasks, clients, config)


@SETTINGS
@given(group=racked_groups(max_clients=12, max_tasks=80), config=configs(), strategy=STRATEGIES)
def test_settles_then_returns_its_input_unchanged(group, config, strategy):
    """Re-run with every assigned replica caught up: probing stops, then nothing moves."""
    tasks, clients = group
    config = replace(config, rack_aware_strategy=strategy)
    results, settled_clients = settle(tasks, clients, config, max_rounds=60)
    assert not results[-1].probing_rebalance_needed
    again = assign(tasks, settled_clients, config)
    assert again.clients == results[-1].clients
    assert not again.probing_rebalance_needed


def _many_zones_case():
    """48 clients, each a rack of its own (and a location of its own: three tag keys of 4
    values), one standby per task, every task's input in two other racks: every client is a
    zone of the traffic pass, and there are 48 x 47 ordered pairs of zones to pair."""
    clients = [ClientState(f"c{i:02d}", rack=f"r{i}", tags=MappingProxyType({f"k{k}": f"v{(i >> (2 * k)) & 3}"
                                                                              for k in range(3)}))
               for i in range(48)]
    specs = [TaskSpec(TaskId(0, p), True, 100, (_tp("t", p, f"r{(p + 7) % 48}", f"r{(p + 19) % 48}"),))
             for p in range(96)]
    actives = {spec.id: clients[p % 48].id for p, spec in enumerate(specs)}
    standbys = {spec.id: (clients[(p + 1) % 48].id,) for p, spec in enumerate(specs)}
    config = AssignmentConfig(num_standby_replicas=1, rack_aware_strategy="min_traffic",
                              rack_aware_assignment_tags=("k0", "k1", "k2"))
    return Group.of(specs, clients), actives, standbys, config


def test_the_traffic_pass_s_pairings_are_charged_to_the_search_budget(monkeypatch):
    """The traffic pass pairs every ordered pair of (rack, location) zones. With client tags of
    many values nearly every client is a zone of its own, and those pairings were not counted:
    50,000 tasks on 5,000 clients (64 racks, 3 standbys, 5 tag keys) ran past 15 minutes. Each
    pairing now costs PAIRING_COST plus its zone's slots of the search budget, and the pass
    stops when it is spent (the standbys stay as the last swap left them)."""
    group, actives, standbys, config = _many_zones_case()
    pairings = []
    movable = rack_standby._ZoneDeltas.movable
    monkeypatch.setattr(rack_standby._ZoneDeltas, "movable",
                        lambda self, *args: pairings.append(len(self.tasks)) or movable(self, *args))
    unbounded = optimize_standbys(group, actives, standbys, config)
    full = len(pairings)
    assert full > 1_000  # the pass meets many pairs of zones here
    pairings.clear()
    budget = 40 * (rack_standby.PAIRING_COST + 2)
    monkeypatch.setattr(rack_standby, "SEARCH_BUDGET", budget)
    bounded = optimize_standbys(group, actives, standbys, config)
    assert pairings and sum(rack_standby.PAIRING_COST + slots for slots in pairings) <= budget
    for out in (bounded, unbounded):
        assert Counter(h for hs in out.values() for h in hs) == Counter(h for hs in standbys.values() for h in hs)
        assert all(actives[task] not in holders for task, holders in out.items())
