"""Ranks: how far each client is from caught up on each stateful task.

KIP-441, "Computing the most-caught-up instances": the rank of a client on a task is its
``Lag.rank`` (``assignor.lag``, where the caught-up rule lives), an integer where lower is
better and 0 is caught up; only equality with the minimum matters for "most caught up".
``Tier`` reads a rank's kind back for the target's costs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from assignor.lag import NO_STATE, UNBOUNDED_OFFSETS, whole_changelog_acceptable
from assignor.model import ClientState, TaskId, TaskSpec

__all__ = ["TIER_BY_RESIDUE", "UNBOUNDED_OFFSETS", "Ranking", "Tier", "rank_clients", "tier_of",
           "whole_changelog_acceptable"]


_NO_REPORTS: Mapping[str, int] = MappingProxyType({})


class Tier:
    """Coarse classes of a rank, for costs: caught up, lagging, unknown, no state."""

    CAUGHT_UP = 0
    LAGGING = 1
    UNKNOWN = 2
    NO_STATE = 3


# The tier of a non-zero rank by its residue mod 4 (``Lag.rank``: 4L, 4C+1, 4C+2)
TIER_BY_RESIDUE = (Tier.LAGGING, Tier.UNKNOWN, Tier.NO_STATE)


def tier_of(rank: int) -> int:
    return TIER_BY_RESIDUE[rank % 4] if rank else Tier.CAUGHT_UP


@dataclass(frozen=True, slots=True)
class Ranking:
    """Ranks of the clients that report something on a task; all others rank ``absent``."""

    holders: Mapping[TaskId, Mapping[str, int]]
    absent: Mapping[TaskId, int]
    best: Mapping[TaskId, int]

    def rank(self, task: TaskId, client: str) -> int:
        return self.holders.get(task, _NO_REPORTS).get(client, self.absent[task])

    def caught_up(self, task: TaskId, client: str) -> bool:
        return self.rank(task, client) == 0

    def most_caught_up(self, task: TaskId, client: str) -> bool:
        return self.rank(task, client) == self.best[task]


def rank_clients(
    tasks: Sequence[TaskSpec], clients: Sequence[ClientState], acceptable_recovery_lag: int
) -> Ranking:
    """Rank every client on every stateful task, in O(reported lags), not O(tasks x clients).

    A task missing from a client's lags means no state, even if the client ran it before
    (scenario.md, "lags"): what it ran is history, what it reports is its disk.
    """
    sizes = {spec.id: spec.changelog_offsets for spec in tasks if spec.stateful}
    holders: dict[TaskId, dict[str, int]] = {task: {} for task in sizes}
    for client in clients:
        client_id = client.id
        for task, lag in client.lags.items():
            ranks = holders.get(task)
            if ranks is not None:
                ranks[client_id] = lag.rank(sizes[task], acceptable_recovery_lag)
    # the rank of no state depends on the changelog's size only
    by_size = {size: NO_STATE.rank(size, acceptable_recovery_lag) for size in set(sizes.values())}
    absent = {task: by_size[size] for task, size in sizes.items()}
    client_count = len(clients)
    best = {}
    for (task, ranks), rank_absent in zip(holders.items(), absent.values(), strict=True):
        if ranks:
            lowest = min(ranks.values())
            # clients that report nothing rank ``absent``: some do unless every client reported
            best[task] = lowest if lowest < rank_absent or len(ranks) == client_count else rank_absent
        else:
            best[task] = rank_absent
    return Ranking(holders=holders, absent=absent, best=best)
