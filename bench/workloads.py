"""Synthetic groups for benchmarks: a settled group that then changes (shared by bench scripts).

Built directly as domain objects (no assignor involved), so a benchmark measures only the
assignment it times; ``settled_by_assignor`` alone lays its group out with the assignor.
"""

from __future__ import annotations

import random
from types import MappingProxyType

from assignor.model import LATEST, ClientState, TaskId, TaskSpec, TopicPartition

SCENARIOS = ("fresh", "scale-out", "scale-in", "replace")


def tasks_of(task_count: int, subtopologies: int = 10, stateful_share: float = 0.8,
             changelog_offsets: int = 1_000_000, racks: int = 0, seed: int = 1,
             within_lag_share: float = 0.0) -> list[TaskSpec]:
    """``task_count`` tasks over ``subtopologies``; the first ``stateful_share`` of them stateful.

    With ``racks``, each task reads one input partition with replicas in all racks but one
    (two of three), the rack left out drawn per partition. With ``within_lag_share``, changelog
    sizes vary: that share of the stateful tasks within the default acceptable_recovery_lag
    (0-10,000 offsets: caught up everywhere, a hub price of a move), the others 10^5-10^8.
    """
    rng = random.Random(seed)
    sizes = random.Random(seed + 1)  # apart, so that the racks drawn stay as without it
    rack_names = [f"r{i}" for i in range(racks)]
    per = max(1, -(-task_count // subtopologies))
    stateful_subtopologies = round(subtopologies * stateful_share)
    specs = []
    for index in range(task_count):
        subtopology, partition = divmod(index, per)
        stateful = subtopology < stateful_subtopologies
        inputs = ()
        if racks:
            replicas = frozenset(rng.sample(rack_names, k=max(1, racks - 1)))
            inputs = (TopicPartition(f"s{subtopology}-in", partition, replicas),)
        size = changelog_offsets
        if within_lag_share:
            size = sizes.randint(0, 10_000) if sizes.random() < within_lag_share else sizes.randint(10**5, 10**8)
        specs.append(TaskSpec(TaskId(subtopology, partition), stateful, size if stateful else None, inputs))
    return specs


def settled_then_joined(client_count: int, task_count: int, standbys: int, *, new_share: float = 0.1,
                        lagging_standby_share: float = 0.3, seed: int = 1, threads: int = 1,
                        subtopologies: int = 10, racks: int = 0,
                        scenario: str = "scale-out") -> tuple[list[TaskSpec], list[ClientState]]:
    """A balanced group of clients running round-robin actives (caught up, "latest") and
    standbys on the next clients, ``lagging_standby_share`` of them lagging beyond
    acceptable_recovery_lag; then, by ``scenario``:

    - ``scale-out``: ``new_share`` of ``client_count`` are fresh clients that just joined;
    - ``scale-in``: the group had ``client_count / (1 - new_share)`` clients, ``new_share`` of
      them left (their tasks have no owner; the others keep what they ran and their state);
    - ``replace``: as ``scale-out``, and two thirds as many of the old clients left in the same
      rebalance (a rolling replacement two thirds of the way: their tasks have no owner);
    - ``fresh``: nobody ran anything before.

    With ``racks``, clients sit in racks in turn and tasks read partitions in two of three
    racks (``tasks_of``).
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: expected one of {SCENARIOS}, got {scenario!r}")
    rng = random.Random(seed)
    specs = tasks_of(task_count, subtopologies=subtopologies, racks=racks, seed=seed)
    if scenario == "scale-in":
        members = round(client_count / (1 - new_share))
        old = members
    else:
        members = client_count
        old = 0 if scenario == "fresh" else max(1, round(client_count * (1 - new_share)))
    ids = [f"c{index:05d}" for index in range(members)]
    active, standby, lags = round_robin_history(specs, ids, old, standbys, rng, lagging_standby_share)
    if scenario == "scale-in":  # every tenth member leaves (new_share 0.1), spread over the ring
        step = max(1, round(1 / new_share))
        ids = [c for index, c in enumerate(ids) if index % step != step - 1][:client_count]
    if scenario == "replace":  # old members leave, spread over the ring
        leaving = round(client_count * new_share * 2 / 3)
        step = max(1, old // leaving) if leaving else 0
        gone = set(ids[step - 1:old:step][:leaving]) if leaving else set()
        ids = [c for c in ids if c not in gone]
    rack_names = [f"r{i}" for i in range(racks)]
    clients = [
        ClientState(
            id=c,
            threads=threads,
            rack=rack_names[index % racks] if racks else None,
            prev_active=frozenset(active[c]),
            prev_standby=frozenset(standby[c]),
            lags=MappingProxyType(lags[c]),
        )
        for index, c in enumerate(ids)
    ]
    return specs, clients


def round_robin_history(specs: list[TaskSpec], ids: list[str], old: int, standbys: int, rng: random.Random,
                        lagging_standby_share: float = 0.3):
    """What the first ``old`` of ``ids`` ran, settled round robin: per client its actives
    (caught up, ``LATEST``), its standbys (the next clients on the ring,
    ``lagging_standby_share`` of them beyond the acceptable lag) and its lags."""
    active: dict[str, list[TaskId]] = {c: [] for c in ids}
    standby: dict[str, list[TaskId]] = {c: [] for c in ids}
    lags: dict[str, dict[TaskId, int]] = {c: {} for c in ids}
    for index, spec in enumerate(specs if old else ()):
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
    return active, standby, lags


def settled_by_assignor(client_count: int, task_count: int, standbys: int, *, scenario: str,
                        changed_share: float = 0.1, lagging_standby_share: float = 0.3, seed: int = 1,
                        subtopologies: int = 10, racks: int = 0,
                        within_lag_share: float = 0.0) -> tuple[list[TaskSpec], list[ClientState]]:
    """As ``settled_then_joined``, but the group was settled by this checkout's assignor (one
    fresh assignment, every replica then caught up but ``lagging_standby_share`` of the
    standbys), not laid out round robin: the layout a group running remote-leader has. Then
    ``changed_share`` of the members left at random (``scale-in``) or are new (``scale-out``).

    Not a pure function of the assignor under test: write the group to a file once and time
    every assignor on that (``bench/bench_shapes.py --settled``)."""
    if scenario not in ("scale-out", "scale-in"):
        raise ValueError(f"scenario: expected scale-out or scale-in, got {scenario!r}")
    from assignor import assign
    from assignor.model import AssignmentConfig

    rng = random.Random(seed)
    specs = tasks_of(task_count, subtopologies=subtopologies, racks=racks, seed=seed,
                     within_lag_share=within_lag_share)
    stateful = {spec.id for spec in specs if spec.stateful}
    changed = round(client_count * changed_share)
    old = client_count + changed if scenario == "scale-in" else client_count - changed
    rack_names = [f"r{i}" for i in range(racks)]
    ids = [f"c{index:05d}" for index in range(old)]
    rack = {c: rack_names[index % racks] if racks else None for index, c in enumerate(ids)}
    result = assign(specs, [ClientState(id=c, rack=rack[c]) for c in ids],
                    AssignmentConfig(num_standby_replicas=standbys))
    members = []
    for c in ids:
        replicas = result.clients[c]
        lags = {task: LATEST for task in sorted(replicas.active) if task in stateful}
        for task in sorted(replicas.standby):
            lagging = rng.random() < lagging_standby_share
            lags[task] = rng.randint(20_000, 200_000) if lagging else rng.randint(0, 5_000)
        members.append(ClientState(id=c, rack=rack[c], prev_active=frozenset(replicas.active),
                                   prev_standby=frozenset(replicas.standby), lags=MappingProxyType(lags)))
    if scenario == "scale-in":
        gone = set(rng.sample(range(old), changed))
        return specs, [member for index, member in enumerate(members) if index not in gone]
    return specs, members + [ClientState(id=f"n{index:05d}", rack=rack_names[index % racks] if racks else None)
                             for index in range(changed)]
