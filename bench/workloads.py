"""Synthetic groups for benchmarks: a settled group that then changes (shared by bench scripts).

Built directly as domain objects (no assignor involved), so a benchmark measures only the
assignment it times.
"""

from __future__ import annotations

import random
from types import MappingProxyType

from assignor.model import LATEST, ClientState, TaskId, TaskSpec


def tasks_of(task_count: int, subtopologies: int = 10, stateful_share: float = 0.8,
             changelog_offsets: int = 1_000_000) -> list[TaskSpec]:
    """``task_count`` tasks over ``subtopologies``; the first ``stateful_share`` of them stateful."""
    per = max(1, task_count // subtopologies)
    stateful_subtopologies = round(subtopologies * stateful_share)
    specs = []
    for index in range(task_count):
        subtopology, partition = divmod(index, per)
        stateful = subtopology < stateful_subtopologies
        specs.append(TaskSpec(TaskId(subtopology, partition), stateful, changelog_offsets if stateful else None))
    return specs


def settled_then_joined(client_count: int, task_count: int, standbys: int, *, new_share: float = 0.1,
                        lagging_standby_share: float = 0.3, seed: int = 1,
                        threads: int = 1) -> tuple[list[TaskSpec], list[ClientState]]:
    """A balanced group of ``(1 - new_share)`` of the clients, then fresh clients join.

    Old clients run round-robin actives (caught up, "latest") and standbys on the next
    clients; ``lagging_standby_share`` of the standbys lag beyond acceptable_recovery_lag.
    """
    rng = random.Random(seed)
    specs = tasks_of(task_count)
    old = max(1, round(client_count * (1 - new_share)))
    ids = [f"c{index:05d}" for index in range(client_count)]
    active: dict[str, list[TaskId]] = {c: [] for c in ids}
    standby: dict[str, list[TaskId]] = {c: [] for c in ids}
    lags: dict[str, dict[TaskId, int]] = {c: {} for c in ids}
    for index, spec in enumerate(specs):
        owner = ids[index % old]
        active[owner].append(spec.id)
        if not spec.stateful:
            continue
        lags[owner][spec.id] = LATEST
        for replica in range(1, min(standbys, old - 1) + 1):
            holder = ids[(index + replica) % old]
            standby[holder].append(spec.id)
            lagging = rng.random() < lagging_standby_share
            lags[holder][spec.id] = rng.randint(20_000, 200_000) if lagging else rng.randint(0, 5_000)
    clients = [
        ClientState(
            id=c,
            threads=threads,
            prev_active=frozenset(active[c]),
            prev_standby=frozenset(standby[c]),
            lags=MappingProxyType(lags[c]),
        )
        for c in ids
    ]
    return specs, clients
