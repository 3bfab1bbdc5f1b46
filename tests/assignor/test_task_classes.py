"""A task class alone (``assignor.target._TaskClasses``: a task with more special clients than
units) is built and decoded without the shared classes' run search: its special clients come
sorted from ``add``, one arc each, and each arc carries at most one of its units. Those
shortcuts must give the arcs, in the order, and the decomposition the general path gives."""

import numpy as np

from assignor.flow import FlowGraph
from assignor.model import TaskId
from assignor.target import _TaskClasses


class _Pairs:
    """Stands in for ``_SubtopologyHubs``: one node per (key, client), made on first use."""

    def __init__(self, graph: FlowGraph) -> None:
        self.graph, self.nodes = graph, {}

    def node(self, key, client: str) -> int:
        if (key, client) not in self.nodes:
            self.nodes[key, client] = self.graph.node()
        return self.nodes[key, client]


def _built(units: int):
    graph = FlowGraph()
    pairs = _Pairs(graph)
    entry = graph.node()
    classes = _TaskClasses(units=units)
    alone, shared = TaskId(0, 0), TaskId(0, 1)
    classes.add([(alone, 0, entry, 100, {"c3": 5, "c1": 7, "c2": 5}, None),
                 (shared, 0, entry, 100, {"c2": 5}, None)])
    classes.build(graph, pairs)
    tails, heads, capacities, costs = graph._arrays()
    node = int(tails[np.flatnonzero(heads == entry)[0]])  # the class alone comes first
    out = np.flatnonzero(tails == node)
    return graph, pairs, classes, (alone, shared), (entry, out, tails, heads, capacities, costs)


def test_a_class_alone_has_one_arc_per_special_client_in_client_order():
    _, pairs, _, _, (entry, out, _, heads, capacities, costs) = _built(units=2)
    assert heads[out].tolist() == [entry, pairs.nodes[0, "c1"], pairs.nodes[0, "c2"], pairs.nodes[0, "c3"]]
    assert capacities[out].tolist() == [2, 1, 1, 1]
    assert costs[out].tolist() == [100, 7, 5, 5]


def test_a_class_alone_decodes_to_the_clients_its_arcs_carry():
    graph, _, classes, (alone, shared), (_, out, tails, _, _, costs) = _built(units=2)
    for carried, expected, hub in (([1, 2], ["c1", "c2"], False), ([3], ["c3"], True), ([], [], True)):
        flows = np.zeros(len(tails), dtype=np.int64)
        flows[out[carried]] = 1
        flows[out[0]] = 2 - len(carried)
        graph._keep(flows, costs)
        pick_tasks, pick_clients, hub_tasks, short = classes.decode(graph)
        assert [client for task, client in zip(pick_tasks, pick_clients, strict=True) if task == alone] == expected
        assert (alone in hub_tasks[0]) == hub
        assert short.get(alone) == (2 - len(carried) if 0 < len(carried) < 2 else None)
