"""assignor.flow: a graph whose costs are priorities (``FlowGraph(priorities)``) is solved first
with the priorities priced lower, on a reduced graph (floors as lower bounds, no last-resort
arcs, stays merged); that flow is kept only when potentials certify it optimal for the true
costs. Either way the optimum is OR-Tools' on the true costs."""

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from assignor import flow
from assignor.convergence import settle
from assignor.flow import FlowGraph, certified, potentials
from assignor.target import PRIORITIES
from tests.assignor.test_convergence import _random_group, _scaling_event

UNIT = PRIORITIES[0][0]


FLOOR_REWARDS = (-100 * UNIT, -400 * UNIT)
LAST_RESORT = 400 * UNIT


def _build(node_count, arcs, supplies, priorities=(), kinds=False, stays=()) -> FlowGraph:
    """``kinds``: arcs priced as floors or last resorts are added as such (``FlowGraph.floor``,
    ``FlowGraph.last_resort``), as the target's balance windows add them, and the arcs at the
    positions ``stays`` are marked as stays (``FlowGraph.stay``), as task classes mark theirs."""
    graph = FlowGraph(priorities)
    graph.nodes(node_count)
    if kinds:
        graph.stay(lambda: stays)
    for tail, head, capacity, cost in arcs:
        if kinds and cost in FLOOR_REWARDS:
            graph.floor(tail, head, capacity, cost)
        elif kinds and cost == LAST_RESORT:
            graph.last_resort(tail, head, capacity, cost)
        else:
            graph.arc(tail, head, capacity, cost)
    for node, amount in enumerate(supplies):
        if amount:
            graph.supply(node, amount)
    return graph


@st.composite
def priced_graphs(draw, reaching: bool = False):
    """Tasks -> clients -> a sink, and chains between clients, each arc priced as the assignor
    prices: a priority (a multiple of the unit: floors, tiers) plus ties of a few units.
    ``reaching``: every task reaches every client and the floors ask for at most the supply
    (as in the assignor's windows, which the hubs connect to every task), so that mostly every
    floor can be filled; and some tasks have a stay, a free arc able to carry all their units
    to a client (their previous owner). Returns (nodes, arcs, supplies, positions of the stays)."""
    sources = draw(st.integers(1, 5))
    clients = draw(st.integers(1, 6))
    sink = sources + clients
    supplies = [draw(st.integers(1, 4)) for _ in range(sources)] + [0] * clients
    supplies.append(-sum(supplies))
    priority = st.sampled_from([0, 0, 10 * UNIT, 12 * UNIT, 15 * UNIT])
    tie = st.integers(-2, 13)
    arcs = [(source, sink, supplies[source], LAST_RESORT) for source in range(sources)]
    stays = []
    for source in range(sources):
        if reaching and draw(st.booleans()):
            stays.append(len(arcs))
            arcs.append((source, sources + draw(st.integers(0, clients - 1)), supplies[source], 0))
        reached = range(clients) if reaching else draw(st.lists(st.integers(0, clients - 1), max_size=clients,
                                                                  unique=True))
        for client in reached:
            arcs.append((source, sources + client, draw(st.integers(1, 4)), draw(priority) + draw(tie)))
    floor_left = -supplies[-1] if reaching else 3 * clients
    for client in range(clients):
        floor = draw(st.integers(0, min(3, floor_left)))
        floor_left -= floor
        arcs.append((sources + client, sink, floor, draw(st.sampled_from(FLOOR_REWARDS))))
        arcs.append((sources + client, sink, draw(st.integers(1, 9)), draw(tie)))
    for _ in range(draw(st.integers(0, 2 * clients))):
        tail, head = draw(st.integers(0, clients - 1)), draw(st.integers(0, clients - 1))
        if tail != head:
            arcs.append((sources + tail, sources + head, draw(st.integers(1, 3)), draw(priority) + draw(tie)))
    return sink + 1, arcs, supplies, stays


@settings(max_examples=300, deadline=None)
@given(priced_graphs())
def test_the_coarse_solve_reaches_the_true_optimum(graph):
    node_count, arcs, supplies, _ = graph
    kept = []
    real_certified = flow.certified

    def recording(*args):
        kept.append(real_certified(*args))
        return kept[-1]

    flow.certified = recording
    try:
        coarse = _build(node_count, arcs, supplies, PRIORITIES)
        cost = coarse.solve()
    finally:
        flow.certified = real_certified
    event("coarse flow certified" if kept == [True] else "solved again")
    exact = _build(node_count, arcs, supplies)
    assert cost == exact.solve()
    flows = np.array([coarse.flow(arc) for arc in range(len(arcs))])
    assert cost == int(np.dot(flows, [cost for *_, cost in arcs]))


