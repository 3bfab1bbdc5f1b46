"""Ranks: how far each client is from caught up on each stateful task.

KIP-441, "Computing the most-caught-up instances": rank is the client's lag, floored at
``acceptable_recovery_lag`` (a lag within it ranks 0, "caught up"); a client with no state
ranks at the task's changelog size, unbounded when that is unknown. "latest" is a running,
caught-up active (rank 0). "unknown" (state of unknown size) ranks after every known lag but
before having no state at all (scenario.md, "lags").

Caught up means the client's *worst-case restore* is "acceptable for immediate assignment"
(KIP-441 "Parameters"): its reported lag; the whole changelog when it has no state; at most the
whole changelog when its state is "unknown". So a client without state, or with state of unknown
size, is caught up on a task whose changelog is within ``acceptable_recovery_lag``; on a task of
unknown changelog size ("max long as a proxy") only when the acceptable lag is itself the
largest allowed, where every client is caught up on every task. This is the one rule; every
caught-up decision of the assignor reads it from the ranks.

Ranks are integers scaled by 4 so that these tiers interleave exactly:
reported lag L -> 4L, unknown -> 4C+1, no state -> 4C+2 (C the changelog size); a changelog
of 0 (every store unlogged) makes everyone rank 0 (KIP-441 revision, State with logging
disabled). Lower is better; only equality with the minimum matters for "most caught up".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from assignor.model import LATEST, MAX_ACCEPTABLE_RECOVERY_LAG, UNKNOWN, ClientState, TaskId, TaskSpec

UNBOUNDED_OFFSETS = 1 << 62  # "max long as a proxy" for an unknown changelog size


def whole_changelog_acceptable(changelog_offsets: int | None, acceptable_recovery_lag: int) -> bool:
    """Is restoring the whole changelog within the acceptable lag? An unknown size is unbounded:
    acceptable only at the largest ``acceptable_recovery_lag``."""
    if changelog_offsets is None:
        return acceptable_recovery_lag >= MAX_ACCEPTABLE_RECOVERY_LAG
    return changelog_offsets <= acceptable_recovery_lag


def reported_rank(lag: int, changelog_offsets: int | None, acceptable_recovery_lag: int) -> int:
    if lag == LATEST or (lag != UNKNOWN and lag <= acceptable_recovery_lag):
        return 0
    if lag == UNKNOWN:
        if whole_changelog_acceptable(changelog_offsets, acceptable_recovery_lag):
            return 0
        return 4 * (UNBOUNDED_OFFSETS if changelog_offsets is None else changelog_offsets) + 1
    return 4 * lag


def no_state_rank(changelog_offsets: int | None, acceptable_recovery_lag: int) -> int:
    """A changelog of 0 (every store unlogged, KIP-441 revision) is always within it."""
    if whole_changelog_acceptable(changelog_offsets, acceptable_recovery_lag):
        return 0
    return 4 * (UNBOUNDED_OFFSETS if changelog_offsets is None else changelog_offsets) + 2


class Tier:
    """Coarse classes of a rank, for costs: caught up, lagging, unknown, no state."""

    CAUGHT_UP = 0
    LAGGING = 1
    UNKNOWN = 2
    NO_STATE = 3


def tier_of(rank: int) -> int:
    if rank == 0:
        return Tier.CAUGHT_UP
    return (Tier.LAGGING, Tier.UNKNOWN, Tier.NO_STATE)[(rank % 4)]


@dataclass(frozen=True, slots=True)
class Ranking:
    """Ranks of the clients that report something on a task; all others rank ``absent``."""

    holders: Mapping[TaskId, Mapping[str, int]]
    absent: Mapping[TaskId, int]
    best: Mapping[TaskId, int]

    def rank(self, task: TaskId, client: str) -> int:
        return self.holders.get(task, {}).get(client, self.absent[task])

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
    specs = {spec.id: spec for spec in tasks if spec.stateful}
    holders: dict[TaskId, dict[str, int]] = {task: {} for task in specs}
    for client in clients:
        for task, lag in client.lags.items():
            spec = specs.get(task)
            if spec is not None:
                holders[task][client.id] = reported_rank(lag, spec.changelog_offsets, acceptable_recovery_lag)
    absent = {task: no_state_rank(spec.changelog_offsets, acceptable_recovery_lag) for task, spec in specs.items()}
    client_count = len(clients)
    best = {}
    for task, ranks in holders.items():
        candidates = list(ranks.values())
        if len(ranks) < client_count:
            candidates.append(absent[task])
        best[task] = min(candidates) if candidates else absent[task]
    return Ranking(holders=holders, absent=absent, best=best)
