"""Completing a partial flow by primal-dual phases: the exact incremental step for a small
change to a settled group.

When a member leaves a settled group, every other task may stay where it runs and only the
leaver's tasks need a home; but KIP-441's preference for caught-up clients ("Iterative Balancing
Assignments") makes that home a chain of moves through caught-up standbys (A takes the orphan,
hands one of its own tasks to its caught-up standby B, who hands one on...). OR-Tools' cost
scaling finds those chains slowly: one member leaving 1,000 clients x 20,000 tasks of 500
subtopologies took it 6 s (docs/benchmarks.md). When members join, the tasks that move go to
them, most at one price. Started instead from the flow where every task stays, the optimum is
a few phases away.

``complete`` takes that partial flow (``start``: units on some arcs), routes it on the cheapest
way each node allows, but over no ``held`` arc (a unit that finds no arc with room waits where
it is), proves it optimal for the units it carries (node potentials by Bellman-Ford on its
residual graph: no negative cycle), then routes the units left in phases: a Dijkstra on reduced
costs (``scipy.sparse.csgraph``), every node's distance to the nearest node lacking units,
moves the potentials, and a max flow over the arcs that then cost zero carries every unit it
can along shortest paths. The result is optimal by
construction, and checked: every residual arc of the final flow has a non-negative reduced
cost. Whenever a step cannot be taken (a negative cycle, too many phases), it returns None and
the caller solves from scratch.
"""

from __future__ import annotations

import numpy as np

from assignor.flow import maximum_flow, residual_potentials

# Arcs below which no start is completed: OR-Tools then solves from scratch in a few tens of
# ms, less than loading scipy (0.11-0.19 s, once per process: a scale-out of 1,000 clients at
# 1 subtopology, 13,700 arcs, took 0.15 s more with it)
MIN_ARCS = 30_000
# Phases after which a from-scratch solve is cheaper (each is a Dijkstra and a max flow over the
# whole residual graph: about 11 ms at 115,000 arcs, 5 of them the search).
MAX_PHASES = 64
# A group weight standing for no arc with room
NO_ROOM = np.iinfo(np.int64).max


def preload() -> None:
    """Import scipy's shortest paths now rather than in the first completion (see
    ``_Residual._reversed_graph``): for long-lived processes, such as the server's workers."""
    import scipy.sparse.csgraph  # noqa: F401


def complete(node_count: int, tails: np.ndarray, heads: np.ndarray, capacities: np.ndarray, costs: np.ndarray,
             supplies: np.ndarray, start_arcs: np.ndarray, start_units: np.ndarray,
             held: np.ndarray | None = None) -> np.ndarray | None:
    """Optimal flows on every arc that satisfy ``supplies`` (per node; positive enters),
    starting from ``start_units`` on ``start_arcs``, which the start passes on over any arcs
    but ``held``; None when the start does not lead there cheaply (see the module's
    docstring)."""
    flows = np.zeros(len(tails), dtype=np.int64)
    np.add.at(flows, start_arcs, start_units)
    if (flows > capacities).any():
        return None
    excess = supplies.astype(np.int64).copy()
    np.add.at(excess, tails, -flows)
    np.add.at(excess, heads, flows)
    open_ = capacities.copy()
    if held is not None:
        open_[held] = flows[held]
    _route_onwards(flows, excess, tails, heads, open_, costs, supplies)
    residual = _Residual(node_count, tails, heads, capacities, costs)
    potentials = residual.potentials(flows)
    if potentials is None:
        return None
    for _ in range(MAX_PHASES):
        if not (excess > 0).any():
            break
        if not residual.augment(flows, excess, potentials):
            return None
    if (excess != 0).any() or not residual.optimal(flows, potentials):
        return None
    return flows


