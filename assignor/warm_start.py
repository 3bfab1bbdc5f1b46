"""Completing a partial flow by successive shortest paths: the exact incremental step for a
small change to a settled group.

When a member leaves a settled group, every other task may stay where it runs and only the
leaver's tasks need a home; but KIP-441's preference for caught-up clients ("Iterative Balancing
Assignments") makes that home a chain of moves through caught-up standbys (A takes the orphan,
hands one of its own tasks to its caught-up standby B, who hands one on...). OR-Tools' cost
scaling finds those chains slowly: one member leaving 1,000 clients x 20,000 tasks of 500
subtopologies took it 6 s (docs/benchmarks.md). Started instead from the flow where every task
stays, the optimum is a few augmenting paths away, one per orphaned unit.

``complete`` takes that partial flow (``start``: units on some arcs), routes it on to the sinks
the cheapest way each node allows, proves it optimal for the units it carries (node potentials
by Bellman-Ford on its residual graph: no negative cycle), then adds the missing units one
shortest path at a time (Dijkstra on reduced costs, ``scipy.sparse.csgraph``), keeping the
potentials. The result is optimal by construction, and checked: every residual arc of the
final flow has a non-negative reduced cost. Whenever a step cannot be taken (a negative cycle,
too many units left, a node that cannot pass its units on), it returns None and the caller
solves from scratch.
"""

from __future__ import annotations

import numpy as np

# Units left to route above which a from-scratch solve is cheaper than one path per unit
# (each path is a Dijkstra over the whole residual graph: about 11 ms at 125,000 arcs).
MAX_PATHS = 64
# Bellman-Ford passes after which the start is not proven optimal (a negative cycle, or too
# long a chain of negative arcs to be worth it).
MAX_PASSES = 40


def complete(node_count: int, tails: np.ndarray, heads: np.ndarray, capacities: np.ndarray, costs: np.ndarray,
             supplies: np.ndarray, start_arcs: np.ndarray, start_units: np.ndarray) -> np.ndarray | None:
    """Optimal flows on every arc that satisfy ``supplies`` (per node; positive enters),
    starting from ``start_units`` on ``start_arcs``; None when the start does not lead there
    cheaply (see the module's docstring)."""
    flows = np.zeros(len(tails), dtype=np.int64)
    np.add.at(flows, start_arcs, start_units)
    if (flows > capacities).any():
        return None
    excess = supplies.astype(np.int64).copy()
    np.add.at(excess, tails, -flows)
    np.add.at(excess, heads, flows)
    if not _route_onwards(flows, excess, tails, heads, capacities, costs, supplies):
        return None
    if int(excess[excess > 0].sum()) > MAX_PATHS:
        return None
    residual = _Residual(node_count, tails, heads, capacities, costs)
    potentials = residual.potentials(flows)
    if potentials is None:
        return None
    for _ in range(MAX_PATHS):
        if not (excess > 0).any():
            break
        if not residual.augment(flows, excess, potentials):
            return None
    else:
        if (excess > 0).any():
            return None
    if (excess != 0).any() or not residual.optimal(flows, potentials):
        return None
    return flows


