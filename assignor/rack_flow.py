"""KIP-925 4.B as a min-cost flow whose size grows with tasks x racks, not tasks x clients.

The rack-aware step (``assignor.rack_aware``) hands this module a ``PlacementProblem``: tasks
with their cross-rack partition counts per rack, clients with a rack and a fixed number of
slots (the balanced target's counts), each task's *target* client, *anchor* client (the
client the non-overlap cost of KIP-925 4.B.III refers to: the target with the
high-availability assignor, the previous owner with the sticky one, KIP-925 "Summary") and
*holder* (a client already restoring it, if any).

The price of task t on client c, in the order of priority the solver sees it:

    tie_scale * (traffic * cross[t][rack(c)] + non_overlap * [c != anchor(t)])
      + miss_scale * (2 * [c != target(t)] + [c != holder(t)]) + perturbation

Each scale exceeds every sum of the lower terms, so the misses only break ties between
placements of equal KIP-925 cost, in favour of the balanced target (stability when the
configured non-overlap cost is 0, as for stateless tasks), and the perturbation only ties
between those.

Why the compressed graph is exact (docs/rack-awareness.md has the long form): besides its
*special* clients (target, anchor, holder), every client of rack r prices task t the same,
the *generic* price (``traffic * cross[t][r] + non_overlap``, 3 misses), which depends only
on t's subtopology and cross-rack counts. Tasks alike in every price form a *row*; rows alike
in subtopology and cross-rack counts form a *class*. A class node has one arc per rack at the
generic price. A row whose only special client is its target (anchor and holder none or the
target, as for every task of a fresh group) has a *stay* arc from its class node to its
target; a row with several special clients has a node of its own, fed by its class node, with
an arc to each of them. These direct arcs carry the exact, lower price; a row's stay arc, or
the arc into its node, has the row's size as capacity.

- Every assignment is a flow of the same cost: a task on one of its special clients takes its
  row's direct arc, any other its class's arc to the client's rack.
- Every flow decomposes into an assignment costing at most the flow's cost: each row's tasks
  take the units of its direct arcs in turn (there are enough of them, as the row's size caps
  what its direct arcs carry in all); the class's remaining tasks, as many as its rack arcs'
  units, take those in any pairing, the generic price being each one's price there; and a
  task that reaches one of its special clients through a rack node pays less than the flow
  says.

Hence the optimal costs are equal. ``solve_full`` builds the KIP's own graph (every task to
every client) so that tests and benchmarks can check this on real instances.

The last tie-break, a fixed pseudo-random price in [0, ``PERTURBATION``) per (class, rack) on
rack arcs and per row on its stay arc or the arc into its node, makes the optimum unique
(almost always). A unit of flow crosses at most one perturbed arc, so the perturbations of a
flow sum to less than ``miss_scale``; as the other terms are multiples of ``miss_scale``, a
minimum-cost flow is also minimal without them, and the argument above carries over.

KIP-925 4.B.II (balance_subtopology) adds a (subtopology, client) layer whose arcs into the
client carry the cap ceil(S[j] * C[i] / N). A feasible flow always exists (the KIP's open
question "how to prove this mathematically?"): x[j][i] = S[j] * C[i] / N is a fractional
transportation plan within the caps, and transportation polytopes have integral vertices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from assignor.flow import FUNNEL_PAIRS, FlowGraph, split_exactly

BIG = 1 << 40
UNCAPPED_ROUNDS = 2  # solves of the uncapped relaxation, each guarding the pairs whose caps its direct arcs broke
UNCAPPED_SHARE = 16  # tried when at most 1 row in this many has special clients besides its target,
UNCAPPED_SLACK = 2  # and the caps add up to this many times the tasks (else the relaxation seldom fits)
PERTURBATION = 16  # range of the last tie-break: per (class, rack), and per row
DEAL_PREFIX = 16  # preferences read per dealt task; more only when they are all taken
DEAL_CHUNK = 1 << 14  # (task, client) hashes computed at once: within the CPU's fast caches


@dataclass(frozen=True, slots=True)
class PlacementProblem:
    """One balanced assignment to reshape. Tasks and clients are indices, in sorted order.

    ``cross[t, r]``: input partitions of task t with no replica in rack r. ``slots[c]``: how
    many tasks client c keeps. ``target[t]``/``anchor[t]``: client indices (anchor -1: none).
    ``keys[t]``: the subtopology index whose cap applies, ``caps[k, c]`` its cap on c (None:
    min_traffic, no caps).
    """

    cross: np.ndarray  # (tasks, racks) int64
    client_rack: np.ndarray  # (clients,) int64
    slots: np.ndarray  # (clients,) int64
    target: np.ndarray  # (tasks,) int64
    anchor: np.ndarray  # (tasks,) int64
    traffic_cost: int
    non_overlap_cost: int
    keys: np.ndarray | None = None  # (tasks,) int64
    caps: np.ndarray | None = None  # (keys, clients) int64
    task_ids: np.ndarray | None = None  # (tasks,) uint64, stable ids for rendezvous dealing
    client_ids: np.ndarray | None = None  # (clients,) uint64
    holder: np.ndarray | None = None  # (tasks,) int64: a client already restoring the task, or -1

    @property
    def miss_scale(self) -> int:
        """Weight of one target miss: above every sum of ``PERTURBATION`` terms."""
        return len(self.target) * PERTURBATION + 1

    @property
    def tie_scale(self) -> int:
        """Weight of one unit of KIP-925 cost: above every sum of lower terms."""
        return (3 * len(self.target) + 1) * self.miss_scale

    @property
    def priorities(self) -> tuple[tuple[int, int], ...]:
        """The weights of the costs' priorities, each with the one a first, coarse solve prices it
        at (``FlowGraph``): above a few arcs' lower terms rather than above all of them."""
        return (self.tie_scale, 1 << 16), (self.miss_scale, 1 << 8)

    @property
    def holders(self) -> np.ndarray:
        return self.holder if self.holder is not None else np.full(len(self.target), -1, dtype=np.int64)

    def misses(self, clients: np.ndarray) -> np.ndarray:
        """Second level: 2 per task off its target, 1 per task off the client holding its state.

        The holder term settles ties inside a rack on a client already restoring the task, so
        that a planned warm-up is not re-planned on another client of the same rack next time.
        """
        return 2 * (clients != self.target) + (clients != self.holders)

    def kip_cost(self, assignment: np.ndarray) -> int:
        """KIP-925 4.B.III's cost of an assignment (no tie-break)."""
        tasks = np.arange(len(assignment))
        traffic = self.cross[tasks, self.client_rack[assignment]].sum()
        moved = np.count_nonzero(assignment != self.anchor)
        return int(self.traffic_cost * traffic + self.non_overlap_cost * moved)

    def cost(self, assignment: np.ndarray) -> int:
        """The solver's objective: KIP cost, then overlap with the target as a tie-break."""
        return self.tie_scale * self.kip_cost(assignment) + self.miss_scale * int(self.misses(assignment).sum())

    def cost_matrix(self) -> np.ndarray:
        """Every (task, client) price: what the full formulation needs, tasks x clients."""
        tasks = len(self.target)
        clients = np.arange(len(self.client_rack))
        kip = self.traffic_cost * self.cross[:, self.client_rack]
        kip = kip + self.non_overlap_cost * (clients[None, :] != self.anchor[:, None])
        misses = 2 * (clients[None, :] != self.target[:, None]) + (clients[None, :] != self.holders[:, None])
        return self.tie_scale * kip + self.miss_scale * misses if tasks else kip


