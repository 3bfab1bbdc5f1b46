"""A thin builder over OR-Tools' min-cost-flow solver, loading arcs in bulk.

Every optimisation in the assignor (balanced targets, KIP-925 rack-aware placement) is a
min-cost flow. Arcs are collected in numpy arrays (single arcs in a Python list until the
next bulk call) and handed to the solver in one call: adding them one by one costs as much as
the solve on large groups (docs/dependencies.md, environment facts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow

# (subtopologies x clients) pairs from which a (subtopology, client) layer goes through funnels
FUNNEL_PAIRS = 20_000
# Label corrections per arc after which ``potentials`` gives up (a negative cycle, or a
# certificate dearer than solving again); a pass costs at least a node count / PASS_WORK of them
# (its fixed numpy calls, when few labels change).
CERTIFY_WORK = 64
PASS_WORK = 16
# Looks for a negative cycle among the arcs that lowered the nodes' distances
# (``_parents_cycle``: a few gathers over the nodes), one per this share of CERTIFY_WORK spent:
# without them, a start that admits one was given up only when CERTIFY_WORK ran out (0.07-0.13 s
# on the varied-changelog scale-ins' standby flows). Arcs are recorded only from the first
# share on: most certificates end before it and pay nothing.
CYCLE_CHECKS = 8


class FlowError(RuntimeError):
    """The solver found no feasible flow; a bug in how a graph was built, not bad input."""


class _Arcs(NamedTuple):
    """A graph's arcs as arrays, joined from its chunks once per solve."""

    tails: np.ndarray
    heads: np.ndarray
    capacities: np.ndarray
    costs: np.ndarray


