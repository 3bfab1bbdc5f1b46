"""KIP-925 4.B as a min-cost flow whose size grows with tasks x racks, not tasks x clients.

The rack-aware step (``assignor.rack_aware``) hands this module a ``PlacementProblem``: tasks
with their cross-rack partition counts per rack, clients with a rack and a fixed number of
slots (the balanced target's counts), each task's *target* client and *anchor* client (the
client the non-overlap cost of KIP-925 4.B.III refers to: the target with the
high-availability assignor, the previous owner with the sticky one, KIP-925 "Summary").

The price of task t on client c, in the order of priority the solver sees it:

    TIE_SCALE * (traffic * cross[t][rack(c)] + non_overlap * [c != anchor(t)]) + [c != target(t)]

``TIE_SCALE`` exceeds the number of tasks, so the last term only breaks ties between
placements of equal KIP-925 cost, in favour of the balanced target (stability when the
configured non-overlap cost is 0, as for stateless tasks).

Why the compressed graph is exact (docs/rack-awareness.md has the long form): besides its
target and anchor, every client of rack r prices task t the same, so a task needs one arc
per rack (at that common price) plus one direct arc per special client (at its exact, lower
price). Every assignment of the full bipartite graph is a flow here of the same cost, and
every flow here decomposes into an assignment whose cost is at most the flow's (a task that
reaches its own special client through the rack node pays less than the flow says). Hence
the optimal costs are equal. ``solve_full`` builds the KIP's own graph (every task to every
client) so that tests and benchmarks can check this on real instances.

KIP-925 4.B.II (balance_subtopology) adds a (subtopology, client) layer whose arcs into the
client carry the cap ceil(S[j] * C[i] / N). A feasible flow always exists (the KIP's open
question "how to prove this mathematically?"): x[j][i] = S[j] * C[i] / N is a fractional
transportation plan within the caps, and transportation polytopes have integral vertices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from assignor.flow import FlowGraph

BIG = 1 << 40
PERTURBATION = 16  # range of the last, per-(task class, rack) tie-break


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


def solve_compressed(problem: PlacementProblem) -> np.ndarray:
    """The optimal assignment (task index -> client index) on the tasks x racks graph.

    Tasks alike in every price (same target, anchor, subtopology and cross-rack counts) are
    interchangeable, so they share one node whose supply is their number: the graph shrinks
    further wherever tasks repeat, without changing the optimum.
    """
    tasks, racks = problem.cross.shape
    clients = len(problem.client_rack)
    if tasks == 0:
        return np.zeros(0, dtype=np.int64)
    keys, key_count, caps = _caps(problem)
    table = np.column_stack([problem.target, problem.anchor, problem.holders, keys, problem.cross])
    classes, of_class, sizes = np.unique(table, axis=0, return_inverse=True, return_counts=True)
    of_class = of_class.ravel()
    target, anchor, holder, class_key = classes[:, 0], classes[:, 1], classes[:, 2], classes[:, 3]
    cross = classes[:, 4:]
    count = len(classes)
    scale = problem.tie_scale
    graph = FlowGraph()
    class_nodes = np.asarray(graph.nodes(count))
    key_rack = np.asarray(graph.nodes(key_count * racks)).reshape(key_count, racks)
    key_client = np.asarray(graph.nodes(key_count * clients)).reshape(key_count, clients)
    client_nodes = np.asarray(graph.nodes(clients))
    sink = graph.node()
    graph.supplies(class_nodes, sizes)
    graph.supply(sink, -tasks)

    # Rack arcs: the price of any client of the rack that is neither target nor anchor.
    generic = scale * (problem.traffic_cost * cross + problem.non_overlap_cost) + 3 * problem.miss_scale
    generic = generic + _perturbation(classes, racks)
    rack_arcs = graph.arcs(np.repeat(class_nodes, racks), key_rack[class_key].ravel(), np.repeat(sizes, racks),
                           generic.ravel())
    # Direct arcs to the target and, if another client, the anchor, at their exact price.
    target_arcs = graph.arcs(class_nodes, key_client[class_key, target], sizes,
                             _price(problem, cross, target, anchor, holder, target))
    other = (anchor >= 0) & (anchor != target)
    anchor_arcs = graph.arcs(class_nodes[other], key_client[class_key[other], anchor[other]], sizes[other],
                             _price(problem, cross[other], target[other], anchor[other], holder[other], anchor[other]))
    third = (holder >= 0) & (holder != target) & (holder != anchor)
    holder_arcs = graph.arcs(class_nodes[third], key_client[class_key[third], holder[third]], sizes[third],
                             _price(problem, cross[third], target[third], anchor[third], holder[third], holder[third]))
    # Rack node -> its clients, then the subtopology cap, then the client's slots.
    spread = graph.arcs(key_rack[:, problem.client_rack].ravel(), key_client.ravel(), BIG, 0)
    graph.arcs(key_client.ravel(), np.tile(client_nodes, key_count), np.asarray(caps).ravel(), 0)
    graph.arcs(client_nodes, sink, problem.slots, 0)
    graph.solve()

    to_target = graph.flows(target_arcs)
    to_anchor = np.zeros(count, dtype=np.int64)
    to_anchor[other] = graph.flows(anchor_arcs)
    to_holder = np.zeros(count, dtype=np.int64)
    to_holder[third] = graph.flows(holder_arcs)
    to_rack = graph.flows(rack_arcs).reshape(count, racks)
    # Each class's tasks, in task order, take its flow in turn: target, anchor, holder, then
    # the rack arcs in rack order (all classes at once: a task's place within its class says
    # which arc's flow it takes).
    assignment = np.full(tasks, -1, dtype=np.int64)
    via_rack = np.full(tasks, -1, dtype=np.int64)
    members = np.argsort(of_class, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    cls = of_class[members]
    place = np.arange(tasks) - bounds[cls]
    first = to_target[cls]
    second = first + to_anchor[cls]
    third_end = second + to_holder[cls]
    assignment[members] = np.select([place < first, place < second, place < third_end],
                                    [target[cls], anchor[cls], holder[cls]], -1)
    rest = place >= third_end
    rack_ends = np.cumsum(to_rack, axis=1)[cls[rest]]
    via_rack[members[rest]] = (rack_ends <= (place[rest] - third_end[rest])[:, None]).sum(axis=1)
    slots_left = graph.flows(spread).reshape(key_count, clients).copy()
    _deal(problem, keys, via_rack, slots_left, assignment)
    return assignment


def _price(problem: PlacementProblem, cross: np.ndarray, target: np.ndarray, anchor: np.ndarray,
           holder: np.ndarray, client: np.ndarray) -> np.ndarray:
    """Exact solver price of rows (cross counts, target, anchor) on the given clients."""
    kip = problem.traffic_cost * cross[np.arange(len(client)), problem.client_rack[client]]
    kip = kip + problem.non_overlap_cost * (client != anchor)
    return problem.tie_scale * kip + problem.miss_scale * (2 * (client != target) + (client != holder))


def _perturbation(classes: np.ndarray, racks: int) -> np.ndarray:
    """A fixed pseudo-random price in [0, PERTURBATION) per (task class, rack).

    The last tie-break: among placements equal in KIP cost and target overlap, it makes the
    optimum unique (almost always), so a changed price of one task changes the optimum by one
    cycle through that task, not by re-resolving unrelated ties (KIP-925 4.B.III's aim).
    """
    row_hash = np.zeros(len(classes), dtype=np.uint64)
    for column in classes.T:
        row_hash = _mix(row_hash * np.uint64(31) + column.astype(np.uint64))
    values = _mix(row_hash[:, None] ^ (np.arange(racks, dtype=np.uint64)[None, :] + np.uint64(1)))
    return (values % np.uint64(PERTURBATION)).astype(np.int64)


def _deal(problem: PlacementProblem, keys: np.ndarray, via_rack: np.ndarray, slots_left: np.ndarray,
          assignment: np.ndarray) -> None:
    """Turn the rack-level flow into clients: any pairing is optimal (module docstring).

    A task whose target (then anchor) has a slot of its rack node left goes there (it then
    costs less than the flow says). The others, in task order, take the free slot of the
    client they rank highest by rendezvous hashing of (task, client) ids: unlike dealing in
    turns, one task more or less displaces few others, so a small change moves few tasks.
    """
    waiting: dict[tuple[int, int], list[int]] = {}
    dealt = np.flatnonzero(via_rack >= 0)
    client_rack = problem.client_rack.tolist()
    left = slots_left.tolist()
    for task, rack, key, *specials in zip(dealt.tolist(), via_rack[dealt].tolist(), keys[dealt].tolist(),
                                          problem.target[dealt].tolist(), problem.anchor[dealt].tolist(),
                                          problem.holders[dealt].tolist(), strict=True):
        for special in specials:
            if special >= 0 and client_rack[special] == rack and left[key][special] > 0:
                left[key][special] -= 1
                assignment[task] = special
                break
        else:
            waiting.setdefault((key, rack), []).append(task)
    slots_left[...] = left
    task_ids = problem.task_ids if problem.task_ids is not None else np.arange(len(keys), dtype=np.uint64)
    client_ids = problem.client_ids if problem.client_ids is not None else np.arange(len(problem.client_rack),
                                                                                      dtype=np.uint64)
    for (key, rack), tasks in sorted(waiting.items()):
        members = np.flatnonzero((problem.client_rack == rack) & (slots_left[key] > 0))
        order = np.argsort(-_mix(task_ids[tasks][:, None] * np.uint64(0x9E3779B97F4A7C15)
                                 ^ client_ids[members][None, :]), axis=1, kind="stable")
        free = slots_left[key].tolist()
        member_list = members.tolist()
        for task, preference in zip(tasks, order.tolist(), strict=True):
            for position in preference:
                client = member_list[position]
                if free[client] > 0:
                    free[client] -= 1
                    assignment[task] = client
                    break
        slots_left[key] = free


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
    graph = FlowGraph()
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