@settings(max_examples=300, deadline=None)
@given(st.one_of(priced_graphs(), priced_graphs(reaching=True)))
def test_the_reduced_graph_reaches_the_true_optimum(graph):
    """The coarse solve with floors sent first, last resorts left out and stays merged: the
    same optimum as the whole graph solved at its true costs, whether the reduced graph has a
    flow that decodes (kept when certified) or not (the whole graph solved)."""
    node_count, arcs, supplies, stays = graph
    graph = _build(node_count, arcs, supplies, PRIORITIES, kinds=True, stays=stays)
    arrays = graph._arrays()
    reduced = graph._reduced_flow(arrays, flow._coarse(arrays.costs, PRIORITIES))
    event(("reduced flow" if reduced is not None else "solved whole") + (", with stays" if stays else ""))
    cost = graph.solve()
    assert cost == _build(node_count, arcs, supplies).solve()
    flows = np.array([graph.flow(arc) for arc in range(len(arcs))])
    assert cost == int(np.dot(flows, [cost for *_, cost in arcs]))


def test_floors_are_sent_first_and_last_resorts_left_out():
    """Two clients, each with a floor of one; the source's last resort straight to the sink.
    The reduced graph fills both floors and leaves the last resort empty; with a floor no flow
    can fill (three units of floor for two units), it finds no flow and the whole graph
    decides, at the same optimum as without kinds."""
    source, first, second, sink = range(4)
    arcs = [(source, sink, 2, LAST_RESORT), (source, first, 1, 12), (source, second, 1, 3),
            (first, sink, 1, FLOOR_REWARDS[0]), (second, sink, 1, FLOOR_REWARDS[1])]
    graph = _build(4, arcs, [2, 0, 0, -2], PRIORITIES, kinds=True)
    arrays = graph._arrays()
    reduced = graph._reduced_flow(arrays, flow._coarse(arrays.costs, PRIORITIES))
    assert reduced.tolist() == [0, 1, 1, 1, 1]
    assert graph.solve() == 12 + 3 + sum(FLOOR_REWARDS)
    arcs[3] = (first, sink, 3, FLOOR_REWARDS[0])
    graph = _build(4, arcs, [2, 0, 0, -2], PRIORITIES, kinds=True)
    arrays = graph._arrays()
    assert graph._reduced_flow(arrays, flow._coarse(arrays.costs, PRIORITIES)) is None
    assert graph.solve() == _build(4, arcs, [2, 0, 0, -2]).solve()


@pytest.mark.parametrize("owner_room", [1, 0])
def test_a_stay_merges_its_class_into_the_owner_and_decodes_back(owner_room):
    """Task t's class (supply 1) stays free on its owner o, or moves to its standby h or the hub
    at 10; task y (its owner gone) moves to o at 10 or goes to the hub at 1,000. With room for
    one on o, y takes o and t moves on (20): the merged graph's flow decodes, t's stay empty.
    With no room on o, the merged graph would pass y through o to h and t to the hub (30),
    two units out of a class of one: it does not decode, and the whole graph finds the true
    optimum, y to the hub (1,010)."""
    t_class, y_class, owner, holder, hub, spare, sink = range(7)
    arcs = [(t_class, owner, 1, 0), (t_class, holder, 1, 10), (t_class, hub, 1, 10),
            (y_class, owner, 1, 10), (y_class, hub, 1, 1_000),
            (owner, sink, owner_room, 0), (holder, sink, 1, 0), (hub, spare, 2, 0), (spare, sink, 2, 0)]
    supplies = [1, 1, 0, 0, 0, 0, -2]
    graph = _build(7, arcs, supplies, PRIORITIES, kinds=True, stays=[0])
    arrays = graph._arrays()
    reduced = graph._reduced_flow(arrays, flow._coarse(arrays.costs, PRIORITIES))
    if owner_room:
        assert reduced is not None and reduced[0] == 0 and reduced[3] == 1
        assert graph.solve() == 20
    else:
        assert reduced is None
        assert graph.solve() == 1_010 == _build(7, arcs, supplies).solve()