class FlowGraph:
    """Arcs, supplies and their optimal flow.

    ``priorities``: the costs are priorities in one integer, given as (weight, coarse weight)
    pairs from the largest: every cost is a sum of multiples of the weights, plus ties far below
    the least (``assignor.target``: floors and tiers over moves; ``assignor.rack_flow``: KIP-925
    cost over target misses over perturbations). OR-Tools' cost scaling runs phases through every
    magnitude down from the largest cost, most of them among costs only ties separate: 1% of
    1,000 members leaving at 20 subtopologies took 1.3 s with the weights as they are, 0.56 s
    with each priced at its coarse weight. So the graph is first solved at the coarse weights,
    and that flow kept when it is optimal for the true costs too (``potentials`` certify it);
    otherwise it is solved again at the true costs.

    That coarse first solve runs on a reduced graph (``_reduced_flow``), at every size: a gate
    at 30,000 arcs saved 1-6 ms on graphs of 3,000-5,000 nodes, but left small groups to a
    different optimum among equals, and one shape of ``bench/bench_assignor.py --floor-sweep``
    (19 clients, 50 tasks, 2 standbys) off KIP-441's floor. ``floor`` arcs (a
    reward for each unit up to a client's floor) and ``last_resort`` arcs (units above a
    ceiling) carry the largest costs by far, and cost scaling pays a phase per factor of the
    largest: the floors' units are sent before the solve and the last resorts left out, so the
    largest cost is a tier rather than a balance weight. And each ``stay`` (a task class's free
    arc to its previous owner) merges its class into the owner's node: a node fewer per class.
    Together, about half of OR-Tools' time on the capped active flows of 1% or 10% of 1,000
    members leaving (docs/benchmarks.md). The reduced flow, mapped back, is certified like any
    other; one that has no flow or does not decode is solved whole.
    """

    def __init__(self, priorities: Sequence[tuple[int, int]] = ()) -> None:
        self._priorities = tuple(priorities)
        self._chunks: list[tuple[np.ndarray, ...]] = []  # (tails, heads, capacities, costs) in bulk
        self._single: list[int] = []  # tail, head, capacity and cost of each arc since the last chunk
        self._arc_count = 0
        self._supplies: dict[int, int] = {}
        self._node_count = 0
        self._flows: np.ndarray | None = None
        self._floors: list[int] = []
        self._last_resorts: list[int] = []
        self._stays: list[Callable[[], Iterable[int]]] = []
        self.optimal_cost: int | None = None

    def node(self) -> int:
        self._node_count += 1
        return self._node_count - 1

    def nodes(self, count: int) -> range:
        start = self._node_count
        self._node_count += count
        return range(start, start + count)

    @property
    def arc_count(self) -> int:
        return self._arc_count

    def supply(self, node: int, amount: int) -> None:
        """Positive amounts enter the network at ``node``, negative ones leave it."""
        self._supplies[node] = self._supplies.get(node, 0) + amount

    def supplies(self, nodes, amounts) -> None:
        """``supply`` for many nodes at once; ``amounts`` may be a scalar."""
        for node, amount in zip(*(a.tolist() for a in np.broadcast_arrays(nodes, amounts)), strict=True):
            self._supplies[node] = self._supplies.get(node, 0) + amount

    def arc(self, tail: int, head: int, capacity: int, cost: int) -> int:
        self._single += (tail, head, capacity, cost)
        self._arc_count += 1
        return self._arc_count - 1

    def floor(self, tail: int, head: int, capacity: int, reward: int) -> int:
        """An arc whose ``capacity`` units each earn ``reward`` (a negative cost that outweighs
        every other priority): the solver fills it whenever the graph allows."""
        arc = self.arc(tail, head, capacity, reward)
        self._floors.append(arc)
        return arc

    def last_resort(self, tail: int, head: int, capacity: int, cost: int) -> int:
        """An arc at a ``cost`` that outweighs every other priority: used only where the graph
        leaves no other way."""
        arc = self.arc(tail, head, capacity, cost)
        self._last_resorts.append(arc)
        return arc

    def stay(self, arcs: Callable[[], Iterable[int]]) -> None:
        """Stays, as ``arcs()`` names them when a solve reduces the graph (not before: a warm
        start never needs them): each free, out of a node that has a supply, one stay and no arc
        in, able to carry all of that supply (a task class's arc to its previous owner). The
        coarse solve merges such a tail into its head, a graph of a node fewer per class; its
        flow decodes back when no merged tail's other arcs carried more than its supply (the
        caller names only tails whose arcs no optimal flow would borrow so,
        ``assignor.target._TaskClasses._stays``)."""
        self._stays.append(arcs)

    def arcs(self, tails, heads, capacities, costs) -> range:
        """Add many arcs at once; any argument may be a scalar broadcast to the others' length."""
        columns = [np.array(values, dtype=np.int64) for values in (tails, heads, capacities, costs)]  # copies
        count = next(len(column) for column in columns if column.ndim)
        if any(column.ndim and len(column) != count for column in columns):
            raise FlowError(f"arcs: columns of lengths {[column.size for column in columns]}")
        self._close_single()
        self._chunks.append(tuple(column if column.ndim else np.full(count, column) for column in columns))
        start = self._arc_count
        self._arc_count += count
        return range(start, self._arc_count)

    def _close_single(self) -> None:
        if self._single:
            rows = np.array(self._single, dtype=np.int64).reshape(-1, 4)
            self._chunks.append(tuple(np.ascontiguousarray(column) for column in rows.T))
            self._single = []

    def _arrays(self) -> _Arcs:
        self._close_single()
        if not self._chunks:
            return _Arcs(*(np.zeros(0, dtype=np.int64) for _ in range(4)))
        if len(self._chunks) > 1:
            self._chunks = [tuple(np.concatenate(column) for column in zip(*self._chunks, strict=True))]
        return _Arcs(*self._chunks[0])

    def solve(self, start: Callable[[], tuple[Sequence[int], Sequence[int]]] | None = None,
              held: list[int] | None = None) -> int:
        """The optimal flow. ``start`` returns (arcs, units): a partial flow that is likely close
        to the optimum (every task where it ran), which passes on over any arcs but ``held``,
        completed in primal-dual phases when that is cheaper (``assignor.warm_start``: from
        ``MIN_ARCS`` arcs; below, ``start`` is not called); the optimum is the same either way."""
        arcs = self._arrays()
        if start is not None and self._arc_count and self._arc_count >= _warm_start().MIN_ARCS:
            flows = self._completed(arcs, *start(), held)
            if flows is not None:
                return self._keep(flows, arcs.costs)
        if self._priorities and self._arc_count:
            coarse = _coarse(arcs.costs, self._priorities)
            flows = self._reduced_flow(arcs, coarse)
            if flows is None:
                flows = self._min_cost_flow(arcs, coarse)
            if certified(self._node_count, arcs.tails, arcs.heads, arcs.capacities, arcs.costs, flows):
                return self._keep(flows, arcs.costs)
        return self._keep(self._min_cost_flow(arcs, arcs.costs), arcs.costs)

    def _keep(self, flows: np.ndarray, costs: np.ndarray) -> int:
        self._flows = flows
        self.optimal_cost = int(np.dot(flows, costs))
        return self.optimal_cost

    def _min_cost_flow(self, arcs: _Arcs, costs: np.ndarray) -> np.ndarray:
        flows = _solved(arcs.tails, arcs.heads, arcs.capacities, costs, self._supply_array())
        if flows is None:
            raise FlowError("min-cost flow not solved: no feasible flow")
        return flows

    def _reduced_flow(self, arcs: _Arcs, costs: np.ndarray) -> np.ndarray | None:
        """The coarse solve on a smaller graph: every floor full (its units sent before the
        solve), no last resort, each ``stay`` arc's tail merged into its head. The flow on the
        whole graph, or None when the smaller graph has none or its stays do not decode (a
        merged tail's other arcs carried more than its own units)."""
        if not (self._floors or self._last_resorts or self._stays):
            return None
        floors = np.array(self._floors, dtype=np.int64)
        stays = np.array([arc for arcs in self._stays for arc in arcs()], dtype=np.int64)
        kept = np.ones(self._arc_count, dtype=bool)
        kept[floors] = False
        kept[np.array(self._last_resorts, dtype=np.int64)] = False
        supplies = self._supply_array()
        np.add.at(supplies, arcs.tails[floors], -arcs.capacities[floors])
        np.add.at(supplies, arcs.heads[floors], arcs.capacities[floors])
        if len(stays):  # a tail that arcs enter, or that has another stay, or a stay that costs, stays a node
            entered = np.bincount(arcs.heads, minlength=self._node_count) + np.bincount(
                arcs.tails[stays], minlength=self._node_count) - 1
            stays = stays[(entered[arcs.tails[stays]] == 0) & (arcs.costs[stays] == 0)]
        kept[stays] = False
        node = np.arange(self._node_count)
        staying = arcs.tails[stays]
        own = supplies[staying]
        node[staying] = arcs.heads[stays]
        np.add.at(supplies, arcs.heads[stays], own)
        supplies[staying] = 0
        solved = _solved(node[arcs.tails[kept]], node[arcs.heads[kept]], arcs.capacities[kept], costs[kept], supplies)
        if solved is None:
            return None
        flows = np.zeros(self._arc_count, dtype=np.int64)
        flows[kept] = solved
        flows[floors] = arcs.capacities[floors]
        if len(stays):
            out = np.zeros(self._node_count, dtype=np.int64)
            np.add.at(out, arcs.tails, flows)
            left = own - out[staying]  # the merged tail's units that its other arcs did not carry
            if (left < 0).any() or (left > arcs.capacities[stays]).any():
                return None
            flows[stays] = left
        return flows

    def _supply_array(self) -> np.ndarray:
        supplies = np.zeros(self._node_count, dtype=np.int64)
        if self._supplies:
            np.add.at(supplies, np.fromiter(self._supplies.keys(), dtype=np.int64),
                      np.fromiter(self._supplies.values(), dtype=np.int64))
        return supplies

    def _completed(self, arcs: _Arcs, start_arcs, start_units, held: list[int] | None) -> np.ndarray | None:
        warm_start = _warm_start()
        return warm_start.complete(self._node_count, arcs.tails, arcs.heads, arcs.capacities, arcs.costs,
                                   self._supply_array(),
                                   np.asarray(start_arcs, dtype=np.int64), np.asarray(start_units, dtype=np.int64),
                                   None if held is None else np.asarray(held, dtype=np.int64))

    def flow(self, arc: int) -> int:
        if self._flows is None:
            raise FlowError("solve() first")
        return int(self._flows[arc])

    def flows(self, arcs: range) -> np.ndarray:
        if self._flows is None:
            raise FlowError("solve() first")
        return self._flows[arcs.start : arcs.stop]


