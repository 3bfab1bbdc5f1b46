"""The sticky assignor: previous actives and standbys stay where balance allows, no lag awareness.

The same balanced target as the high-availability assignor (``assignor.target``), priced
without ranks: it runs the target at once, with no warm-ups and no probing rebalance. It is
what Kafka Streams' StickyTaskAssignor does, and what KIP-925 section 3 pairs with rack
awareness (with its own default costs).
"""

from __future__ import annotations

from collections.abc import Sequence

from assignor import rack_aware
from assignor.high_availability import settled_assignment
from assignor.model import (
    AssignmentConfig,
    AssignmentResult,
    ClientAssignment,
    ClientState,
    Reason,
    ReasonCode,
    Role,
    TaskSpec,
)
from assignor.ranking import rank_clients
from assignor.target import (
    CostModel,
    Group,
    StandbyChoice,
    active_target,
    standby_formulations,
    standby_target,
)


def assign(tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig,
           standby_choice: StandbyChoice = standby_formulations) -> AssignmentResult:
    group = Group.of(tasks, clients)
    settled = settled_assignment(group, None, config)
    if settled is not None:
        return settled
    # Ranks only tell the flow who holds state; with lag_aware=False they add no cost.
    ranking = rank_clients(tasks, clients, config.acceptable_recovery_lag)
    costs = CostModel(lag_aware=False)
    actives = active_target(group, ranking, costs)
    view = rack_aware.RackView.of(group, config)
    actives, report = rack_aware.optimize_actives(group, actives, config, view=view)
    standbys = standby_target(group, ranking, costs, actives, config.num_standby_replicas, standby_choice)
    standbys = rack_aware.optimize_standbys(group, actives, standbys, config, view=view)

    reasons = []
    per_client: dict[str, tuple[list, list]] = {c: ([], []) for c in group.clients}
    for task, client in actives.items():
        per_client[client][0].append(task)
        owner = group.prev_active_owner.get(task)
        if owner != client:
            code = ReasonCode.NO_PREVIOUS_OWNER if owner is None else ReasonCode.BALANCE
            reasons.append(Reason(task, client, Role.ACTIVE, code, "" if owner is None else f"from {owner}"))
    for task, holders in standbys.items():
        for client in holders:
            per_client[client][1].append(task)
    return AssignmentResult(
        clients={
            client: ClientAssignment(active=tuple(sorted(active)), standby=tuple(sorted(standby)))
            for client, (active, standby) in per_client.items()
        },
        probing_rebalance_needed=False,
        followup_rebalance_ms=None,
        reasons=tuple(sorted(reasons, key=lambda r: (r.task, r.role, r.client or ""))),
        rack_awareness=report,
    )