def solve_compressed(problem: PlacementProblem, own_nodes: np.ndarray | None = None) -> np.ndarray:
    """The optimal assignment (task index -> client index) on the tasks x racks graph.

    Under balance_subtopology's caps, when few tasks have special clients besides their target
    (a fresh group, stateless tasks) and the caps leave room (many subtopologies), first
    without its (subtopology, client) layer (``_solve_uncapped``): a relaxation with the same
    prices, exact whenever its flow can be dealt within the caps, as it then almost always can;
    else with the layer (``solve_capped``). Tasks moving to an anchor or holder instead often
    meet a full pair, and tight caps often cannot take what the relaxation sends to a rack, so
    those go to the layer at once.
    """
    if not len(problem.target):
        return np.zeros(0, dtype=np.int64)
    keys, _, caps = _caps(problem)
    rows = _Rows(problem, keys)
    if problem.caps is not None and own_nodes is None and UNCAPPED_SHARE * int(rows.several.sum()) <= len(rows.rows) \
            and int(np.asarray(caps).sum()) >= UNCAPPED_SLACK * len(problem.target):
        assignment = _solve_uncapped(problem, rows)
        if assignment is not None:
            return assignment
    return solve_capped(problem, own_nodes, rows)


def solve_capped(problem: PlacementProblem, own_nodes: np.ndarray | None = None, rows: _Rows | None = None
                 ) -> np.ndarray:
    """The optimal assignment (task index -> client index) on the tasks x racks graph.

    Tasks alike in every price (same target, anchor, holder, subtopology and cross-rack counts)
    are interchangeable: they form one *row*. Rows of the same subtopology and cross-rack
    counts form one *class*, priced alike on every client that is special to none of them: one
    node and one arc per rack for all, whatever their special clients. A row whose only special
    client is its target has a stay arc from its class; one with more has a node of its own
    (its tasks can take only one of its direct arcs) fed by its class.

    The (subtopology, client) layer of balance_subtopology has subtopologies x clients nodes.
    When that leaves many pairs without a direct arc, a pair gets a node only where a direct
    arc lands or for the clients of ``own_nodes`` (a mask; by that count when None), and every
    other pair of a rack is reached through one *funnel* per rack: (subtopology, rack) ->
    funnel, at most the pairs' caps in all -> client, at most its pairs' caps in all. A
    relaxation (every flow of the full layer is one of the funnels, at the same cost); the
    funnels' flow is then split per pair within the caps (``split_exactly``), which makes it a
    flow of the full layer at the relaxed optimum, hence optimal. When no split exists, the
    clients the funnels fed get nodes of their own and the graph is solved again; should that
    fail too, the third round is the full layer.
    """
    tasks, racks = problem.cross.shape
    clients = len(problem.client_rack)
    if tasks == 0:
        return np.zeros(0, dtype=np.int64)
    keys, key_count, caps = _caps(problem)
    rows = rows if rows is not None else _Rows(problem, keys)
    graph = FlowGraph(problem.priorities)
    class_nodes = np.asarray(graph.nodes(rows.count))
    # A row with several special clients hangs off its class through a node of its own.
    row_nodes = class_nodes[rows.class_of]
    row_nodes[rows.several] = graph.nodes(int(rows.several.sum()))
    key_rack = np.asarray(graph.nodes(key_count * racks)).reshape(key_count, racks)
    needed = np.zeros((key_count, clients), dtype=bool)  # pairs with a node: a direct arc lands there
    other, third = rows.other, rows.third
    needed[rows.row_key, rows.target] = True
    needed[rows.row_key[other], rows.anchor[other]] = True
    needed[rows.row_key[third], rows.holder[third]] = True
    if own_nodes is None:  # funnels when they would serve many pairs
        own_nodes = np.full(clients, needed.size - int(needed.sum()) < FUNNEL_PAIRS)
    needed |= own_nodes[None, :]
    pair_key, pair_client = np.nonzero(needed)
    key_client = np.full((key_count, clients), -1, dtype=np.int64)
    key_client[pair_key, pair_client] = graph.nodes(len(pair_key))
    client_nodes = np.asarray(graph.nodes(clients))
    sink = graph.node()
    graph.supplies(class_nodes, rows.class_sizes)
    graph.supply(sink, -tasks)
    arcs = rows.arcs(graph, class_nodes, row_nodes, key_rack[rows.class_key], key_client)
    # Rack node -> its clients, then the subtopology cap, then the client's slots.
    pair_caps = np.asarray(caps)[pair_key, pair_client]
    spread = graph.arcs(key_rack[pair_key, problem.client_rack[pair_client]], key_client[pair_key, pair_client],
                        BIG, 0)
    graph.arcs(key_client[pair_key, pair_client], client_nodes[pair_client], pair_caps, 0)
    funnels = _Funnels(graph, problem, key_rack, client_nodes, np.where(needed, 0, caps))
    graph.arcs(client_nodes, sink, problem.slots, 0)
    graph.solve()
    slots_left = np.zeros((key_count, clients), dtype=np.int64)
    slots_left[pair_key, pair_client] = graph.flows(spread)
    fed = funnels.split(graph, slots_left)
    if fed is not None:  # a second round takes the fed clients out of the funnels, a third all of them
        return solve_capped(problem, own_nodes | fed if not own_nodes.any() else np.ones(clients, dtype=bool), rows)
    assignment, via_rack = rows.decode(graph, arcs)
    _deal(problem, keys, via_rack, slots_left, assignment)
    return assignment