def _solved(tails: np.ndarray, heads: np.ndarray, capacities: np.ndarray, costs: np.ndarray,
            supplies: np.ndarray) -> np.ndarray | None:
    """OR-Tools' optimal flows on the arcs, meeting ``supplies`` (per node); None when no flow
    meets them."""
    solver = min_cost_flow.SimpleMinCostFlow()
    if len(tails):
        solver.add_arcs_with_capacity_and_unit_cost(tails.astype(np.int32), heads.astype(np.int32), capacities, costs)
    nodes = np.flatnonzero(supplies)
    if len(nodes):
        solver.set_nodes_supplies(nodes.astype(np.int32), supplies[nodes])
    if solver.solve() != solver.OPTIMAL:
        return None
    if not len(tails):
        return np.zeros(0, dtype=np.int64)
    return solver.flows(np.arange(len(tails), dtype=np.int32))


def _coarse(costs: np.ndarray, priorities: tuple[tuple[int, int], ...]) -> np.ndarray:
    """``costs`` with each priority's multiple priced at its coarse weight, the ties kept."""
    coarse = np.zeros_like(costs)
    rest = costs
    for weight, coarse_weight in priorities:
        multiple = (rest + weight // 2) // weight
        rest = rest - multiple * weight
        coarse += multiple * coarse_weight
    return coarse + rest


def certified(node_count: int, tails, heads, capacities, costs: np.ndarray, flows: np.ndarray) -> bool:
    """Whether ``flows`` is a min-cost flow: its residual graph has node potentials under which
    no arc costs less than zero (then no negative cycle can lower its cost)."""
    return residual_potentials(node_count, tails, heads, capacities, costs, flows) is not None


def residual_potentials(node_count: int, tails, heads, capacities, costs: np.ndarray,
                        flows: np.ndarray) -> np.ndarray | None:
    """``potentials`` of the residual graph of ``flows``: each arc with room forward at its cost,
    each arc carrying flow backward at minus its cost."""
    tails, heads = np.asarray(tails, dtype=np.int64), np.asarray(heads, dtype=np.int64)
    forward = flows < np.asarray(capacities, dtype=np.int64)
    backward = flows > 0
    return potentials(node_count, np.concatenate([tails[forward], heads[backward]]),
                      np.concatenate([heads[forward], tails[backward]]),
                      np.concatenate([costs[forward], -costs[backward]]))


def potentials(node_count: int, tails: np.ndarray, heads: np.ndarray, costs: np.ndarray) -> np.ndarray | None:
    """Node potentials under which every arc costs at least zero (reduced cost: cost +
    potential(tail) - potential(head)): shortest distances from every node at once, by
    Bellman-Ford relaxing only the arcs out of nodes whose distance fell in the last pass. None
    after ``CERTIFY_WORK`` relaxations per arc (a negative cycle, or too long a way to find them).
    With no arc costing less than zero, every potential is zero.

    Chains of zero-cost arcs make the passes many (hundreds on a settled group that lost
    members) but each short: the work is the arcs out of the nodes that changed."""
    distance = np.zeros(node_count, dtype=np.int64)
    if not len(tails):
        return distance
    order = np.argsort(tails, kind="stable")
    tails, heads, costs = tails[order], heads[order], costs[order]
    first = np.searchsorted(tails, np.arange(node_count + 1))
    changed = np.unique(tails[costs < 0])
    budget = CERTIFY_WORK * len(tails)
    changed_mark = np.zeros(node_count, dtype=bool)
    parent = None  # once a share of the budget is spent: the tail of the arc that last lowered each node
    check_every = budget // CYCLE_CHECKS
    next_check = budget - check_every
    while len(changed):
        counts = first[changed + 1] - first[changed]
        total = int(counts.sum())
        budget -= max(total, node_count // PASS_WORK)
        if budget < 0:
            return None
        arcs = np.repeat(first[changed] - np.cumsum(counts) + counts, counts) + np.arange(total)
        reached = distance[tails[arcs]] + costs[arcs]
        ends = heads[arcs]
        lower = reached < distance[ends]
        arcs, ends, reached = arcs[lower], ends[lower], reached[lower]
        np.minimum.at(distance, ends, reached)
        if parent is not None:
            won = reached == distance[ends]
            parent[ends[won]] = tails[arcs[won]]
        changed_mark[ends] = True
        changed = np.flatnonzero(changed_mark)
        changed_mark[changed] = False
        if budget <= next_check:  # arcs recorded from here on: a cycle of them is still negative
            next_check = budget - check_every
            if parent is None:
                parent = np.arange(node_count)
            elif _parents_cycle(parent):
                return None
    return distance


def _parents_cycle(parent: np.ndarray) -> bool:
    """Whether the arcs that last lowered each node's distance close a cycle: then it is a
    negative one (each such arc u -> v keeps d(v) >= d(u) + cost, and the last lowering on the
    cycle made one of them strict), and no potentials exist. Pointer doubling: after 2^k jumps
    every node that leads to no cycle sits on a node without a parent."""
    reach = parent
    for _ in range(max(1, len(parent).bit_length())):
        reach = reach[reach]
    return bool((parent[reach] != reach).any())


def _warm_start():
    """``assignor.warm_start``, imported when first used: it builds on this module's
    ``maximum_flow``."""
    from assignor import warm_start

    return warm_start


def fill_by_demand(demand: np.ndarray, caps: np.ndarray, amount: int) -> np.ndarray:
    """``amount`` units over clients, at most ``caps`` and ``demand`` each, one at a time to the
    largest remaining demand (first in order among equals): water-filling to a level, found by
    bisection. Gives less than ``amount`` only when every client is full.

    How a funnel's flow is split per (subtopology, client): the flows that keep a subtopology's
    (subtopology, client) layer small send it to clients through one funnel node, a relaxation
    that is exact whenever this split fits every cap (``assignor.target._SubtopologyHubs``,
    ``assignor.rack_flow.solve_compressed``)."""
    room = np.minimum(caps, demand)
    if int(room.sum()) <= amount:
        return room
    if amount == 1:  # what the bisection finds, without it: one unit per subtopology of one task
        given = np.zeros_like(room)
        given[int(np.argmax(np.where(room > 0, demand, -1)))] = 1
        return given
    low, high = 0, int(demand.max())  # given(level) = min(caps, max(0, demand - level)) shrinks with level
    while low < high:
        level = (low + high) // 2
        if int(np.minimum(caps, np.maximum(demand - level, 0)).sum()) <= amount:
            high = level
        else:
            low = level + 1
    given = np.minimum(caps, np.maximum(demand - low, 0))
    short = amount - int(given.sum())
    if short:  # the next units go to clients waiting exactly at the level, in order
        waiting = np.flatnonzero((demand - given == low) & (given < caps) & (demand > 0))
        given[waiting[:short]] += 1
    return given


def split_exactly(supply: np.ndarray, demand: np.ndarray, rows: np.ndarray, columns: np.ndarray,
                  caps: np.ndarray) -> np.ndarray | None:
    """Units per cell (``rows[i]``, ``columns[i]``), at most ``caps[i]`` each, whose row sums are
    ``supply`` and column sums ``demand`` (equal totals): a transportation problem's feasible
    plan, by a max flow. None when no such plan exists. The exact counterpart of
    ``fill_by_demand`` where cells are missing (pairs a funnel does not serve)."""
    row_count = len(supply)
    return feasible_flow(row_count + len(demand), rows, np.asarray(columns) + row_count, caps,
                         np.arange(row_count), supply, np.arange(row_count, row_count + len(demand)), demand)


def split_least_excess(supply: np.ndarray, demand: np.ndarray, rows: np.ndarray, columns: np.ndarray,
                        caps: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``split_exactly`` where a cell may take more than its cap, each unit above it costing one:
    the units per cell of a plan with the fewest such units, and how many there are (a min-cost
    flow whose only prices are 0 and 1, so it takes few cost-scaling phases). None when the
    cells cannot carry the supply at any price."""
    row_count = len(supply)
    graph = FlowGraph()
    graph.nodes(row_count + len(demand))
    heads = np.asarray(columns, dtype=np.int64) + row_count
    free = graph.arcs(rows, heads, caps, 0)
    over = graph.arcs(rows, heads, 1 << 40, 1)
    graph.supplies(np.arange(row_count), supply)
    graph.supplies(np.arange(row_count, row_count + len(demand)), -np.asarray(demand, dtype=np.int64))
    try:
        excess = graph.solve()
    except FlowError:
        return None
    return graph.flows(free) + graph.flows(over), excess


def feasible_flow(node_count: int, tails, heads, capacities, sources, supplies, sinks, demands) -> np.ndarray | None:
    """Flows on the arcs (``tails[i]`` -> ``heads[i]``, at most ``capacities[i]``) that carry
    exactly ``supplies`` out of ``sources`` and ``demands`` into ``sinks`` (equal totals), by a
    max flow; None when no such flow exists."""
    flows = maximum_flow(node_count, tails, heads, capacities, sources, supplies, sinks, demands)
    if flows is None or flows[1] < int(np.sum(supplies)):
        return None
    return flows[0]


def maximum_flow(node_count: int, tails, heads, capacities, sources, supplies, sinks, demands
                 ) -> tuple[np.ndarray, int] | None:
    """A maximum flow over the arcs (``tails[i]`` -> ``heads[i]``, at most ``capacities[i]``)
    from ``sources`` (at most ``supplies`` out of each) to ``sinks`` (at most ``demands`` into
    each): the flows on the arcs and its value; None when the solver fails."""
    solver = max_flow.SimpleMaxFlow()
    source, sink = node_count, node_count + 1
    sources, sinks = np.asarray(sources, dtype=np.int32), np.asarray(sinks, dtype=np.int32)
    arcs = solver.add_arcs_with_capacity(np.asarray(tails, dtype=np.int32), np.asarray(heads, dtype=np.int32),
                                         np.asarray(capacities, dtype=np.int64))
    solver.add_arcs_with_capacity(np.full(len(sources), source, dtype=np.int32), sources,
                                  np.asarray(supplies, dtype=np.int64))
    solver.add_arcs_with_capacity(sinks, np.full(len(sinks), sink, dtype=np.int32), np.asarray(demands, dtype=np.int64))
    if solver.solve(source, sink) != solver.OPTIMAL:
        return None
    return solver.flows(np.asarray(arcs, dtype=np.int32)), int(solver.optimal_flow())
