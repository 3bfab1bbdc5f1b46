"""assignor.warm_start: completing a partial flow must reach the optimum OR-Tools finds from
scratch, or give up (None); never a worse or an infeasible flow."""

import subprocess
import sys

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st
from ortools.graph.python import min_cost_flow

from assignor import warm_start


def _optimal_cost(node_count, tails, heads, capacities, costs, supplies) -> int:
    solver = min_cost_flow.SimpleMinCostFlow()
    solver.add_arcs_with_capacity_and_unit_cost(tails.astype(np.int32), heads.astype(np.int32), capacities, costs)
    solver.set_nodes_supplies(np.arange(node_count, dtype=np.int32), supplies)
    assert solver.solve() == solver.OPTIMAL
    return int(solver.optimal_cost())


@st.composite
def graphs_with_a_start(draw):
    """Tasks' sources -> clients -> a sink (the assignor's active flow, small), with chains
    between clients (a task handed on), a costly way out for every source (always feasible),
    and a start that keeps some units where they were."""
    sources = draw(st.integers(1, 5))
    clients = draw(st.integers(1, 6))
    sink = sources + clients
    supplies = np.zeros(sink + 1, dtype=np.int64)
    supplies[:sources] = draw(st.lists(st.integers(1, 4), min_size=sources, max_size=sources))
    supplies[sink] = -supplies[:sources].sum()
    arcs = []
    for source in range(sources):
        arcs.append((source, sink, int(supplies[source]), 1_000))
        for client in draw(st.lists(st.integers(0, clients - 1), max_size=clients, unique=True)):
            arcs.append((source, sources + client, draw(st.integers(1, 4)), draw(st.integers(-20, 20))))
    for client in range(clients):
        for _ in range(draw(st.integers(1, 3))):  # balance tiers, cheapest first
            arcs.append((sources + client, sink, draw(st.integers(1, 3)), draw(st.integers(-10, 30))))
    for _ in range(draw(st.integers(0, clients))):
        tail, head = draw(st.integers(0, clients - 1)), draw(st.integers(0, clients - 1))
        if tail != head:
            arcs.append((sources + tail, sources + head, draw(st.integers(1, 3)), draw(st.integers(0, 15))))
    tails, heads, capacities, costs = (np.array(column, dtype=np.int64) for column in zip(*arcs, strict=True))
    first_hops = [index for index, (tail, head, _, _) in enumerate(arcs) if tail < sources and head != sink]
    start_arcs = np.array(draw(st.lists(st.sampled_from(first_hops), max_size=6)) if first_hops else [],
                          dtype=np.int64)
    start_units = np.ones(len(start_arcs), dtype=np.int64)
    into_sink = [index for index, (tail, head, _, _) in enumerate(arcs) if tail >= sources and head == sink]
    held = np.array(draw(st.lists(st.sampled_from(into_sink), unique=True)) if into_sink else [], dtype=np.int64)
    return sink + 1, tails, heads, capacities, costs, supplies, start_arcs, start_units, held


@settings(max_examples=400, deadline=None)
@given(graphs_with_a_start())
def test_a_completed_flow_is_feasible_and_optimal(graph):
    """Whatever arcs the start may not pass its units over (``held``: the windows above the
    floors, in the assignor), a completed flow is an optimum."""
    node_count, tails, heads, capacities, costs, supplies, start_arcs, start_units, held = graph
    flows = warm_start.complete(node_count, tails, heads, capacities, costs, supplies, start_arcs, start_units,
                                held)
    if flows is None:
        event("gave up")
        return
    event("completed" + (" with held arcs" if len(held) else ""))
    assert ((flows >= 0) & (flows <= capacities)).all()
    balance = np.zeros(node_count, dtype=np.int64)
    np.add.at(balance, tails, flows)
    np.add.at(balance, heads, -flows)
    assert (balance == supplies).all()
    assert int(np.dot(flows, costs)) == _optimal_cost(node_count, tails, heads, capacities, costs, supplies)