def _route_onwards(flows, excess, tails, heads, capacities, costs, supplies) -> bool:
    """Pass on every unit that the start left on a node of no supply, over that node's arcs,
    cheapest first, all such nodes at once, level by level; False when some node cannot pass
    its units on."""
    order = np.lexsort((costs, tails))
    sorted_tails = tails[order]
    transit = supplies == 0
    for _ in range(len(excess)):
        waiting = (excess > 0) & transit
        if not waiting.any():
            return True
        arcs = order[waiting[sorted_tails]]  # each waiting node's arcs, together, cheapest first
        arc_tails = tails[arcs]
        room = capacities[arcs] - flows[arcs]
        before = np.cumsum(room) - room
        starts = np.flatnonzero(np.r_[True, arc_tails[1:] != arc_tails[:-1]])
        before -= np.repeat(before[starts], np.diff(np.r_[starts, len(arcs)]))
        given = np.clip(excess[arc_tails] - before, 0, room)
        sent = np.zeros(len(excess), dtype=np.int64)
        np.add.at(sent, arc_tails, given)
        if (sent[waiting] < excess[waiting]).any():
            return False
        flows[arcs] += given
        excess[waiting] = 0
        np.add.at(excess, heads[arcs], given)
    return False


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
        self.order = np.lexsort((self.heads, self.tails))
        pair = self.tails[self.order] * (node_count + 1) + self.heads[self.order]
        self.starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        self.pair_keys = pair[self.starts]
        self.group_tails = self.tails[self.order][self.starts]
        self.group_heads = self.heads[self.order][self.starts]

    def room(self, flows: np.ndarray) -> np.ndarray:
        return np.concatenate([self.capacities - flows, flows])

    def potentials(self, flows: np.ndarray) -> np.ndarray | None:
        """Node potentials under which every residual arc costs at least zero (Bellman-Ford from
        every node at once); None when they do not settle within MAX_PASSES."""
        open_ = self.room(flows) > 0
        tails, heads, costs = self.tails[open_], self.heads[open_], self.costs[open_]
        by_head = np.argsort(heads, kind="stable")
        tails, heads, costs = tails[by_head], heads[by_head], costs[by_head]
        if not len(heads):
            return np.zeros(self.node_count, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]])
        targets = heads[starts]
        distance = np.zeros(self.node_count, dtype=np.int64)
        for _ in range(MAX_PASSES):
            best = np.minimum.reduceat(distance[tails] + costs, starts)
            lower = best < distance[targets]
            if not lower.any():
                return distance  # reduced cost: cost + potential(tail) - potential(head)
            distance[targets[lower]] = best[lower]
        return None

    def reduced(self, flows: np.ndarray, potentials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        room = self.room(flows)
        return room, self.costs + potentials[self.tails] - potentials[self.heads]

    def optimal(self, flows: np.ndarray, potentials: np.ndarray) -> bool:
        room, reduced = self.reduced(flows, potentials)
        return bool((reduced[room > 0] >= 0).all())

    def augment(self, flows: np.ndarray, excess: np.ndarray, potentials: np.ndarray) -> bool:
        """One shortest path from a node with units left to one that lacks them; the potentials
        move by the distances found, so that reduced costs stay non-negative."""
        # scipy is imported here, not with the module: most assignments never get this far,
        # and its import (about 0.15 s) would delay every `python -m assignor`.
        from scipy.sparse import csr_array
        from scipy.sparse.csgraph import dijkstra

        n = self.node_count
        room, reduced = self.reduced(flows, potentials)
        weight = np.where(room > 0, reduced, np.iinfo(np.int64).max)[self.order]
        best = np.minimum.reduceat(weight, self.starts)
        usable = best != np.iinfo(np.int64).max
        if (best[usable] < 0).any():
            return False
        sources = np.flatnonzero(excess > 0)
        rows = np.concatenate([self.group_tails[usable], np.full(len(sources), n)])
        columns = np.concatenate([self.group_heads[usable], sources])
        data = np.concatenate([best[usable], np.zeros(len(sources), dtype=np.int64)]).astype(np.float64)
        indptr = np.zeros(n + 2, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        # rows are sorted by tail already (groups in (tail, head) order, the source's last)
        graph = csr_array((data, columns.astype(np.int32), np.cumsum(indptr)), shape=(n + 1, n + 1))
        distance, predecessor = dijkstra(graph, indices=n, return_predecessors=True)
        lacking = np.flatnonzero(excess < 0)
        reached = lacking[np.isfinite(distance[lacking])]
        if not len(reached):
            return False
        target = int(reached[np.argmin(distance[reached])])
        far = distance[target]
        path = []
        node = target
        while predecessor[node] != n:
            tail = int(predecessor[node])
            path.append(self._cheapest_arc(tail, node, room, reduced))
            node = tail
        source = node
        arcs = np.array(path, dtype=np.int64)
        amount = min(int(room[arcs].min()) if len(arcs) else 0, int(excess[source]), int(-excess[target]))
        if amount <= 0:
            return False
        forward = arcs[arcs < self.arc_count]
        backward = arcs[arcs >= self.arc_count] - self.arc_count
        np.add.at(flows, forward, amount)
        np.add.at(flows, backward, -amount)
        excess[source] -= amount
        excess[target] += amount
        shift = np.rint(np.minimum(distance[:n], far)).astype(np.int64)
        potentials += shift
        return True

    def _cheapest_arc(self, tail: int, head: int, room: np.ndarray, reduced: np.ndarray) -> int:
        group = int(np.searchsorted(self.pair_keys, tail * (self.node_count + 1) + head))
        stop = self.starts[group + 1] if group + 1 < len(self.starts) else len(self.order)
        members = self.order[self.starts[group]:stop]
        members = members[room[members] > 0]
        return int(members[np.argmin(reduced[members])])
