"""KIP-925 rack-aware placement and KIP-708 tag-aware standbys, between target and placement.

Both assignors compute a balanced target (``assignor.target``), then call, in the KIP's
order (KIP-925 section 4, constraint 2: rack awareness shapes steps 1-4, before warm-ups):

1. ``optimize_actives``: reshape the active target to cut cross-rack traffic, keeping every
   client's count of actives and of stateful actives (a min-cost flow, ``assignor.rack_flow``);
2. ``optimize_standbys``: spread standbys over racks or client tags, then trade them for less
   traffic (greedy swaps, KIP-925 C.I; ``assignor.rack_standby``).

The high-availability assignor then places actives on caught-up clients and plans warm-ups;
rack awareness never undoes that (downtime beats traffic). Rack awareness stands down with a
reason (KIP-925 section 6) when a client has no rack, an input partition lists no racks, or no
placement changes any cost. ``RackAwareReport.cross_rack_*`` counts active tasks only: input
partitions read by an active in a rack holding no replica of them, before and after (standby
traffic is optimised too, but the report is made before standbys exist).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from assignor.model import AssignmentConfig, AssignorKind, RackAwareReport, RackAwareStrategy, TaskId
from assignor.rack_flow import PlacementProblem, index_of, solve_compressed, subtopology_caps
from assignor.rack_standby import spread_and_swap_standbys
from assignor.ranking import Ranking
from assignor.target import Group, standby_windows

# KIP-925 4.B.III and "Summary": traffic over stickiness with the high-availability assignor,
# stickiness over traffic with the sticky one; stateless tasks have no state to keep warm.
DEFAULT_COSTS = {AssignorKind.HIGH_AVAILABILITY: (10, 1), AssignorKind.STICKY: (1, 10)}
STATELESS_COSTS = (1, 0)


def stateful_costs(config: AssignmentConfig) -> tuple[int, int]:
    traffic, non_overlap = DEFAULT_COSTS[config.assignor]
    if config.rack_aware_traffic_cost is not None:
        traffic = config.rack_aware_traffic_cost
    if config.rack_aware_non_overlap_cost is not None:
        non_overlap = config.rack_aware_non_overlap_cost
    return traffic, non_overlap


# Distinct client racks beyond which rack awareness stands down. Its flows and swaps grow with
# tasks x racks (1,000 clients x 20,000 tasks, balance_subtopology: 0.95 s with 3 racks, 3.5 s
# with 64, 6.5 s with 100, 28 s and 2.7 GB with 1,000, one per client), while racks are
# availability zones or data-centre racks, a handful to a few dozen: beyond this, the clients'
# racks are not racks (host names, say), and one member each would make every rebalance cost that.
MAX_RACKS = 64


def stand_down_reason(group: Group, config: AssignmentConfig) -> str:
    """Why rack-aware placement cannot help here, or "" when it runs (KIP-925 section 6; the
    rack count is this project's bound, ``MAX_RACKS``)."""
    if config.rack_aware_strategy == RackAwareStrategy.NONE:
        return "strategy is none"
    for client in group.clients:
        if group.states[client].rack is None:
            return f"client {client} has no rack"
    client_racks = {group.states[c].rack for c in group.clients}
    if len(client_racks) > MAX_RACKS:
        return f"{len(client_racks)} client racks, more than {MAX_RACKS}"
    for task, spec in group.specs.items():
        for tp in spec.partitions:
            if not tp.racks:
                return f"input partition {tp.topic}-{tp.partition} of task {task} lists no racks"
    for spec in group.specs.values():
        for tp in spec.partitions:
            if tp.racks & client_racks and not client_racks <= tp.racks:
                return ""
    return "no placement changes any cross-rack cost"


def cross_rack_matrix(group: Group, tasks: tuple[TaskId, ...], racks: list[str]) -> np.ndarray:
    """``cross[t, r]``: input partitions of task t with no replica in rack r (KIP-925 getCost)."""
    partitions = [group.specs[task].partitions for task in tasks]
    replicas = [tp.racks for task_partitions in partitions for tp in task_partitions]
    kind_of = {kind: index for index, kind in enumerate(dict.fromkeys(replicas))}  # in order of appearance
    vectors = np.array([[rack not in kind for rack in racks] for kind in kind_of], dtype=np.int64)
    cross = np.zeros((len(tasks), len(racks)), dtype=np.int64)
    if replicas:
        kinds = np.fromiter(map(kind_of.__getitem__, replicas), dtype=np.int64, count=len(replicas))
        lengths = np.fromiter(map(len, partitions), dtype=np.int64, count=len(tasks))
        if (lengths == 1).all():  # one input partition per task, the common case
            cross[:] = vectors[kinds]
        else:
            np.add.at(cross, np.repeat(np.arange(len(tasks)), lengths), vectors[kinds])
    return cross


@dataclass(frozen=True, slots=True)
class RackView:
    """What rack awareness needs to know of one group, worked out once per assignment: why it
    stands down ("" when it runs), the racks, and the cross-rack partition counts of the
    stateful and of the stateless tasks (rows in ``Group`` order, columns in ``racks`` order)."""

    reason: str
    racks: list[str]
    stateful_cross: np.ndarray
    stateless_cross: np.ndarray

    @classmethod
    def of(cls, group: Group, config: AssignmentConfig) -> RackView:
        reason = stand_down_reason(group, config)
        if reason:
            empty = np.zeros((0, 0), dtype=np.int64)
            return cls(reason, [], empty, empty)
        racks = sorted({group.states[c].rack for c in group.clients})
        return cls(reason, racks, cross_rack_matrix(group, group.stateful, racks),
                   cross_rack_matrix(group, group.stateless, racks))


def optimize_actives(
    group: Group, actives: Mapping[TaskId, str], config: AssignmentConfig, ranking: Ranking | None = None,
    view: RackView | None = None,
) -> tuple[dict[TaskId, str], RackAwareReport]:
    """Reshape the balanced active target to cut cross-rack traffic, keeping each client's count.

    Stateful and stateless actives are two separate problems (each client keeps its count of
    both), with their own costs; under balance_subtopology the caps of KIP-925 4.B.II apply
    per subtopology within each.
    """
    strategy = config.rack_aware_strategy
    view = view or RackView.of(group, config)
    if view.reason:
        return dict(actives), RackAwareReport(strategy=strategy, enabled=False, disabled_reason=view.reason)
    result = dict(actives)
    before = after = 0
    for tasks, costs, cross in ((group.stateful, stateful_costs(config), view.stateful_cross),
                                (group.stateless, STATELESS_COSTS, view.stateless_cross)):
        if not tasks:
            continue
        problem = placement_problem(group, actives, config, tasks, view.racks, costs, ranking, cross)
        assignment = solve_compressed(problem)
        rows = np.arange(len(tasks))
        before += int(problem.cross[rows, problem.client_rack[problem.target]].sum())
        after += int(problem.cross[rows, problem.client_rack[assignment]].sum())
        for task, client in zip(tasks, assignment.tolist(), strict=True):
            result[task] = group.clients[client]
    report = RackAwareReport(strategy=strategy, enabled=True, cross_rack_before=before, cross_rack_after=after)
    return result, report


def place_stateless(group: Group, actives: Mapping[TaskId, str], tasks: tuple[TaskId, ...], config: AssignmentConfig,
                    view: RackView) -> dict[TaskId, str]:
    """KIP-925 4.E for stateless ``tasks`` already placed (``actives``) by a step that knows
    nothing of racks: each client keeps its count of them, at the least cross-rack traffic
    (``STATELESS_COSTS``). The high-availability assignor's packing of stateless tasks nobody
    ran (``high_availability._pack_stateless_orphans``) is such a step."""
    if view.reason or not tasks:
        return {task: actives[task] for task in tasks}
    assignment = solve_compressed(placement_problem(group, actives, config, tasks, view.racks, STATELESS_COSTS))
    return {task: group.clients[client] for task, client in zip(tasks, assignment.tolist(), strict=True)}


def placement_problem(
    group: Group,
    actives: Mapping[TaskId, str],
    config: AssignmentConfig,
    tasks: tuple[TaskId, ...],
    racks: list[str],
    costs: tuple[int, int],
    ranking: Ranking | None = None,
    cross: np.ndarray | None = None,
) -> PlacementProblem:
    """The flow problem of one kind of active (stateful or stateless), by indices.

    With the high-availability assignor (``ranking`` given) the non-overlap anchor of a stateful
    task is where it can run now: its previous owner when that client is caught up, else the
    target. Anchoring to the lag-aware target alone let two equally cheap tasks trade one
    rack-optimal slot from round to round, re-planning the warm-up each time; anchoring to the
    running, caught-up owner makes a move cost the same whichever round plans it, and a task
    that has warmed up on its new client is anchored there (it is the target and caught up).
    """
    client_index = index_of(group.clients)
    rack_index = index_of(racks)
    client_rack = np.array([rack_index[group.states[c].rack] for c in group.clients], dtype=np.int64)
    placed = list(map(actives.__getitem__, tasks))
    target = np.fromiter(map(client_index.__getitem__, placed), dtype=np.int64, count=len(tasks))
    if config.assignor == AssignorKind.STICKY:
        # KIP-925 "Summary": with the sticky assignor, non-overlap means "not t's previous client".
        owners = group.prev_active_owner
        anchor = np.array([client_index.get(owners.get(t, ""), -1) for t in tasks], dtype=np.int64)
    else:
        anchor = target.copy()
        if ranking is not None:
            owners = group.prev_active_owner
            for row, (task, owner, active) in enumerate(zip(tasks, map(owners.get, tasks), placed, strict=True)):
                if owner is not None and owner != active and task in ranking.holders \
                        and ranking.caught_up(task, owner) and not ranking.caught_up(task, active):
                    anchor[row] = client_index[owner]
    slots = np.bincount(target, minlength=len(group.clients)).astype(np.int64)
    subtopology = np.fromiter(map(attrgetter("subtopology"), tasks), dtype=np.int64, count=len(tasks))
    partition = np.fromiter(map(attrgetter("partition"), tasks), dtype=np.int64, count=len(tasks))
    keys = caps = None
    if config.rack_aware_strategy == RackAwareStrategy.BALANCE_SUBTOPOLOGY:
        keys = np.unique(subtopology, return_inverse=True)[1].astype(np.int64).ravel()  # subtopologies in order
        caps = subtopology_caps(keys, slots)
    prev_holders = group.prev_standby_holders
    return PlacementProblem(
        cross=cross_rack_matrix(group, tasks, racks) if cross is None else cross,
        client_rack=client_rack,
        slots=slots,
        target=target,
        anchor=anchor,
        traffic_cost=costs[0],
        non_overlap_cost=costs[1],
        keys=keys,
        caps=caps,
        task_ids=(subtopology.astype(np.uint64) << np.uint64(32)) | partition.astype(np.uint64),
        client_ids=np.array([zlib.crc32(c.encode()) for c in group.clients], dtype=np.uint64),
        holder=np.fromiter((client_index[min(holders)] if (holders := prev_holders.get(t)) else -1 for t in tasks),
                           dtype=np.int64, count=len(tasks)),
    )


def optimize_standbys(
    group: Group,
    actives: Mapping[TaskId, str],
    standbys: Mapping[TaskId, tuple[str, ...]],
    config: AssignmentConfig,
    ranking: Ranking | None = None,
    view: RackView | None = None,
) -> dict[TaskId, tuple[str, ...]]:
    """Spread standbys over racks and tags, then trade them for less traffic (KIP-925 C, KIP-708).

    Where replicas must differ: by ``rack_aware_assignment_tags`` when configured (KIP-925
    D.IV: tags carry more than ``client.rack``, and KIP-708 works without a rack strategy),
    else by rack when a strategy is set and every client has a rack. Traffic swaps run only
    when rack-aware placement itself runs (``RackView.reason`` is empty).
    """
    tags = config.rack_aware_assignment_tags
    racks_known = all(group.states[c].rack is not None for c in group.clients)
    with_racks = config.rack_aware_strategy != RackAwareStrategy.NONE and racks_known
    if not tags and not with_racks:
        return dict(standbys)
    if tags:
        location = {c: tuple(group.states[c].tags.get(key, "") for key in tags) for c in group.clients}
    else:
        location = {c: (group.states[c].rack,) for c in group.clients}
    traffic = None
    view = view or RackView.of(group, config)
    if not view.reason:
        traffic = (view.stateful_cross, view.racks, stateful_costs(config))
    # Non-overlap (KIP-925 "Summary"): against the previous standbys with the sticky assignor,
    # against the standby target (the standbys given) with the high-availability one.
    anchors = group.prev_standby_holders if config.assignor == AssignorKind.STICKY else None
    # Spread moves keep each client within the standby target's windows (balance over stateful
    # replicas), so moving a standby to a free client of another location unbalances nothing.
    windows = standby_windows(group, actives, group.standby_count(config.num_standby_replicas))
    return spread_and_swap_standbys(group, actives, standbys, location, anchors, traffic, ranking, windows)