def test_an_orphan_takes_the_chain_through_a_caught_up_standby():
    """Two tasks stay on A; an orphan is cheapest on A (caught up), which is full, so A hands one
    of its tasks to B: the start plus one augmenting path of three arcs."""
    # nodes: 0 task x (owner A), 1 task y (owner A), 2 orphan z, 3 A, 4 B, 5 sink
    tails = np.array([0, 0, 1, 1, 2, 2, 3, 4], dtype=np.int64)
    heads = np.array([3, 4, 3, 4, 3, 4, 5, 5], dtype=np.int64)
    capacities = np.array([1, 1, 1, 1, 1, 1, 2, 2], dtype=np.int64)
    costs = np.array([0, 5, 0, 9, 0, 20, 0, 0], dtype=np.int64)
    supplies = np.array([1, 1, 1, 0, 0, -3], dtype=np.int64)
    flows = warm_start.complete(6, tails, heads, capacities, costs, supplies,
                                np.array([0, 2], dtype=np.int64), np.array([1, 1], dtype=np.int64))
    assert flows is not None
    assert flows.tolist() == [0, 1, 1, 0, 1, 0, 2, 1]  # x moves to B (5), z takes A (0): cost 5
    assert int(np.dot(flows, costs)) == _optimal_cost(6, tails, heads, capacities, costs, supplies) == 5


def test_a_newcomer_takes_what_waits_above_an_old_members_floor():
    """A (floor 1, ceiling 2) held three tasks; newcomer B has a floor of 1. Filled, A's arcs
    above its floor would make the start no optimum (B gains its floor reward from a move);
    held, A's third unit waits at A and one phase hands a task to B."""
    # nodes: 0-2 tasks x, y, z (owner A), 3 A, 4 B, 5 sink; arcs: each task to A (0) or B (10),
    # A: floor (-100), ceiling, over (+100); B: floor (-100), ceiling
    tails = np.array([0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4], dtype=np.int64)
    heads = np.array([3, 4, 3, 4, 3, 4, 5, 5, 5, 5, 5], dtype=np.int64)
    capacities = np.array([1, 1, 1, 1, 1, 1, 1, 1, 9, 1, 1], dtype=np.int64)
    costs = np.array([0, 10, 0, 10, 0, 10, -100, 0, 100, -100, 0], dtype=np.int64)
    supplies = np.array([1, 1, 1, 0, 0, -3], dtype=np.int64)
    staying = np.array([0, 2, 4], dtype=np.int64), np.ones(3, dtype=np.int64)
    assert warm_start.complete(6, tails, heads, capacities, costs, supplies, *staying) is None  # a negative cycle
    flows = warm_start.complete(6, tails, heads, capacities, costs, supplies, *staying,
                                np.array([7, 8], dtype=np.int64))
    assert flows is not None
    assert int(np.dot(flows, costs)) == _optimal_cost(6, tails, heads, capacities, costs, supplies) == -190
    assert flows[[1, 3, 5]].sum() == 1 and flows[9] == 1  # one task moved to B, on its floor


def test_orphans_at_different_distances_from_the_sink_go_in_one_phase(monkeypatch):
    """Three orphans (no start) whose only homes are three clients at move prices 1, 5 and 9,
    one deficit (the sink): each phase measures every node's distance to the nearest deficit,
    so each orphan has a zero-cost way at once and one max flow places all three. Measured
    from the orphans' side, only the nearest would: three phases, one unit each."""
    # nodes: 0-2 orphans, 3-5 clients (room for one each), 6 sink
    tails = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64)
    heads = np.array([3, 4, 5, 6, 6, 6], dtype=np.int64)
    capacities = np.ones(6, dtype=np.int64)
    costs = np.array([1, 5, 9, 0, 0, 0], dtype=np.int64)
    supplies = np.array([1, 1, 1, 0, 0, 0, -3], dtype=np.int64)
    phases = []
    augment = warm_start._Residual.augment

    def counted(self, *args):
        phases.append(1)
        return augment(self, *args)

    monkeypatch.setattr(warm_start._Residual, "augment", counted)
    empty = np.zeros(0, dtype=np.int64)
    flows = warm_start.complete(7, tails, heads, capacities, costs, supplies, empty, empty)
    assert flows is not None and flows.tolist() == [1, 1, 1, 1, 1, 1]
    assert len(phases) == 1


def test_a_start_beyond_capacity_is_refused():
    tails, heads = np.array([0], dtype=np.int64), np.array([1], dtype=np.int64)
    one = np.array([1], dtype=np.int64)
    assert warm_start.complete(2, tails, heads, one, one * 0, np.array([1, -1]), np.array([0]), np.array([2])) is None


def test_scipy_loads_only_when_preloaded_or_needed():
    """``import assignor`` leaves scipy unloaded (`python -m assignor` stays cheap for the groups
    that never need a warm start); ``assignor.preload()``, which the server's workers call at
    start, loads it."""
    code = ("import sys, assignor\n"
            "assert not any(name.startswith('scipy') for name in sys.modules)\n"
            "assignor.preload()\n"
            "assert 'scipy.sparse.csgraph' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
