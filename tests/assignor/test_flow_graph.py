"""assignor.flow.FlowGraph: arcs added one by one and in bulk keep the ids they were given, and
the solve's start is computed only for graphs large enough to be completed from it."""

from __future__ import annotations

import numpy as np
import pytest

from assignor import warm_start
from assignor.flow import FlowError, FlowGraph


def test_single_and_bulk_arcs_keep_their_ids_through_the_solve():
    """Three sources, each with one unit, to a sink through arcs of distinct prices: single
    arcs, a bulk call with scalars broadcast, single arcs again. Each unit takes the cheapest
    arc out of its source, which the ids returned must name."""
    graph = FlowGraph()
    sources, sink = list(graph.nodes(3)), graph.node()
    dear = graph.arc(sources[0], sink, 1, 9)
    cheap = graph.arcs(sources, sink, 1, np.array([1, 2, 3]))
    dearer = [graph.arc(source, sink, 1, 8) for source in sources[1:]]
    for source in sources:
        graph.supply(source, 1)
    graph.supply(sink, -3)

    assert graph.arc_count == 6
    assert graph.solve() == 1 + 2 + 3
    assert graph.flows(cheap).tolist() == [1, 1, 1]
    assert graph.flow(dear) == 0 and [graph.flow(arc) for arc in dearer] == [0, 0]


def test_bulk_columns_of_different_lengths_are_refused():
    graph = FlowGraph()
    with pytest.raises(FlowError, match="lengths"):
        graph.arcs(np.arange(2), np.arange(3), 1, 0)


@pytest.mark.parametrize("arcs", [99, 100])
def test_the_start_is_computed_only_for_a_graph_large_enough_to_complete(arcs, monkeypatch):
    """A chain of ``arcs`` unit arcs from a source to a sink; the start puts the unit on the
    first arc. Below ``MIN_ARCS`` (100 here; the suite's conftest lowers it to 0) OR-Tools
    solves from scratch without asking for the start."""
    monkeypatch.setattr(warm_start, "MIN_ARCS", 100)
    graph = FlowGraph()
    nodes = list(graph.nodes(arcs + 1))
    first = graph.arcs(nodes[:-1], nodes[1:], 1, 1)[0]
    graph.supply(nodes[0], 1)
    graph.supply(nodes[-1], -1)
    asked = []

    def start():
        asked.append(True)
        return [first], [1]

    assert graph.solve(start) == arcs
    assert asked == ([True] if arcs >= 100 else [])
