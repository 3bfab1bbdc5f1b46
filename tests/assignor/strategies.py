"""Hypothesis strategies for random groups, built as domain objects.

Groups up to 50 clients and 500 tasks, mixed threads, lags of every kind (latest, within and
beyond acceptable_recovery_lag, unknown, none), previous assignments with departed owners
(tasks nobody current ran) and duplicate claims (two clients claiming one active, standbys
claimed by the active's owner too).
"""

from __future__ import annotations

import random
from types import MappingProxyType

from hypothesis import strategies as st

from assignor.model import (
    LATEST,
    MAX_ACCEPTABLE_RECOVERY_LAG,
    UNKNOWN,
    AssignmentConfig,
    ClientState,
    TaskId,
    TaskSpec,
)

ACCEPTABLE_RECOVERY_LAG = 10_000
# The lags drawn below straddle ACCEPTABLE_RECOVERY_LAG; the others make the changelogs
# (5,000 and 1,000,000 offsets) fall within or beyond it, up to "every client caught up".
ACCEPTABLE_RECOVERY_LAGS = (0, ACCEPTABLE_RECOVERY_LAG, 1_000_000, MAX_ACCEPTABLE_RECOVERY_LAG)


@st.composite
def task_sets(draw, max_tasks: int = 500) -> list[TaskSpec]:
    subtopologies = draw(st.integers(1, 6))
    specs = []
    for subtopology in range(subtopologies):
        partitions = draw(st.integers(1, max(1, max_tasks // subtopologies)))
        stateful = draw(st.booleans())
        changelog = draw(st.sampled_from([None, 0, 5_000, 1_000_000])) if stateful else None
        specs.extend(TaskSpec(TaskId(subtopology, p), stateful, changelog) for p in range(partitions))
    return specs


def _random_lag(rng) -> int:
    kind = rng.randrange(4)
    if kind == 0:
        return LATEST
    if kind == 1:
        return UNKNOWN
    if kind == 2:
        return rng.randint(0, ACCEPTABLE_RECOVERY_LAG)
    return rng.randint(ACCEPTABLE_RECOVERY_LAG + 1, 2_000_000)


@st.composite
def groups(draw, max_clients: int = 50, max_tasks: int = 500, equal_threads: bool | None = None):
    """(tasks, clients): a random group, possibly mid-change."""
    specs = draw(task_sets(max_tasks))
    client_count = draw(st.integers(1, max_clients))
    uniform = draw(st.booleans()) if equal_threads is None else equal_threads
    base_threads = draw(st.integers(1, 4))
    ids = [f"client-{i:02d}" for i in range(client_count)]
    # a previous generation's clients, some of which are gone now (departed owners)
    previous_members = ids + [f"gone-{i}" for i in range(draw(st.integers(0, 3)))]
    prev_active: dict[str, set[TaskId]] = {c: set() for c in previous_members}
    prev_standby: dict[str, set[TaskId]] = {c: set() for c in previous_members}
    lags: dict[str, dict[TaskId, int]] = {c: {} for c in ids}
    rng = random.Random(draw(st.integers(0, 2**32)))
    for spec in specs:
        if rng.random() < 0.85:
            owner = rng.choice(previous_members)
            prev_active[owner].add(spec.id)
            if rng.random() < 0.03:  # a duplicate claim
                prev_active[rng.choice(previous_members)].add(spec.id)
        if spec.stateful:
            for holder in rng.sample(previous_members, k=min(len(previous_members), rng.randint(0, 2))):
                prev_standby[holder].add(spec.id)
            for client in ids:
                if spec.id in prev_active[client] and rng.random() < 0.8:
                    lags[client][spec.id] = LATEST
                elif spec.id in prev_standby[client] or rng.random() < 0.05:
                    lags[client][spec.id] = _random_lag(rng)
    clients = [
        ClientState(
            id=c,
            threads=base_threads if uniform else rng.randint(1, 4),
            prev_active=frozenset(prev_active[c]),
            prev_standby=frozenset(prev_standby[c] - prev_active[c]),
            lags=MappingProxyType(lags[c]),
        )
        for c in ids
    ]
    return specs, clients


def configs(assignor: str = "high_availability"):
    return st.builds(
        AssignmentConfig,
        assignor=st.just(assignor),
        acceptable_recovery_lag=st.sampled_from(ACCEPTABLE_RECOVERY_LAGS),
        max_warmup_replicas=st.integers(1, 4),
        num_standby_replicas=st.integers(0, 2),
    )
