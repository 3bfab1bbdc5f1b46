"""The KIP-441 high-availability assignor.

KIP-441 "Proposed Assignment/Rebalance Algorithm": assign active tasks only to instances that
can begin processing them immediately (or, failing any, to the closest one), and plan task
movements as extra replicas that warm up until a later probing rebalance can complete them.

The assignor works in three steps:
1. the balanced, sticky, lag-preferring *target* (``assignor.target``), shaped by KIP-925 rack
   awareness when configured (``assignor.rack_aware``);
2. the *placement*: per task, the target where the target client is ready, otherwise the most
   caught-up client keeps the work and the target client warms up;
3. the warm-up budget (``max_warmup_replicas``) and the probing decision.

Improvements over Kafka's assignor that the KIP allows: a caught-up standby is promoted by a
swap without spending a warm-up; a standby that is already restoring is the warm-up for the
move it enables; the target keeps previous owners wherever balance allows, so only the
tasks balance needs are ever moved.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, repeat
from operator import itemgetter

from assignor import rack_aware
from assignor.balance import is_balanced, replicas_balanced
from assignor.model import (
    AssignmentConfig,
    AssignmentResult,
    ClientAssignment,
    ClientState,
    RackAwareReport,
    Reason,
    ReasonCode,
    Role,
    TaskId,
    TaskSpec,
)
from assignor.ranking import Ranking, rank_clients
from assignor.target import (
    CostModel,
    Group,
    StandbyChoice,
    active_target,
    restoration_cost,
    standby_formulations,
    standby_target,
)


@dataclass(slots=True)
class _Placement:
    """The private, mutable builder of one result; it never escapes ``assign``."""

    active: dict[TaskId, str] = field(default_factory=dict)
    standbys: dict[TaskId, Sequence[str]] = field(default_factory=dict)
    warmups: dict[TaskId, list[str]] = field(default_factory=dict)
    reasons: list[Reason] = field(default_factory=list)
    probing: bool = False


@dataclass(frozen=True, slots=True)
class _WarmupRequest:
    """A planned move whose destination must restore first (KIP-441 "moving" task)."""

    task: TaskId
    client: str
    for_active: bool
    rank: int

    def priority(self) -> tuple:
        # Actives before standbys (they are what balance is about), closest to caught up first
        # (those finish soonest), then task order: deterministic.
        return (not self.for_active, self.rank, self.task, self.client)


def assign(tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig,
           standby_choice: StandbyChoice = standby_formulations) -> AssignmentResult:
    group = Group.of(tasks, clients)
    ranking = rank_clients(tasks, clients, config.acceptable_recovery_lag)
    settled = settled_assignment(group, ranking, config)
    if settled is not None:
        return settled

    costs = CostModel(lag_aware=True)
    balanced = active_target(group, ranking, costs, group.standby_count(config.num_standby_replicas))
    view = rack_aware.RackView.of(group, config)
    actives, report = rack_aware.optimize_actives(group, balanced, config, ranking, view)
    if report.enabled and _restores_more(group, ranking, balanced, actives):
        # Rack awareness may reshape the target among placements that are ready, but never
        # make more of it wait for restoration than the lag-aware target: that quantity must
        # fall from round to round for probing rebalances to stop (docs/assignor.md).
        actives = balanced
        report = replace(report, enabled=False, cross_rack_after=report.cross_rack_before,
                         disabled_reason="postponed: rack-aware placement would need more restoration "
                                         "than the lag-aware target; it applies once replicas have caught up")
    standbys = standby_target(group, ranking, costs, actives, config.num_standby_replicas, standby_choice)
    standbys = rack_aware.optimize_standbys(group, actives, standbys, config, ranking, view)

    placement = _Placement()
    for task in group.stateless:
        placement.active[task] = actives[task]
    requests = _place_stateful(placement, group, ranking, actives, standbys)
    _grant_warmups(placement, requests, config.max_warmup_replicas)
    # Balanced as it is, or once the stateless tasks nobody ran are packed: the next round
    # would keep it, so its warm-ups and probing rebalance would be wasted.
    if placement.probing and (_balanced_once_caught_up(group, placement, config)
                              or (_pack_stateless_orphans(group, placement, actives, config, view)
                                  and _balanced_once_caught_up(group, placement, config))):
        _spread_settled(group, placement, config, ranking, view)
        _stop_moving(group, placement)
    owners = group.prev_active_owner
    for task in group.stateless:
        client = placement.active[task]
        if owners.get(task) != client:
            _explain_active(placement, group, task, client, ranking=None)
    return _result(group, placement, config, report)


def _pack_stateless_orphans(group: Group, placement: _Placement, actives: Mapping[TaskId, str],
                            config: AssignmentConfig, view: rack_aware.RackView) -> bool:
    """KIP-441 "Stateless tasks": the assignor "packs the stateless tasks into the cluster to
    achieve the best balance it can with respect to the assignments of stateful tasks". The
    target's stateless actives balance the target's stateful ones; while stateful actives wait
    away from their target clients for warm-ups, that balance is not this assignment's (a
    newcomer restoring its first tasks would run nothing). So a stateless task without a live
    previous owner, which moves wherever it goes, goes to the client whose load (active tasks
    per thread) stays least with it, its target client among equals: one at a time, the best
    balance the other tasks allow, then, rack-aware, at the least cross-rack traffic among
    those clients (``rack_aware.place_stateless``: packed one at a time in task order, a task
    reading a partition of one rack went to a client of another while a swap of two packed
    tasks read none across racks). A stateless task with a live owner keeps following the
    target, sticky: moving it now would move it back later (docs/assignor.md, "Three steps").
    Whether any of them left its target client: the placement may then be balanced as it is,
    and the moves still waiting would be wasted."""
    orphans = [task for task in group.stateless if task not in group.prev_active_owner]
    if not orphans or all(placement.active[task] == actives[task] for task in group.stateful):
        return False
    threads = group.threads
    scale = math.lcm(*set(threads.values()))
    per_thread = {client: scale // threads[client] for client in group.clients}
    counts = Counter(placement.active.values())
    counts.subtract(map(placement.active.__getitem__, orphans))
    order = {client: index for index, client in enumerate(group.clients)}
    # (load with one task more, client order): lazily updated, an entry is current when its
    # load matches the client's count
    heap = [((counts[c] + 1) * per_thread[c], order[c], c) for c in group.clients]
    heapq.heapify(heap)
    for task in orphans:
        while True:
            load, _, client = heap[0]
            if load == (counts[client] + 1) * per_thread[client]:
                break
            heapq.heapreplace(heap, ((counts[client] + 1) * per_thread[client], order[client], client))
        preferred = actives[task]
        chosen = preferred if (counts[preferred] + 1) * per_thread[preferred] == load else client
        placement.active[task] = chosen
        counts[chosen] += 1
        if chosen == client:
            heapq.heapreplace(heap, ((counts[client] + 1) * per_thread[client], order[client], client))
    placement.active.update(rack_aware.place_stateless(group, placement.active, tuple(orphans), config, view))
    return any(placement.active[task] != actives[task] for task in orphans)


def _balanced_once_caught_up(group: Group, placement: _Placement, config: AssignmentConfig) -> bool:
    """Would the next rebalance keep this placement, every replica in it caught up by then
    (``settled_assignment``: complete and balanced within ``balance_factor``)? Then its warm-ups
    buy nothing. The target balances more strictly than scenario.md's "Balance" (stateful
    actives on their own, subtopologies), so a placement that keeps actives on their
    most-caught-up clients can already be balanced while the target still plans moves: the
    next round's fast path kept it, and the warm-ups and the probing rebalance were wasted
    (KIP-441 plans moves "stopping when it is able to create a balanced assignment")."""
    active_counts = dict.fromkeys(group.clients, 0)
    active_counts.update(Counter(placement.active.values()))
    if not is_balanced(active_counts, group.threads, config.balance_factor):
        return False
    per_task = group.standby_count(config.num_standby_replicas)
    stateful = group.stateful
    standbys = list(map(placement.standbys.get, stateful, repeat(())))
    if set(map(len, standbys)) - {per_task}:
        return False
    replica_counts = dict.fromkeys(group.clients, 0)
    replica_counts.update(Counter(chain(map(placement.active.__getitem__, stateful), chain.from_iterable(standbys))))
    return replicas_balanced(replica_counts, group.threads, config.balance_factor)


def _spread_settled(group: Group, placement: _Placement, config: AssignmentConfig, ranking: Ranking,
                    view: rack_aware.RackView) -> None:
    """Spread the standbys of a placement that settles as it is (KIP-708, KIP-925 C): the spread
    ran on the target, and where the placement keeps a caught-up active off its target client
    and gives that client the freed standby slot, a standby can share its active's tag value
    while a swap of two standbys spreads both (an audit found 36 of 1,500 random tagged groups
    settling so, for good: fed back caught up, the previous assignment is kept). Kept only when
    the result is still balanced once caught up (the spread keeps each client in its window)."""
    before = {task: tuple(sorted(holders)) for task, holders in placement.standbys.items()}
    spread = rack_aware.optimize_standbys(group, placement.active, before, config, ranking, view)
    moved = {task for task, holders in spread.items() if tuple(sorted(holders)) != before.get(task, ())}
    if not moved:
        return
    for task in moved:
        placement.standbys[task] = sorted(spread[task])
    if not _balanced_once_caught_up(group, placement, config):
        for task in moved:
            placement.standbys[task] = list(before[task])
        return
    # their standbys are explained again, as replicas added where they were not held (``_stop_moving``)
    placement.reasons = [r for r in placement.reasons if not (r.role is Role.STANDBY and r.task in moved)]


def _stop_moving(group: Group, placement: _Placement) -> None:
    """The placement as the settled assignment it will be: no warm-ups, no probing, and the
    standbys that waited for a move explained as the replicas they now are."""
    placement.warmups.clear()
    placement.probing = False
    waiting = (ReasonCode.AWAITING_CATCH_UP, ReasonCode.STANDBY_AS_WARMUP)
    placement.reasons = [r for r in placement.reasons if r.role is not Role.WARMUP and r.code not in waiting]
    explained = {(r.task, r.client) for r in placement.reasons if r.role is Role.STANDBY}
    for task, clients in placement.standbys.items():
        for client in clients:
            if (task, client) not in explained and not _held_before(group, task, client):
                placement.reasons.append(Reason(task, client, Role.STANDBY, ReasonCode.REPLICA_ADDED))


def _held_before(group: Group, task: TaskId, client: str) -> bool:
    return client == group.prev_active_owner.get(task) or client in group.prev_standby_holders.get(task, ())


def _restores_more(group: Group, ranking: Ranking, balanced: dict[TaskId, str], reshaped: dict[TaskId, str]) -> bool:
    """Does the reshaped target leave more to restore than the lag-aware one? (Compared on the
    stateful tasks it moved: elsewhere the two agree.)"""
    moved = [task for task in group.stateful if reshaped[task] != balanced[task]]
    return restoration_cost(ranking, reshaped, moved) > restoration_cost(ranking, balanced, moved)


def _place_stateful(placement: _Placement, group: Group, ranking: Ranking, actives: Mapping[TaskId, str],
                    standbys: Mapping[TaskId, Sequence[str]]) -> list[_WarmupRequest]:
    """Decide who runs each stateful task now and who restores it, given its target replicas.

    Most tasks of a settled group that changes take their target as it is: its active is most
    caught up, and each target standby is caught up or has no caught-up client to yield to
    (``_caught_up_substitute``: the common lagging standby, whose task only its active has
    caught up), so there is nothing to swap, substitute or warm up (checked here, in one loop
    over the tasks); the others go through ``_place_task``.
    """
    requests: list[_WarmupRequest] = []
    holders, absent, best = ranking.holders, ranking.absent, ranking.best
    previous_holders, owners = group.prev_standby_holders, group.prev_active_owner
    placed_actives, placed_standbys, reasons = placement.active, placement.standbys, placement.reasons
    none: frozenset[str] = frozenset()
    for task in group.stateful:  # loops, not all() over a generator: a hot loop
        target_active, target_standbys = actives[task], standbys.get(task, ())
        ranks, rank_absent = holders[task], absent[task]
        ready = ranks.get(target_active, rank_absent) == best[task]
        if ready:
            for client in target_standbys:
                if ranks.get(client, rank_absent) != 0:
                    ready = _no_substitute(ranks, rank_absent, target_active, target_standbys)
                    break
        if not ready:
            requests.extend(_place_task(placement, group, ranking, task, target_active, target_standbys))
            continue
        placed_actives[task] = target_active
        owner = owners.get(task)
        if owner != target_active:
            _explain_active(placement, group, task, target_active, ranking)
        placed_standbys[task] = target_standbys
        if target_standbys:
            previous = previous_holders.get(task, none)
            for client in target_standbys:  # not held before (``_held_before``, inlined)
                if client not in previous and client != owner:
                    reasons.append(Reason(task, client, Role.STANDBY, ReasonCode.REPLICA_ADDED))
    return requests


def _no_substitute(ranks: Mapping[str, int], rank_absent: int, active: str, target_standbys: Sequence[str]) -> bool:
    """Would ``_place_task`` keep every lagging target standby of a task whose target active is
    ready? Yes when no client outside the target is caught up (``_caught_up_substitute``
    finds none) and the active is no standby slot too (a slot of its own would warm up)."""
    if rank_absent == 0 or active in target_standbys:
        return False  # unlogged state, every client without a report is caught up: ask _place_task
    for client, rank in ranks.items():
        if rank == 0 and client != active and client not in target_standbys:
            return False
    return True


def _place_task(
    placement: _Placement,
    group: Group,
    ranking: Ranking,
    task: TaskId,
    target_active: str,
    target_standbys: Sequence[str],
) -> list[_WarmupRequest]:
    """Decide who runs ``task`` now and who restores it, given its target replicas.

    KIP-441 "Assignment Algorithm" property 1: the active is on a most-caught-up client.
    Property 2: standbys on the next most caught up; a target standby that is not caught up
    yields to a caught-up client that is not in the target, and warms up instead.
    """
    requests: list[_WarmupRequest] = []
    ranks, absent = ranking.holders[task], ranking.absent[task]
    if ranks.get(target_active, absent) == ranking.best[task]:
        active = target_active
    else:
        active = _most_caught_up(group, ranking, task, prefer=target_standbys)
        placement.probing = True
    placement.active[task] = active
    if group.prev_active_owner.get(task) != active:
        _explain_active(placement, group, task, active, ranking)
    # The standby slots of the target; when the active runs on a target standby (the swap),
    # the target active takes over that client's slot and restores there.
    slots = [target_active if client == active else client for client in target_standbys]
    deferred: tuple[str, ...] = ()
    if active != target_active and active not in target_standbys:
        lagging = [c for c in target_standbys if not ranking.caught_up(task, c)]
        if target_active in group.prev_standby_holders.get(task, ()) and lagging:
            # Already restoring as a standby: it keeps a standby slot as the warm-up of its
            # own move; the least caught-up target standby waits for a later rebalance.
            waiting = max(lagging, key=lambda c: (ranking.rank(task, c), c))
            deferred = (waiting,)
            slots[slots.index(waiting)] = target_active
            placement.reasons.append(Reason(task, waiting, Role.STANDBY, ReasonCode.AWAITING_CATCH_UP,
                                            f"{target_active} restores in this standby slot first"))
        else:
            requests.append(_WarmupRequest(task, target_active, True, ranking.rank(task, target_active)))
    standbys: list[str] = []
    excluded = None  # every client that holds or will hold a replica: built when first needed
    for client in slots:
        moving_active = client == target_active
        if ranks.get(client, absent) == 0:
            standbys.append(client)
            if not _held_before(group, task, client):
                placement.reasons.append(Reason(task, client, Role.STANDBY, ReasonCode.REPLICA_ADDED))
            continue
        if excluded is None:
            excluded = {active, *slots, *deferred, target_active, *target_standbys}
        substitute = _caught_up_substitute(group, ranking, task, excluded=excluded)
        if substitute is None:
            standbys.append(client)
            if moving_active:
                placement.reasons.append(Reason(task, client, Role.STANDBY, ReasonCode.STANDBY_AS_WARMUP,
                                                f"restoring to take over the active from {active}"))
            elif not _held_before(group, task, client):
                placement.reasons.append(Reason(task, client, Role.STANDBY, ReasonCode.REPLICA_ADDED))
            continue
        excluded.add(substitute)
        standbys.append(substitute)
        placement.probing = True
        placement.reasons.append(Reason(task, substitute, Role.STANDBY, ReasonCode.AWAITING_CATCH_UP,
                                        f"keeps the standby until {client} has caught up"))
        requests.append(_WarmupRequest(task, client, moving_active, ranking.rank(task, client)))
    placement.standbys[task] = standbys
    return requests


def _most_caught_up(group: Group, ranking: Ranking, task: TaskId, prefer: Sequence[str]) -> str:
    """Among the most caught-up clients: the previous owner (no needless move), else a target
    standby (the swap: it runs the task while the target active restores), else any holder."""
    best = ranking.best[task]
    owner = group.prev_active_owner.get(task)
    if owner is not None and ranking.rank(task, owner) == best:
        return owner
    for client in sorted(prefer):
        if ranking.rank(task, client) == best:
            return client
    holders = sorted(c for c, rank in ranking.holders[task].items() if rank == best)
    if holders:
        return holders[0]
    return next(c for c in group.clients if ranking.rank(task, c) == best)


def _caught_up_substitute(group: Group, ranking: Ranking, task: TaskId, excluded: set[str]) -> str | None:
    holders = ranking.holders[task]
    if ranking.absent[task] and 0 not in holders.values():
        return None  # nobody is caught up (the common case of a fresh or restoring task)
    candidates = [c for c, rank in holders.items() if rank == 0 and c not in excluded]
    if ranking.absent[task] == 0:  # unlogged state only: every client without a report is caught up
        candidates += [c for c in group.clients if c not in holders and c not in excluded]
    if not candidates:
        return None
    previous = group.prev_standby_holders.get(task, frozenset())
    return min(candidates, key=lambda c: (c not in previous, c != group.prev_active_owner.get(task), c))


def _grant_warmups(placement: _Placement, requests: list[_WarmupRequest], budget: int) -> None:
    """At most ``max_warmup_replicas`` extra replicas in the whole group (KIP-441 "Parameters")."""
    for index, request in enumerate(sorted(requests, key=_WarmupRequest.priority)):
        placement.probing = True
        if index < budget:
            placement.warmups.setdefault(request.task, []).append(request.client)
            role = "active" if request.for_active else "a standby"
            placement.reasons.append(Reason(request.task, request.client, Role.WARMUP, ReasonCode.WARMING_UP,
                                            f"restoring to take over {role}"))
        else:
            placement.reasons.append(Reason(request.task, request.client, Role.WARMUP,
                                            ReasonCode.WARMUP_BUDGET_EXHAUSTED,
                                            f"move postponed: {budget} warm-up replicas already in flight"))


def _explain_active(placement: _Placement, group: Group, task: TaskId, client: str, ranking: Ranking | None) -> None:
    owner = group.prev_active_owner.get(task)
    if owner == client:
        return
    if owner is None:
        code, detail = ReasonCode.NO_PREVIOUS_OWNER, "no current member ran it"
    elif client in group.prev_standby_holders.get(task, ()):
        code, detail = ReasonCode.STANDBY_PROMOTED, f"from {owner}"
    elif ranking is not None and not ranking.most_caught_up(task, owner):
        code, detail = ReasonCode.MOST_CAUGHT_UP, f"{owner} is not caught up"
    else:
        code, detail = ReasonCode.BALANCE, f"from {owner}"
    placement.reasons.append(Reason(task, client, Role.ACTIVE, code, detail))


# (task, role, client): every reason of this assignor names its client
_BY_TASK_ROLE_CLIENT = itemgetter(0, 2, 1)


def _result(group: Group, placement: _Placement, config: AssignmentConfig, report: RackAwareReport) -> AssignmentResult:
    """The placement as each client's tasks, in task order: collected over the group's sorted
    tasks and the standbys ``_place_stateful`` placed in that order, so only the few warm-ups
    need sorting."""
    active: dict[str, list[TaskId]] = {c: [] for c in group.clients}
    standby: dict[str, list[TaskId]] = {c: [] for c in group.clients}
    warmup: dict[str, list[TaskId]] = {c: [] for c in group.clients}
    placed = placement.active
    for task in group.specs:
        active[placed[task]].append(task)
    for task, clients in placement.standbys.items():  # in task order (``_place_stateful``)
        for client in clients:
            standby[client].append(task)
    for task, clients in placement.warmups.items():
        for client in clients:
            warmup[client].append(task)
    assignments = {
        client: ClientAssignment(active=tuple(active[client]), standby=tuple(standby[client]),
                                 warmup=tuple(sorted(warmup[client])))
        for client in group.clients
    }
    return AssignmentResult(
        clients=assignments,
        probing_rebalance_needed=placement.probing,
        followup_rebalance_ms=config.probing_rebalance_interval_ms if placement.probing else None,
        reasons=tuple(sorted(placement.reasons, key=_BY_TASK_ROLE_CLIENT)),
        rack_awareness=report,
    )


def settled_assignment(group: Group, ranking: Ranking | None, config: AssignmentConfig) -> AssignmentResult | None:
    """The previous assignment, unchanged, when it is complete, caught up and balanced.

    KIP-441 "Assignment Algorithm" property 5 (revision: "the algorithm must stabilize"): if
    the current assignment is already balanced, it must not alter it. ``ranking=None`` skips
    the caught-up check (the sticky assignor is not lag-aware).
    """
    if not group.clients:
        return None
    per_task = group.standby_count(config.num_standby_replicas)
    owners = group.prev_active_owner
    if len(owners) != len(group.specs):
        return None
    active_counts = dict.fromkeys(group.clients, 0)
    active_counts.update(Counter(owners.values()))
    if not is_balanced(active_counts, group.threads, config.balance_factor):
        return None  # first: the cheap test a scale-out fails (its new members hold nothing)
    replica_counts = dict.fromkeys(group.clients, 0)
    none: frozenset[str] = frozenset()
    if ranking is not None:
        reported, absent = ranking.holders, ranking.absent
    for task in group.stateful:
        owner = owners[task]
        replica_counts[owner] += 1
        # caught up (``Ranking.caught_up``, inlined: a hot loop)
        if ranking is not None and reported[task].get(owner, absent[task]) != 0:
            return None
    stateful = frozenset(group.stateful)
    for client in group.clients:
        standbys = group.states[client].prev_standby
        if not stateful.issuperset(standbys):
            return None
        for task in standbys:
            if owners.get(task) == client:
                return None
        replica_counts[client] += len(standbys)
    previous_holders = group.prev_standby_holders
    for task in group.stateful:
        holders = previous_holders.get(task, none)
        if len(holders) != per_task:
            return None
        if ranking is not None and holders:
            ranks, rank_absent = reported[task], absent[task]
            for client in holders:
                if ranks.get(client, rank_absent) != 0:
                    if _caught_up_substitute(group, ranking, task, excluded={owners[task], *holders}) is not None:
                        return None  # property 2: a lagging standby yields to a caught-up client that is free
                    break
    specs = group.specs
    claimed = [[task for task in group.states[c].prev_active if task in specs] for c in group.clients]
    if sum(map(len, claimed)) != len(owners):
        return None
    if not replicas_balanced(replica_counts, group.threads, config.balance_factor):
        return None
    assignments = {
        client: ClientAssignment(active=tuple(sorted(active)), standby=tuple(sorted(group.states[client].prev_standby)))
        for client, active in zip(group.clients, claimed, strict=True)
    }
    return AssignmentResult(
        clients=assignments,
        probing_rebalance_needed=False,
        followup_rebalance_ms=None,
        rack_awareness=RackAwareReport(strategy=config.rack_aware_strategy, enabled=False,
                                       disabled_reason="assignment already balanced: kept unchanged"),
    )
