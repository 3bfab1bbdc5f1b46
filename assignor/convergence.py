"""Re-running the assignor until it settles, as a group of workers would (KIP-441).

Between rounds every replica the assignor placed catches up completely (actives report
"latest", standbys and warm-ups lag 0) and every other piece of state is deleted: the most
pessimistic state cleaner. Kafka's TaskAssignorConvergenceTest does the same. The convergence
tests check the bound here; the simulator starts every run from a group settled this way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType

from assignor import assign
from assignor.model import LATEST, AssignmentConfig, AssignmentResult, ClientState, TaskSpec
from assignor.target import StandbyChoice


def settle_bound(tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig) -> int:
    """Rounds within which a group must settle (docs/assignor.md, "Convergence").

    Every probing round makes at least min(max_warmup_replicas, pending moves) target replicas
    caught up, and each such replica lowers the target's non-caught-up cost by at least the
    lagging-tier weight; the worst start costs 1.5x that per stateful replica. Hence at most
    ceil(1.5 x stateful replicas / max_warmup_replicas) probing rounds, plus the first and the
    final one.
    """
    stateful = sum(1 for spec in tasks if spec.stateful)
    standbys = max(0, min(config.num_standby_replicas, len(clients) - 1))
    return math.ceil(1.5 * stateful * (1 + standbys) / config.max_warmup_replicas) + 2


def caught_up_clients(
    tasks: Sequence[TaskSpec], clients: Sequence[ClientState], result: AssignmentResult
) -> list[ClientState]:
    """The clients after every assigned replica restored and all other state was cleaned."""
    stateful = {spec.id for spec in tasks if spec.stateful}
    updated = []
    for client in clients:
        roles = result.clients[client.id]
        lags = {task: LATEST for task in roles.active if task in stateful}
        lags.update({task: 0 for task in (*roles.standby, *roles.warmup)})
        updated.append(
            replace(
                client,
                prev_active=frozenset(roles.active),
                prev_standby=frozenset(roles.standby) | frozenset(roles.warmup),
                lags=MappingProxyType(lags),
            )
        )
    return updated


def settle(
    tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig, max_rounds: int,
    standby_choice: StandbyChoice | None = None,
) -> tuple[list[AssignmentResult], list[ClientState]]:
    """Assign, catch up, repeat until no probing rebalance is needed (or ``max_rounds``)."""
    results = []
    current = list(clients)
    for _ in range(max_rounds):
        result = assign(tasks, current, config, standby_choice)
        results.append(result)
        current = caught_up_clients(tasks, current, result)
        if not result.probing_rebalance_needed:
            break
    return results, current
