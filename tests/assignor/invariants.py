"""The rules every assignment must keep, as checks that return what they found broken.

Independent of the assignor's code: they restate KIP-441 "Assignment Algorithm" and
scenario.md from the inputs and the output alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from assignor.model import (
    LATEST,
    MAX_ACCEPTABLE_RECOVERY_LAG,
    UNKNOWN,
    AssignmentConfig,
    AssignmentResult,
    ClientState,
    TaskSpec,
)


def worst_case_restore(spec: TaskSpec, client: ClientState) -> float:
    """Offsets the client may have to restore before it can run the task (scenario.md "lags"):
    its reported lag, else (no state, or state of unknown size) the whole changelog; never
    more than the whole changelog, from which any store can be rebuilt."""
    changelog = spec.changelog_offsets if spec.changelog_offsets is not None else float("inf")
    lag = client.lags.get(spec.id)
    if lag == LATEST:
        return 0
    return changelog if lag is None or lag == UNKNOWN else min(lag.offsets, changelog)


def caught_up(spec: TaskSpec, client: ClientState, acceptable_recovery_lag: int) -> bool:
    """KIP-441: a worst-case restore "acceptable for immediate assignment"; everything is
    acceptable at the largest acceptable_recovery_lag ("max long")."""
    return (acceptable_recovery_lag == MAX_ACCEPTABLE_RECOVERY_LAG
            or worst_case_restore(spec, client) <= acceptable_recovery_lag)


def _rank(spec: TaskSpec, client: ClientState, acceptable_recovery_lag: int) -> tuple[float, int]:
    """(offsets behind, tie-break) in the order of KIP-441 "Computing the most-caught-up
    instances" and scenario.md: a reported lag beats "unknown", which beats no state."""
    if caught_up(spec, client, acceptable_recovery_lag):
        return (0, 0)
    lag = client.lags.get(spec.id)
    tie = 2 if lag is None else 1 if lag == UNKNOWN else 0
    return (worst_case_restore(spec, client), tie)


def broken_rules(
    tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig, result: AssignmentResult
) -> list[str]:
    broken = []
    by_id = {c.id: c for c in clients}
    if set(result.clients) != set(by_id):
        broken.append("not every client appears in the result")
        return broken
    standbys_per_task = max(0, min(config.num_standby_replicas, len(clients) - 1))
    actives: Counter = Counter()
    standbys: Counter = Counter()
    warmups = 0
    for client_id, roles in result.clients.items():
        for role in (roles.active, roles.standby, roles.warmup):
            if list(role) != sorted(role):
                broken.append(f"{client_id}: a task list is not sorted")
        held = list(roles.active) + list(roles.standby) + list(roles.warmup)
        if len(held) != len(set(held)):
            broken.append(f"{client_id} holds two replicas of one task")
        actives.update(roles.active)
        standbys.update(roles.standby)
        warmups += len(roles.warmup)
    for spec in tasks:
        if actives[spec.id] != 1:
            broken.append(f"{spec.id} has {actives[spec.id]} actives")
        expected = standbys_per_task if spec.stateful else 0
        if standbys[spec.id] != expected:
            broken.append(f"{spec.id} has {standbys[spec.id]} standbys, expected {expected}")
    if warmups > config.max_warmup_replicas:
        broken.append(f"{warmups} warm-ups > max_warmup_replicas {config.max_warmup_replicas}")
    if config.assignor == "high_availability":
        broken += _lag_rules(tasks, clients, config, result)
    if result.probing_rebalance_needed != (result.followup_rebalance_ms is not None):
        broken.append("probing flag and follow-up time disagree")
    if not result.probing_rebalance_needed:
        broken += unbalanced(clients, result, config.balance_factor, tasks)
    return broken


def _lag_rules(tasks, clients, config, result) -> list[str]:
    broken = []
    owner = {t: c for c, roles in result.clients.items() for t in roles.active}
    holders = {}
    for c, roles in result.clients.items():
        for t in (*roles.active, *roles.standby, *roles.warmup):
            holders.setdefault(t, set()).add(c)
    for spec in tasks:
        if not spec.stateful:
            for c, roles in result.clients.items():
                if spec.id in roles.standby or spec.id in roles.warmup:
                    broken.append(f"stateless {spec.id} has a standby or warm-up on {c}")
            continue
        ranks = {c.id: _rank(spec, c, config.acceptable_recovery_lag) for c in clients}
        best = min(ranks.values())
        if ranks[owner[spec.id]] != best:
            broken.append(f"{spec.id} active on {owner[spec.id]} rank {ranks[owner[spec.id]]} > best {best}")
        caught_up_free = [c for c, r in ranks.items() if r == (0, 0) and c not in holders[spec.id]]
        for c, roles in result.clients.items():
            if spec.id in roles.standby and ranks[c] != (0, 0) and caught_up_free:
                broken.append(f"{spec.id} standby on lagging {c} while {caught_up_free[0]} is caught up and free")
            if spec.id in roles.warmup and ranks[c] == (0, 0):
                broken.append(f"{spec.id} warm-up on {c}, which is caught up (a wasted replica)")
    broken += _stateless_packed(tasks, clients, result)
    return broken


def _stateless_packed(tasks, clients, result) -> list[str]:
    """KIP-441 "Stateless tasks", on a probing result with equal threads: a stateless task that
    no client ran sits on a client no more loaded, with it, than any other would be (a newcomer
    restoring its first tasks is not left idle). Settled results are balanced anyway."""
    if not result.probing_rebalance_needed or len({c.threads for c in clients}) != 1:
        return []
    owned = {t for c in clients for t in c.prev_active}
    counts = {c: len(roles.active) for c, roles in result.clients.items()}
    fewest = min(counts.values())
    broken = []
    for spec in tasks:
        if spec.stateful or spec.id in owned:
            continue
        holder = next(c for c, roles in result.clients.items() if spec.id in roles.active)
        if counts[holder] > fewest + 1:
            broken.append(f"stateless {spec.id}, run nowhere before, on {holder} with {counts[holder]} actives "
                          f"while a client has {fewest}")
    return broken


def _balanced(counts: dict[str, int], threads: dict[str, int], b: int) -> bool:
    """Every pair s, d: load(s) > load(d) implies (n_s - b)/t_s < (n_d + b)/t_d (brute force)."""
    for s, n_s in counts.items():
        for d, n_d in counts.items():
            if n_s * threads[d] > n_d * threads[s] and not (n_s - b) * threads[d] < (n_d + b) * threads[s]:
                return False
    return True


def unbalanced(clients, result, balance_factor, tasks) -> list[str]:
    """scenario.md "Balance": active balance always, stateful balance with equal threads."""
    threads = {c.id: c.threads for c in clients}
    stateful = {spec.id for spec in tasks if spec.stateful}
    active_counts = {c: len(r.active) for c, r in result.clients.items()}
    replica_counts = {
        c: sum(1 for t in (*r.active, *r.standby) if t in stateful) for c, r in result.clients.items()
    }
    broken = []
    if not _balanced(active_counts, threads, balance_factor):
        broken.append(f"settled but actives unbalanced: {sorted(active_counts.items())}")
    if len(set(threads.values())) == 1 and not _balanced(replica_counts, threads, balance_factor):
        broken.append(f"settled but stateful replicas unbalanced: {sorted(replica_counts.items())}")
    return broken
