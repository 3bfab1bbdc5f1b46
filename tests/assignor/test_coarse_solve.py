"""assignor.flow: a graph whose costs are priorities (``FlowGraph(priorities)``) is solved first
with the priorities priced lower; that flow is kept only when potentials certify it optimal for
the true costs. Either way the optimum is OR-Tools' on the true costs."""

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from assignor import flow
from assignor.flow import FlowGraph, certified, potentials
from assignor.target import PRIORITIES

UNIT = PRIORITIES[0][0]


def _build(node_count, arcs, supplies, priorities=()) -> FlowGraph:
    graph = FlowGraph(priorities)
    graph.nodes(node_count)
    for tail, head, capacity, cost in arcs:
        graph.arc(tail, head, capacity, cost)
    for node, amount in enumerate(supplies):
        if amount:
            graph.supply(node, amount)
    return graph


@st.composite
def priced_graphs(draw):
    """Tasks -> clients -> a sink, and chains between clients, each arc priced as the assignor
    prices: a priority (a multiple of the unit: floors, tiers) plus ties of a few units."""
    sources = draw(st.integers(1, 5))
    clients = draw(st.integers(1, 6))
    sink = sources + clients
    supplies = [draw(st.integers(1, 4)) for _ in range(sources)] + [0] * clients
    supplies.append(-sum(supplies))
    priority = st.sampled_from([0, 0, 10 * UNIT, 12 * UNIT, 15 * UNIT])
    tie = st.integers(-2, 13)
    arcs = [(source, sink, supplies[source], 400 * UNIT) for source in range(sources)]
    for source in range(sources):
        for client in draw(st.lists(st.integers(0, clients - 1), max_size=clients, unique=True)):
            arcs.append((source, sources + client, draw(st.integers(1, 4)), draw(priority) + draw(tie)))
    for client in range(clients):
        arcs.append((sources + client, sink, draw(st.integers(0, 3)), -draw(st.sampled_from([100, 400])) * UNIT))
        arcs.append((sources + client, sink, draw(st.integers(1, 9)), draw(tie)))
    for _ in range(draw(st.integers(0, 2 * clients))):
        tail, head = draw(st.integers(0, clients - 1)), draw(st.integers(0, clients - 1))
        if tail != head:
            arcs.append((sources + tail, sources + head, draw(st.integers(1, 3)), draw(priority) + draw(tie)))
    return sink + 1, arcs, supplies


@settings(max_examples=300, deadline=None)
@given(priced_graphs())
def test_the_coarse_solve_reaches_the_true_optimum(graph):
    node_count, arcs, supplies = graph
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