def _route_onwards(flows, excess, tails, heads, capacities, costs, supplies) -> None:
    """Pass on every unit that the start left on a node of no supply, over that node's arcs,
    cheapest first, all such nodes at once, level by level; a unit that finds no arc with room
    waits where it is (an excess the phases route)."""
    order = np.lexsort((costs, tails))
    sorted_tails = tails[order]
    transit = supplies == 0
    arrived = (excess > 0) & transit
    for _ in range(len(excess)):
        if not arrived.any():
            return
        arcs = order[arrived[sorted_tails]]  # each node's arcs, together, cheapest first
        arc_tails = tails[arcs]
        room = capacities[arcs] - flows[arcs]
        before = np.cumsum(room) - room
        starts = np.flatnonzero(np.r_[True, arc_tails[1:] != arc_tails[:-1]])
        before -= np.repeat(before[starts], np.diff(np.r_[starts, len(arcs)]))
        given = np.clip(excess[arc_tails] - before, 0, room)
        flows[arcs] += given
        np.add.at(excess, arc_tails, -given)
        arrived = np.zeros(len(excess), dtype=bool)
        arrived[heads[arcs][given > 0]] = True
        np.add.at(excess, heads[arcs], given)
        arrived &= transit & (excess > 0)


class _Residual:
    """The residual graph of a flow: arc i forward (room ``capacity - flow``, ``cost``) and
    i + m backward (room ``flow``, ``-cost``), grouped by (tail, head) for Dijkstra, which takes
    one weight per pair of nodes."""

    def __init__(self, node_count: int, tails, heads, capacities, costs) -> None:
        self.node_count = node_count
        self.arc_count = len(tails)
        self.capacities = capacities
        self.tails = np.concatenate([tails, heads])
        self.heads = np.concatenate([heads, tails])
        self.costs = np.concatenate([costs, -costs]).astype(np.int64)
        # The arcs in group order, for Dijkstra's weights (a group's weight is its cheapest
        # arc with room): most groups are one arc; the few of several are reduced apart.
        pair = self.tails * (node_count + 1) + self.heads
        self.order = np.argsort(pair, kind="stable")
        self.sorted_tails = self.tails[self.order]
        self.sorted_heads = self.heads[self.order]
        self.sorted_costs = self.costs[self.order]
        self.sorted_base = self.order % self.arc_count
        self.sorted_forward = self.order < self.arc_count
        self.sorted_capacities = capacities[self.sorted_base]
        pair = pair[self.order]
        self.starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        self.group_tails = self.sorted_tails[self.starts]
        self.group_heads = self.sorted_heads[self.starts]
        sizes = np.diff(np.r_[self.starts, len(self.order)])
        self.multi_groups = np.flatnonzero(sizes > 1)
        multi_sizes = sizes[self.multi_groups]
        self.multi_starts = (np.cumsum(multi_sizes) - multi_sizes).astype(np.int64)
        self.multi_positions = (np.repeat(self.starts[self.multi_groups] - self.multi_starts, multi_sizes)
                                + np.arange(int(multi_sizes.sum())))
        self.position = np.empty_like(self.order)
        self.position[self.order] = np.arange(len(self.order))
        self._reversed = None  # (graph, groups in its order): ``_reversed_graph``
        self._room = None  # room in group order, kept by ``augment`` along the paths it takes
        self._reduced = None  # reduced costs in group order: the potentials move only in ``augment``, which keeps them

    def room(self, flows: np.ndarray) -> np.ndarray:
        return np.concatenate([self.capacities - flows, flows])

    def potentials(self, flows: np.ndarray) -> np.ndarray | None:
        """Node potentials under which every residual arc costs at least zero
        (``assignor.flow.residual_potentials``); None when there are none to be found cheaply."""
        m = self.arc_count
        return residual_potentials(self.node_count, self.tails[:m], self.heads[:m], self.capacities,
                                   self.costs[:m], flows)

    def optimal(self, flows: np.ndarray, potentials: np.ndarray) -> bool:
        reduced = self.costs + potentials[self.tails] - potentials[self.heads]
        return bool((reduced[self.room(flows) > 0] >= 0).all())

    def augment(self, flows: np.ndarray, excess: np.ndarray, potentials: np.ndarray) -> bool:
        """One phase of the primal-dual method: every node's distance to the nearest node
        lacking units (Dijkstra on reduced costs, over the reversed residual graph) moves the
        potentials so that each node's shortest way to a deficit costs zero, then as many units
        as fit go along such ways (a max flow over the arcs with room that cost zero). Every
        arc it uses costs zero, so reduced costs stay non-negative, and a flow without excess
        whose reduced costs are all non-negative is optimal, whichever deficits its units went
        to first. Distances from the units' side instead (one search from all of them) give
        zero-cost ways only from the nearest ones: a settled group that lost members, whose
        orphans all end at the sink, then moved one unit per phase (19 phases against 3)."""
        from scipy.sparse.csgraph import dijkstra  # see _reversed_graph

        n = self.node_count
        if self._room is None:
            held = flows[self.sorted_base]
            self._room = np.where(self.sorted_forward, self.sorted_capacities - held, held)
            self._reduced = self.sorted_costs + potentials[self.sorted_tails] - potentials[self.sorted_heads]
        room, reduced = self._room, self._reduced
        weight = np.where(room > 0, reduced, NO_ROOM)
        best = weight[self.starts]
        if len(self.multi_groups):
            best[self.multi_groups] = np.minimum.reduceat(weight[self.multi_positions], self.multi_starts)
        usable = best != NO_ROOM
        if (best[usable] < 0).any():
            return False
        graph, by_head = self._reversed_graph()
        graph.data[:] = np.where(usable, best, np.inf)[by_head]
        lacking = np.flatnonzero(excess < 0)
        sources = np.flatnonzero(excess > 0)
        if not len(lacking):
            return False
        distance = dijkstra(graph, indices=lacking, min_only=True)
        reaching = np.isfinite(distance)
        if not reaching[sources].any():
            return False
        far = distance[reaching].max()
        shift = np.full(n, -int(far), dtype=np.int64)
        shift[reaching] = -np.rint(distance[reaching]).astype(np.int64)
        potentials += shift
        reduced += shift[self.sorted_tails] - shift[self.sorted_heads]
        sources = sources[reaching[sources]]
        near = distance <= distance[sources].max()  # every node on a source's shortest way
        positions = np.flatnonzero((room > 0) & (reduced == 0) & near[self.sorted_tails] & near[self.sorted_heads])
        found = maximum_flow(n, self.sorted_tails[positions], self.sorted_heads[positions],
                             np.minimum(room[positions], int(excess[sources].sum())), sources, excess[sources],
                             lacking, -excess[lacking])
        if found is None or not found[1]:
            return False
        moved = found[0]
        used = moved > 0
        positions, moved = positions[used], moved[used]
        arcs = self.order[positions]
        forward = arcs < self.arc_count
        np.add.at(flows, arcs[forward], moved[forward])
        np.add.at(flows, arcs[~forward] - self.arc_count, -moved[~forward])
        np.add.at(room, positions, -moved)
        np.add.at(room, self.position[np.where(forward, arcs + self.arc_count, arcs - self.arc_count)], moved)
        np.add.at(excess, self.sorted_tails[positions], -moved)
        np.add.at(excess, self.sorted_heads[positions], moved)
        return True

    def _reversed_graph(self):
        """Every (tail, head) group as an arc head -> tail, built once, and the groups in that
        graph's order; ``augment`` writes the weights (infinite: no room) before each search.
        scipy is imported here, not with the module: most assignments never get this far, and
        its import (about 0.15 s) would delay every `python -m assignor`."""
        if self._reversed is None:
            from scipy.sparse import csr_array

            n = self.node_count
            by_head = np.argsort(self.group_heads, kind="stable")
            indptr = np.r_[0, np.cumsum(np.bincount(self.group_heads, minlength=n))].astype(np.int32)
            columns = self.group_tails[by_head].astype(np.int32)
            self._reversed = csr_array((np.zeros(len(columns), dtype=np.float64), columns, indptr), shape=(n, n)), by_head
        return self._reversed

