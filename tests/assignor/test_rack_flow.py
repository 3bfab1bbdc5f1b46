"""The tasks x racks flow reaches the optimum of KIP-925's full graph and of brute force.

Costs are recomputed here from the raw instance (never with ``PlacementProblem.cost``), so
each check compares an optimiser against an independent price list.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import rack_flow
from assignor.rack_flow import PlacementProblem, _ascending_columns, solve_compressed, solve_full


def _price(instance: dict, task: int, client: int) -> tuple[int, int]:
    """(KIP-925 4.B.III cost, misses) of one task on one client.

    Misses, the solver's tie-break: 2 off the task's target, 1 off the client already
    restoring it (always 1 for a task that has none).
    """
    kip = instance["traffic"] * instance["cross"][task][instance["client_rack"][client]]
    kip += instance["non_overlap"] * (client != instance["anchor"][task])
    holder = instance.get("holder", [-1] * len(instance["target"]))[task]
    return kip, 2 * int(client != instance["target"][task]) + int(client != holder)


def _total(instance: dict, assignment) -> tuple[int, int]:
    prices = [_price(instance, t, c) for t, c in enumerate(assignment)]
    return sum(p[0] for p in prices), sum(p[1] for p in prices)


def _feasible(instance: dict, assignment) -> bool:
    clients = len(instance["client_rack"])
    if [list(assignment).count(c) for c in range(clients)] != instance["slots"]:
        return False
    if instance["caps"] is None:
        return True
    for key in set(instance["keys"]):
        for client in range(clients):
            held = sum(1 for t, c in enumerate(assignment) if c == client and instance["keys"][t] == key)
            if held > instance["caps"][key][client]:
                return False
    return True


@st.composite
def instances(draw, max_tasks: int = 24, max_clients: int = 7, max_racks: int = 4, max_keys: int = 3):
    tasks = draw(st.integers(1, max_tasks))
    clients = draw(st.integers(1, max_clients))
    racks = draw(st.integers(1, max_racks))
    # Tasks often share cross-rack counts (one class of the compressed graph, many targets);
    # now and then counts are wide, so rows no longer pack into one integer.
    high = draw(st.sampled_from([3, 3, 3, 1 << 20]))
    pool = [[draw(st.integers(0, high)) for _ in range(racks)] for _ in range(draw(st.integers(1, 4)))]
    cross = [list(draw(st.sampled_from(pool))) for _ in range(tasks)]
    client_rack = [draw(st.integers(0, racks - 1)) for _ in range(clients)]
    target = [draw(st.integers(0, clients - 1)) for _ in range(tasks)]
    # anchor: the target (high availability), another client or none (sticky's previous owner)
    anchor = [draw(st.sampled_from([t, -1, draw(st.integers(0, clients - 1))])) for t in target]
    # holder: none, the target or another client (a previous standby or warm-up)
    holder = [draw(st.sampled_from([-1, t, draw(st.integers(0, clients - 1))])) for t in target]
    slots = [target.count(c) for c in range(clients)]
    caps = keys = None
    if draw(st.booleans()):
        key_count = draw(st.integers(1, max_keys))
        keys = [draw(st.integers(0, key_count - 1)) for _ in range(tasks)]
        used = sorted(set(keys))
        keys = [used.index(k) for k in keys]
        sizes = [keys.count(k) for k in range(len(used))]
        caps = [[math.ceil(size * slots[c] / tasks) for c in range(clients)] for size in sizes]
    return {
        "cross": cross, "client_rack": client_rack, "target": target, "anchor": anchor, "holder": holder,
        "slots": slots, "traffic": draw(st.integers(0, 10)), "non_overlap": draw(st.integers(0, 10)),
        "keys": keys, "caps": caps,
    }


def _problem(instance: dict) -> PlacementProblem:
    as_array = lambda values: None if values is None else np.array(values, dtype=np.int64)  # noqa: E731
    return PlacementProblem(
        cross=as_array(instance["cross"]), client_rack=as_array(instance["client_rack"]),
        slots=as_array(instance["slots"]), target=as_array(instance["target"]), anchor=as_array(instance["anchor"]),
        traffic_cost=instance["traffic"], non_overlap_cost=instance["non_overlap"],
        keys=as_array(instance["keys"]), caps=as_array(instance["caps"]),
        holder=as_array(instance.get("holder")),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_compressed_graph_matches_the_full_bipartite_graph(instance):
    problem = _problem(instance)
    compressed = solve_compressed(problem).tolist()
    full = solve_full(problem).tolist()
    assert _feasible(instance, compressed)
    assert _feasible(instance, full)
    assert _total(instance, compressed) == _total(instance, full)
    assert solve_compressed(_problem(instance)).tolist() == compressed  # deterministic


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_tasks=60, max_clients=16, max_racks=2))
def test_compressed_graph_matches_the_full_bipartite_graph_when_dealing_looks_past_its_prefix(instance):
    """Dealing with 2 preferences read up front, 24 hashes at a time: every path of it runs."""
    problem = _problem(instance)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rack_flow, "DEAL_PREFIX", 2)
        patch.setattr(rack_flow, "DEAL_CHUNK", 24)
        compressed = solve_compressed(problem).tolist()
    assert _feasible(instance, compressed)
    assert _total(instance, compressed) == _total(instance, solve_full(problem).tolist())
    assert solve_compressed(problem).tolist() == compressed  # the prefix never changes the deal


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_keys=12))
def test_funnelled_layer_matches_the_full_bipartite_graph(instance):
    """Every (subtopology, client) pair without a direct arc behind its rack's funnel (as on large
    groups, forced here from the first round; few or many subtopologies): same optimum."""
    problem = _problem(instance)
    funnelled = solve_compressed(problem, own_nodes=np.zeros(len(instance["client_rack"]), dtype=bool)).tolist()
    assert _feasible(instance, funnelled)
    assert _total(instance, funnelled) == _total(instance, solve_full(problem).tolist())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_keys=12))
def test_uncapped_relaxation_matches_the_full_bipartite_graph(instance):
    """balance_subtopology tried first without its (subtopology, client) layer, whatever the
    tasks' special clients and the caps' room (in production only when few tasks have special
    clients besides the target and the caps add up to twice the tasks): the
    relaxation, its guarded re-solve, its dealing within the caps or its split, or the layer
    when none fits, reach the same optimum."""
    problem = _problem(instance)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rack_flow, "UNCAPPED_SHARE", len(instance["target"]) + 1)
        patch.setattr(rack_flow, "UNCAPPED_SLACK", 0)
        relaxed = solve_compressed(problem).tolist()
    assert _feasible(instance, relaxed)
    assert _total(instance, relaxed) == _total(instance, solve_full(problem).tolist())


def test_uncapped_relaxation_answers_a_fresh_group():
    """Six tasks of two subtopologies, each on its target, two of them reading a partition only
    rack 1 holds: each trades places with the task of its subtopology in rack 1 (KIP cost 2 + 2),
    within the caps, without the (subtopology, client) layer."""
    instance = {"cross": [[1, 0], [0, 0], [0, 0], [1, 0], [0, 0], [0, 0]], "client_rack": [0, 0, 1, 1],
                "target": [0, 1, 2, 0, 1, 3], "anchor": [0, 1, 2, 0, 1, 3], "holder": [-1] * 6,
                "slots": [2, 2, 1, 1], "traffic": 10, "non_overlap": 1, "keys": [0, 0, 0, 1, 1, 1],
                "caps": [[1, 1, 1, 1], [1, 1, 1, 1]]}
    problem = _problem(instance)
    relaxed = rack_flow._solve_uncapped(problem, rack_flow._Rows(problem, problem.keys))
    assert relaxed is not None
    assert _feasible(instance, relaxed.tolist())
    assert _total(instance, relaxed.tolist()) == _total(instance, solve_full(problem).tolist()) == (4, 14)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances(max_tasks=6, max_clients=3))
def test_compressed_graph_matches_brute_force(instance):
    clients = len(instance["client_rack"])
    best = min(
        _total(instance, assignment)
        for assignment in itertools.product(range(clients), repeat=len(instance["target"]))
        if _feasible(instance, assignment)
    )
    assert _total(instance, solve_compressed(_problem(instance)).tolist()) == best


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        pytest.param(
            # KIP-925 4.B.II "Example": C1, C2, C3 take 1, 2, 3 tasks; caps 1, 1, 2.
            {"cross": [[0, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 0, 1]],
             "client_rack": [0, 1, 2], "target": [0, 1, 1, 2, 2, 2], "anchor": [0, 1, 1, 2, 2, 2],
             "slots": [1, 2, 3], "traffic": 10, "non_overlap": 1, "keys": [0, 0, 0, 1, 1, 1],
             "caps": [[1, 1, 2], [1, 1, 2]]},
            [0, 1, 2, 2, 2, 1],
            id="kip925-4B2-example",
        ),
        pytest.param(
            # A swap saves 2 x 10 traffic for 2 x 1 non-overlap: taken.
            {"cross": [[0, 1], [1, 0]], "client_rack": [0, 1], "target": [1, 0], "anchor": [1, 0], "slots": [1, 1],
             "traffic": 10, "non_overlap": 1, "keys": None, "caps": None},
            [0, 1],
            id="traffic-beats-overlap",
        ),
        pytest.param(
            # Sticky defaults (1 / 10): the same swap costs more than it saves: kept.
            {"cross": [[0, 1], [1, 0]], "client_rack": [0, 1], "target": [1, 0], "anchor": [1, 0], "slots": [1, 1],
             "traffic": 1, "non_overlap": 10, "keys": None, "caps": None},
            [1, 0],
            id="overlap-beats-traffic",
        ),
        pytest.param(
            # Non-overlap 0 (stateless): equal traffic everywhere, the target wins the tie.
            {"cross": [[1, 1], [1, 1], [0, 0]], "client_rack": [0, 1], "target": [1, 0, 1], "anchor": [1, 0, 1],
             "slots": [1, 2], "traffic": 1, "non_overlap": 0, "keys": None, "caps": None},
            [1, 0, 1],
            id="ties-keep-the-target",
        ),
    ],
)
def test_worked_placements(instance, expected):
    assert solve_compressed(_problem(instance)).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 12), columns=st.integers(1, 300), high=st.sampled_from([2, 5, 1 << 20, 1 << 64]),
       seed=st.integers(0, 2**32 - 1))
def test_ascending_columns_sort_by_score_then_column(rows, columns, high, seed):
    """Dealing's preference order: scores without the bits that hold a column index, ties by column."""
    scores = np.random.default_rng(seed).integers(0, high, size=(rows, columns), dtype=np.uint64)
    bits = max(1, (columns - 1).bit_length())
    for row, order in zip(scores.tolist(), _ascending_columns(scores).tolist(), strict=True):
        assert order == sorted(range(columns), key=lambda column: (row[column] >> bits, column))