def _solve_uncapped(problem: PlacementProblem, rows: _Rows) -> np.ndarray | None:
    """balance_subtopology without its (subtopology, client) layer: rack arcs end at one node
    per rack, direct arcs at the client; classes and rows keep their subtopology, so every
    price and perturbation is the capped graph's. A relaxation: its optimum costs at most the
    capped one, and when its assignment also keeps every cap, it is the capped optimum.

    Direct arcs fix where their tasks go; the rest reach clients through their rack, where any
    pairing of a class's tasks with its rack's free slots costs what the flow says. Those are
    dealt within the caps left (``_deal_within_caps``, as ``_deal`` by rendezvous), or, if that
    greedy pass is stuck, by a split found exactly by a max flow; None when no split exists.
    """
    racks, clients = problem.cross.shape[1], len(problem.client_rack)
    keys, key_count, caps = _caps(problem)
    caps = np.asarray(caps, dtype=np.int64)
    guarded = np.zeros(caps.shape, dtype=bool)
    for _ in range(UNCAPPED_ROUNDS):
        assignment, via_rack, free = _uncapped_round(problem, rows, guarded, caps)
        placed = assignment >= 0
        caps_left = caps.copy()
        np.subtract.at(caps_left, (keys[placed], assignment[placed]), 1)
        over = caps_left < 0
        if not over.any():
            break
        guarded |= over
    else:
        return None
    if _deal_within_caps(problem, keys, via_rack, free, caps_left.copy(), assignment):
        return assignment
    assignment[via_rack >= 0] = -1
    dealt = via_rack >= 0
    supply = np.bincount(keys[dealt] * racks + via_rack[dealt], minlength=key_count * racks)
    pair_key, pair_client = np.nonzero(caps_left)
    units = split_exactly(supply, free, pair_key * racks + problem.client_rack[pair_client], pair_client,
                          caps_left[pair_key, pair_client])
    if units is None:
        return None
    slots_left = np.zeros((key_count, clients), dtype=np.int64)
    slots_left[pair_key, pair_client] = units
    _deal(problem, keys, via_rack, slots_left, assignment)
    return assignment