def test_ties_the_coarse_prices_overweigh_are_solved_again():
    """One unit from s to t: directly, one tier (a priority unit), or along 80 arcs of a tie of
    13 each (1,040). Priced 1,000 times lower, the tier costs 1,000 and wins; the true optimum
    is the long way, and the certificate sends the graph back to the solver."""
    hops = 80
    arcs = [(0, hops, 1, UNIT)] + [(node, node + 1, 1, 13) for node in range(hops)]
    supplies = [1] + [0] * (hops - 1) + [-1]
    graph = _build(hops + 1, arcs, supplies, PRIORITIES)
    assert graph.solve() == hops * 13
    assert graph.flow(0) == 0
    coarse_flows = np.array([1] + [0] * hops)  # what the coarse prices make optimal
    tails, heads, capacities, costs = (np.array(column) for column in zip(*arcs, strict=True))
    assert not certified(hops + 1, tails, heads, capacities, costs, coarse_flows)
    assert certified(hops + 1, tails, heads, capacities, costs, np.array([0] + [1] * hops))


@st.composite
def arc_lists(draw):
    nodes = draw(st.integers(1, 8))
    arcs = draw(st.lists(st.tuples(st.integers(0, nodes - 1), st.integers(0, nodes - 1), st.integers(-20, 30)),
                         max_size=30))
    tails, heads, costs = (np.array(column, dtype=np.int64) for column in zip(*arcs, strict=True)) if arcs else \
        (np.zeros(0, dtype=np.int64),) * 3
    return nodes, tails, heads, costs


def _has_negative_cycle(nodes, tails, heads, costs) -> bool:
    distance = np.zeros(nodes, dtype=np.int64)
    for _ in range(nodes + 1):
        lowered = False
        for tail, head, cost in zip(tails, heads, costs, strict=True):
            if distance[tail] + cost < distance[head]:
                distance[head] = distance[tail] + cost
                lowered = True
        if not lowered:
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(arc_lists())
def test_potentials_exist_exactly_without_a_negative_cycle(graph):
    nodes, tails, heads, costs = graph
    found = potentials(nodes, tails, heads, costs)
    if _has_negative_cycle(nodes, tails, heads, costs):
        event("negative cycle")
        assert found is None
    else:
        event("potentials")
        assert found is not None
        assert (costs + found[tails] - found[heads] >= 0).all()


@pytest.mark.parametrize("varied", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_merged_classes_always_decode(seed, varied, monkeypatch):
    """The classes the target merges into their anchors (``_TaskClasses._stays``) are those no
    optimal flow borrows arcs from: on the convergence test's seeded groups and scaling events
    (free standby arcs: 58 flows of these 30 seeds did not decode when every caught-up class
    was merged), and with ``varied`` changelog sizes on both sides of
    ``acceptable_recovery_lag`` (hub prices that differ), every reduced graph with stays that
    has a flow decodes, from the fresh group to settling after the event."""
    rng = random.Random(seed)
    tasks, clients, config = _random_group(rng)
    acceptable = config.acceptable_recovery_lag
    if varied:
        tasks = [replace(task, changelog_offsets=rng.choice([0, acceptable // 2, acceptable, 20 * acceptable]))
                 if task.stateful else task for task in tasks]
    solved, undecoded = [], []
    real_solved, real_reduced = flow._solved, FlowGraph._reduced_flow

    def recording_solved(*args):
        solved.append(real_solved(*args))
        return solved[-1]

    def recording_reduced(graph, arcs, costs):
        solved.clear()
        found = real_reduced(graph, arcs, costs)
        if any(arcs() for arcs in graph._stays) and solved and solved[-1] is not None and found is None:
            undecoded.append(graph._node_count)
        return found

    monkeypatch.setattr(flow, "_solved", recording_solved)
    monkeypatch.setattr(FlowGraph, "_reduced_flow", recording_reduced)
    _, clients = settle(tasks, clients, config, max_rounds=200)
    _, clients = _scaling_event(rng, clients, 0)
    settle(tasks, clients, config, max_rounds=200)
    assert undecoded == []


def test_a_negative_cycle_is_seen_before_the_budget_runs_out(monkeypatch):
    """A start that admits a negative cycle (here: a ring of 200 nodes costing -1 in all) is
    given up when the arcs that lowered the distances close a cycle (``flow._parents_cycle``),
    not only when the certificate's budget is spent."""
    ring = np.arange(200, dtype=np.int64)
    tails, heads = ring, (ring + 1) % 200
    costs = np.zeros(200, dtype=np.int64)
    costs[0] = -1
    seen = []
    real = flow._parents_cycle

    def recording(parent):
        seen.append(real(parent))
        return seen[-1]

    monkeypatch.setattr(flow, "_parents_cycle", recording)
    assert potentials(200, tails, heads, costs) is None
    assert seen and seen[-1]