def _uncapped_round(problem: PlacementProblem, rows: _Rows, guarded: np.ndarray,
                    caps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One solve of ``_solve_uncapped``: direct arcs into a ``guarded`` (subtopology, client)
    pair pass its cap on the way; (assignment by direct arcs, rack of the others, free slots
    per client left for those)."""
    tasks, racks = problem.cross.shape
    clients = len(problem.client_rack)
    graph = FlowGraph(problem.priorities)
    class_nodes = np.asarray(graph.nodes(rows.count))
    row_nodes = class_nodes[rows.class_of]
    row_nodes[rows.several] = graph.nodes(int(rows.several.sum()))
    rack_nodes = np.asarray(graph.nodes(racks))
    client_nodes = np.asarray(graph.nodes(clients))
    key_client = np.tile(client_nodes, (len(caps), 1))
    pair_key, pair_client = np.nonzero(guarded)
    key_client[pair_key, pair_client] = graph.nodes(len(pair_key))
    sink = graph.node()
    graph.supplies(class_nodes, rows.class_sizes)
    graph.supply(sink, -tasks)
    arcs = rows.arcs(graph, class_nodes, row_nodes, np.broadcast_to(rack_nodes, (rows.count, racks)), key_client)
    graph.arcs(key_client[pair_key, pair_client], client_nodes[pair_client], caps[pair_key, pair_client], 0)
    spread = graph.arcs(rack_nodes[problem.client_rack], client_nodes, BIG, 0)
    graph.arcs(client_nodes, sink, problem.slots, 0)
    graph.solve()
    assignment, via_rack = rows.decode(graph, arcs)
    return assignment, via_rack, graph.flows(spread).astype(np.int64)


class _Rows:
    """Tasks grouped into rows and classes (``solve_compressed``), and the arcs that leave them:
    what the capped and the uncapped graphs share."""

    def __init__(self, problem: PlacementProblem, keys: np.ndarray) -> None:
        self.problem = problem
        self.row_of, self.rows, self.sizes = _group(np.column_stack([keys, problem.cross, problem.target,
                                                                     problem.anchor, problem.holders]))
        rows = self.rows
        self.target, self.anchor, self.holder = problem.target[rows], problem.anchor[rows], problem.holders[rows]
        self.row_key, self.row_cross = keys[rows], problem.cross[rows]
        self.class_table = np.column_stack([self.row_key, self.row_cross])
        self.class_of, self.classes, _ = _group(self.class_table)
        self.class_sizes = np.bincount(self.class_of, weights=self.sizes, minlength=len(self.classes)).astype(np.int64)
        self.class_key = self.row_key[self.classes]
        self.count = len(self.classes)
        self.other = (self.anchor >= 0) & (self.anchor != self.target)
        self.third = (self.holder >= 0) & (self.holder != self.target) & (self.holder != self.anchor)
        self.several = self.other | self.third

    def arcs(self, graph: FlowGraph, class_nodes: np.ndarray, row_nodes: np.ndarray, class_racks: np.ndarray,
             key_client: np.ndarray) -> tuple[range, range, range, range]:
        """Rack arcs (class -> ``class_racks[class, rack]``), then the rows' arcs to their special
        clients (-> ``key_client[key, client]``): (rack, target, anchor, holder) arcs."""
        problem, racks = self.problem, self.row_cross.shape[1]
        row_key, row_cross, target, anchor, holder = self.row_key, self.row_cross, self.target, self.anchor, \
            self.holder
        other, third, several, class_of = self.other, self.third, self.several, self.class_of
        # Rack arcs: the price of any client of the rack that is special to none of the class.
        cross = row_cross[self.classes]
        generic = problem.tie_scale * (problem.traffic_cost * cross + problem.non_overlap_cost) \
            + 3 * problem.miss_scale
        generic = generic + _perturbation(_row_hash(self.class_table[self.classes])[:, None], np.arange(1, racks + 1))
        rack_arcs = graph.arcs(np.repeat(class_nodes, racks), class_racks.ravel(),
                               np.repeat(self.class_sizes, racks), generic.ravel())
        # Per row, its perturbation on the one arc all its staying tasks take: the stay arc, or
        # the arc into its own node; then direct arcs to the target and, if other clients, the
        # anchor and the holder, at their exact price.
        perturbation = _perturbation(_row_hash(np.column_stack([row_key, row_cross, target, anchor, holder])), 0)
        graph.arcs(class_nodes[class_of[several]], row_nodes[several], self.sizes[several], perturbation[several])
        stay_price = _price(problem, row_cross, target, anchor, holder, target)
        target_arcs = graph.arcs(row_nodes, key_client[row_key, target], self.sizes,
                                 stay_price + np.where(several, 0, perturbation))
        anchor_arcs = graph.arcs(row_nodes[other], key_client[row_key[other], anchor[other]], self.sizes[other],
                                 _price(problem, row_cross[other], target[other], anchor[other], holder[other],
                                        anchor[other]))
        holder_arcs = graph.arcs(row_nodes[third], key_client[row_key[third], holder[third]], self.sizes[third],
                                 _price(problem, row_cross[third], target[third], anchor[third], holder[third],
                                        holder[third]))
        return rack_arcs, target_arcs, anchor_arcs, holder_arcs

    def decode(self, graph: FlowGraph, arcs: tuple[range, range, range, range]) -> tuple[np.ndarray, np.ndarray]:
        """(assignment of the tasks that take a direct arc, -1 elsewhere; the rack each other task
        reaches its client through, -1 for the former)."""
        rack_arcs, target_arcs, anchor_arcs, holder_arcs = arcs
        row_of, sizes, class_of = self.row_of, self.sizes, self.class_of
        tasks, racks = self.problem.cross.shape
        row_count = len(self.rows)
        to_target = graph.flows(target_arcs)
        to_anchor = np.zeros(row_count, dtype=np.int64)
        to_anchor[self.other] = graph.flows(anchor_arcs)
        to_holder = np.zeros(row_count, dtype=np.int64)
        to_holder[self.third] = graph.flows(holder_arcs)
        to_rack = graph.flows(rack_arcs).reshape(self.count, racks)
        # Each row's tasks, in task order, take its direct flow in turn: target, anchor, holder
        # (all rows at once: a task's place within its row says which arc's flow it takes).
        assignment = np.full(tasks, -1, dtype=np.int64)
        members, place = _places(row_of, sizes)
        row = row_of[members]
        first = to_target[row]
        second = first + to_anchor[row]
        third_end = second + to_holder[row]
        assignment[members] = np.select([place < first, place < second, place < third_end],
                                        [self.target[row], self.anchor[row], self.holder[row]], -1)
        # The rest of each class, in task order, take its rack arcs' flow in rack order: any
        # pairing is exact, as every rack arc prices all the class's tasks alike.
        pool = np.flatnonzero(assignment < 0)
        pool_class = class_of[row_of[pool]]
        pool_members, pool_place = _places(pool_class, np.bincount(pool_class, minlength=self.count))
        rack_ends = np.cumsum(to_rack, axis=1)[pool_class[pool_members]]
        via_rack = np.full(tasks, -1, dtype=np.int64)
        via_rack[pool[pool_members]] = (rack_ends <= pool_place[:, None]).sum(axis=1)
        return assignment, via_rack


class _Funnels:
    """One funnel per rack for the (subtopology, client) pairs without a node of their own
    (``solve_compressed``); ``caps[k, c]`` is a pair's cap where it goes through a funnel, else 0."""

    def __init__(self, graph: FlowGraph, problem: PlacementProblem, key_rack: np.ndarray, client_nodes: np.ndarray,
                 caps: np.ndarray) -> None:
        racks = key_rack.shape[1]
        self.key_racks = racks
        self.pair_key, self.pair_client = np.nonzero(caps)
        self.pair_caps = caps[self.pair_key, self.pair_client]
        self.pair_row = self.pair_key * racks + problem.client_rack[self.pair_client]
        self.into = self.out = None
        if len(self.pair_key):
            by_key_rack = np.bincount(self.pair_row, weights=self.pair_caps,
                                      minlength=key_rack.size).astype(np.int64)
            self.rows = np.flatnonzero(by_key_rack)
            client_caps = np.bincount(self.pair_client, weights=self.pair_caps,
                                      minlength=len(client_nodes)).astype(np.int64)
            self.reached = np.flatnonzero(client_caps)
            funnel = np.asarray(graph.nodes(racks))
            self.into = graph.arcs(key_rack.ravel()[self.rows], funnel[self.rows % racks], by_key_rack[self.rows], 0)
            self.out = graph.arcs(funnel[problem.client_rack[self.reached]], client_nodes[self.reached],
                                  client_caps[self.reached], 0)

    def split(self, graph: FlowGraph, slots: np.ndarray) -> np.ndarray | None:
        """Add the funnels' flow to ``slots[k, c]``, split within the pairs' caps; None when it
        fits, else a mask of the clients the funnels fed (they need nodes of their own)."""
        if self.into is None:
            return None
        supply = np.zeros(slots.shape[0] * self.key_racks, dtype=np.int64)
        supply[self.rows] = graph.flows(self.into)
        demand = np.zeros(slots.shape[1], dtype=np.int64)
        demand[self.reached] = graph.flows(self.out)
        if not supply.any():
            return None
        units = split_exactly(supply, demand, self.pair_row, self.pair_client, self.pair_caps)
        if units is None:
            return demand > 0
        np.add.at(slots, (self.pair_key, self.pair_client), units)
        return None


def _group(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal rows of an int table: (group of each row, first row of each group, group sizes).

    Groups come in lexicographic order of their rows (as ``np.unique(axis=0)``); rows are packed
    into one int64 each when their ranges allow, which sorts far faster.
    """
    low = table.min(axis=0)
    radix = (table.max(axis=0) - low + 1).tolist()
    if math.prod(radix) < 1 << 62:
        weights = np.cumprod([1, *radix[:0:-1]])[::-1]
        code = (table - low) @ np.asarray(weights, dtype=np.int64)
        _, first, group_of, sizes = np.unique(code, return_index=True, return_inverse=True,
                                              return_counts=True)
    else:
        _, first, group_of, sizes = np.unique(table, axis=0, return_index=True, return_inverse=True,
                                              return_counts=True)
    return group_of.ravel(), first, sizes


def _places(group_of: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Items ordered by group, then index; and each one's place within its group."""
    members = np.argsort(group_of, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return members, np.arange(len(group_of)) - starts[group_of[members]]


def _price(problem: PlacementProblem, cross: np.ndarray, target: np.ndarray, anchor: np.ndarray,
           holder: np.ndarray, client: np.ndarray) -> np.ndarray:
    """Solver price, perturbation aside, of rows (cross counts, target, anchor, holder) on clients."""
    kip = problem.traffic_cost * cross[np.arange(len(client)), problem.client_rack[client]]
    kip = kip + problem.non_overlap_cost * (client != anchor)
    return problem.tie_scale * kip + problem.miss_scale * (2 * (client != target) + (client != holder))


def _row_hash(table: np.ndarray) -> np.ndarray:
    """A fixed hash of each row of an int table (no per-process salt, unlike ``hash``)."""
    row_hash = np.zeros(len(table), dtype=np.uint64)
    for column in table.T:
        row_hash = _mix(row_hash * np.uint64(31) + column.astype(np.uint64))
    return row_hash


def _perturbation(row_hash: np.ndarray, salt) -> np.ndarray:
    """A fixed pseudo-random price in [0, PERTURBATION) per (hashed row, salt).

    The last tie-break: among placements equal in KIP cost and target overlap, it makes the
    optimum unique (almost always), so a changed price of one task changes the optimum by one
    cycle through that task, not by re-resolving unrelated ties (KIP-925 4.B.III's aim).
    """
    values = _mix(np.asarray(row_hash, dtype=np.uint64) ^ np.asarray(salt, dtype=np.uint64))
    return (values % np.uint64(PERTURBATION)).astype(np.int64)


def _deal(problem: PlacementProblem, keys: np.ndarray, via_rack: np.ndarray, slots_left: np.ndarray,
          assignment: np.ndarray) -> None:
    """Turn the rack-level flow into clients: any pairing is optimal (module docstring).

    A task whose target (then anchor, then holder) has a slot of its rack node left goes there
    (it then costs less than the flow says). The others, in task order, take the free slot of
    the client they rank highest by rendezvous hashing of (task, client) ids: unlike dealing in
    turns, one task more or less displaces few others, so a small change moves few tasks.
    """
    dealt = np.flatnonzero(via_rack >= 0)
    rack, key = via_rack[dealt], keys[dealt]
    waiting = np.flatnonzero(~_take_specials(problem, dealt, rack, key, slots_left, assignment))
    node = key[waiting] * problem.cross.shape[1] + rack[waiting]  # the (key, rack) node each waits at
    order = np.argsort(node, kind="stable")
    waiting = waiting[order]
    bounds = np.flatnonzero(np.diff(node[order])) + 1
    task_ids = problem.task_ids if problem.task_ids is not None else np.arange(len(keys), dtype=np.uint64)
    client_ids = problem.client_ids if problem.client_ids is not None else np.arange(len(problem.client_rack),
                                                                                      dtype=np.uint64)
    for group in np.split(waiting, bounds) if len(waiting) else ():
        group_key, group_rack, tasks = int(key[group[0]]), int(rack[group[0]]), dealt[group]
        members = np.flatnonzero((problem.client_rack == group_rack) & (slots_left[group_key] > 0))
        free = slots_left[group_key].tolist()
        member_list = members.tolist()
        rows = max(1, DEAL_CHUNK // len(members))
        for start in range(0, len(tasks), rows):
            chunk = tasks[start:start + rows]
            hashes = _mix(task_ids[chunk][:, None] * np.uint64(0x9E3779B97F4A7C15)
                          ^ client_ids[members][None, :])
            ranked = _ascending_columns(~hashes)  # highest hash first
            for row, (task, preference) in enumerate(zip(chunk.tolist(), ranked[:, :DEAL_PREFIX].tolist(),
                                                         strict=True)):
                client = _first_free(free, member_list, preference)
                if client < 0:
                    client = _first_free(free, member_list, ranked[row, DEAL_PREFIX:].tolist())
                free[client] -= 1
                assignment[task] = client
        slots_left[group_key] = free


def _deal_within_caps(problem: PlacementProblem, keys: np.ndarray, via_rack: np.ndarray, free: np.ndarray,
                      caps_left: np.ndarray, assignment: np.ndarray) -> bool:
    """``_deal`` where a client's ``free`` slots are shared by every subtopology, each within its
    ``caps_left[key, client]`` (the uncapped graph). A task whose target (then anchor, then
    holder) has room in its rack goes there; the others, in task order within their rack, take
    the client they rank highest by rendezvous hashing among those with room for them. False
    when a task finds none (greedy can be stuck where a split exists).
    """
    dealt = np.flatnonzero(via_rack >= 0)
    rack, key = via_rack[dealt], keys[dealt]
    client_free = free.tolist()
    waiting = np.flatnonzero(~_take_specials(problem, dealt, rack, key, caps_left, assignment, client_free))
    order = np.argsort(rack[waiting], kind="stable")
    waiting = waiting[order]
    bounds = np.flatnonzero(np.diff(rack[waiting])) + 1
    task_ids = problem.task_ids if problem.task_ids is not None else np.arange(len(keys), dtype=np.uint64)
    client_ids = problem.client_ids if problem.client_ids is not None else np.arange(len(problem.client_rack),
                                                                                      dtype=np.uint64)
    left = caps_left.tolist()
    for group in np.split(waiting, bounds) if len(waiting) else ():
        tasks = dealt[group]
        members = np.flatnonzero((problem.client_rack == rack[group[0]]) & (free > 0))
        member_list = members.tolist()
        rows = max(1, DEAL_CHUNK // max(1, len(members)))
        for start in range(0, len(tasks), rows):
            chunk = tasks[start:start + rows]
            hashes = _mix(task_ids[chunk][:, None] * np.uint64(0x9E3779B97F4A7C15) ^ client_ids[members][None, :])
            ranked = _ascending_columns(~hashes)  # highest hash first
            for row, (task, task_key) in enumerate(zip(chunk.tolist(), keys[chunk].tolist(), strict=True)):
                room = left[task_key]
                client = _first_with_room(client_free, room, member_list, ranked[row, :DEAL_PREFIX].tolist())
                if client < 0:
                    client = _first_with_room(client_free, room, member_list, ranked[row, DEAL_PREFIX:].tolist())
                    if client < 0:
                        return False
                client_free[client] -= 1
                room[client] -= 1
                assignment[task] = client
    return True


def _first_with_room(free: list[int], room: list[int], members: list[int], positions: list[int]) -> int:
    """The first of ``members[positions]`` with a free slot and room under its cap, or -1."""
    for position in positions:
        client = members[position]
        if free[client] > 0 and room[client] > 0:
            return client
    return -1


def _take_specials(problem: PlacementProblem, dealt: np.ndarray, rack: np.ndarray, key: np.ndarray,
                   slots_left: np.ndarray, assignment: np.ndarray, client_free: list[int] | None = None) -> np.ndarray:
    """Place, in task order, dealt tasks on a special client with a slot left in their rack node
    (and, given ``client_free``, a free slot on the client, as ``_deal_within_caps`` shares them).

    Returns which of ``dealt`` were placed. Only a task that sees such a slot before any is
    taken can get one (slots only fill up), so the loop visits those alone.
    """
    specials = np.column_stack([problem.target[dealt], problem.anchor[dealt], problem.holders[dealt]])
    open_slot = ((specials >= 0) & (problem.client_rack[specials] == rack[:, None])
                 & (slots_left[key[:, None], specials] > 0))
    candidates = np.flatnonzero(open_slot.any(axis=1))
    client_rack = problem.client_rack.tolist()
    left = slots_left.tolist()
    placed = np.zeros(len(dealt), dtype=bool)
    rows = zip(candidates.tolist(), rack[candidates].tolist(), key[candidates].tolist(),
               specials[candidates].tolist(), strict=True)
    for index, task_rack, task_key, task_specials in rows:
        for special in task_specials:
            if special >= 0 and client_rack[special] == task_rack and left[task_key][special] > 0 \
                    and (client_free is None or client_free[special] > 0):
                left[task_key][special] -= 1
                if client_free is not None:
                    client_free[special] -= 1
                assignment[dealt[index]] = special
                placed[index] = True
                break
    slots_left[...] = left
    return placed


def _first_free(free: list[int], members: list[int], positions: list[int]) -> int:
    """The first of ``members[positions]`` with a free slot, or -1."""
    for position in positions:
        client = members[position]
        if free[client] > 0:
            return client
    return -1


def _ascending_columns(scores: np.ndarray) -> np.ndarray:
    """Per row of a uint64 matrix, its columns by ascending score, ties by column.

    Scores lose their lowest bits to the column index, so that one value sort (far faster than
    an argsort) yields the order: two scores equal but in those bits count as tied.
    """
    bits = max(1, (scores.shape[1] - 1).bit_length())
    low = np.uint64((1 << bits) - 1)
    keyed = (scores & ~low) | np.arange(scores.shape[1], dtype=np.uint64)
    keyed.sort(axis=1)
    return keyed & low


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fixed, well-spread hash (no per-process salt, unlike ``hash``)."""
    values = values.astype(np.uint64)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (values ^ (values >> np.uint64(31))) >> np.uint64(1)


def _caps(problem: PlacementProblem) -> tuple[np.ndarray, int, np.ndarray]:
    """Per-task cap keys, their number, and caps[key, client] (min_traffic: the slots, never binding)."""
    tasks = len(problem.target)
    keys = problem.keys if problem.keys is not None else np.zeros(tasks, dtype=np.int64)
    key_count = int(keys.max()) + 1
    caps = problem.caps if problem.caps is not None else np.broadcast_to(problem.slots, (key_count, len(problem.slots)))
    return keys, key_count, caps


def solve_full(problem: PlacementProblem) -> np.ndarray:
    """KIP-925's own graph: every task to every client (or to every (subtopology, client)).

    tasks x clients arcs: for tests and benchmark optimality gaps, not for production.
    """
    tasks, _ = problem.cross.shape
    clients = len(problem.client_rack)
    if tasks == 0:
        return np.zeros(0, dtype=np.int64)
    keys, key_count, caps = _caps(problem)
    graph = FlowGraph(problem.priorities)
    task_nodes = np.asarray(graph.nodes(tasks))
    key_client = np.asarray(graph.nodes(key_count * clients)).reshape(key_count, clients)
    client_nodes = np.asarray(graph.nodes(clients))
    sink = graph.node()
    graph.supplies(task_nodes, 1)
    graph.supply(sink, -tasks)
    arcs = graph.arcs(np.repeat(task_nodes, clients), key_client[keys].ravel(), 1, problem.cost_matrix().ravel())
    graph.arcs(key_client.ravel(), np.tile(client_nodes, key_count), np.asarray(caps).ravel(), 0)
    graph.arcs(client_nodes, sink, problem.slots, 0)
    graph.solve()
    return graph.flows(arcs).reshape(tasks, clients).argmax(axis=1).astype(np.int64)


def subtopology_caps(keys: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """KIP-925 4.B.II: at most ceil(S[j] * C[i] / N) tasks of subtopology j on client i."""
    sizes = np.bincount(keys)
    total = int(slots.sum())
    if total == 0:
        return np.zeros((len(sizes), len(slots)), dtype=np.int64)
    return -(-(sizes[:, None] * slots[None, :]) // total)


def index_of(values: Sequence[str]) -> dict[str, int]:
    return {value: index for index, value in enumerate(values)}
