"""The difference between two of a member's assignments (``assignor.cluster.MemberAssignment``).

KIP-429's cooperative protocol hands a member what to revoke and what to start; the worker here
gets the same through one callback with an ``AssignmentChange``: actives and standbys revoked and
assigned, the warm-ups flagged (on the wire they travel as standbys, KIP-441 "Rejected
Alternatives": a warm-up *is* a standby for the worker), and the follow-up rebalance time.
Values only; ``client.member`` builds them from SyncGroup responses.
"""

from __future__ import annotations

from dataclasses import dataclass

from assignor.cluster import MemberAssignment
from assignor.model import TaskId

EMPTY_ASSIGNMENT = MemberAssignment(generation=-1)


@dataclass(frozen=True, slots=True)
class AssignmentChange:
    """What changed for one member from one applied assignment to the next."""

    previous: MemberAssignment
    current: MemberAssignment
    revoked_active: tuple[TaskId, ...]
    assigned_active: tuple[TaskId, ...]
    revoked_standby: tuple[TaskId, ...]
    assigned_standby: tuple[TaskId, ...]
    released: tuple[TaskId, ...]
    """Tasks the member holds no replica of any more: their state becomes the cleaner's to delete."""

    @property
    def warmups(self) -> tuple[TaskId, ...]:
        return tuple(sorted(self.current.warmup))

    @property
    def next_rebalance_ms(self) -> int | None:
        return self.current.next_rebalance_ms

    @property
    def unchanged(self) -> bool:
        return not (self.revoked_active or self.assigned_active or self.revoked_standby
                    or self.assigned_standby or self.previous.warmup != self.current.warmup)


def diff(previous: MemberAssignment, current: MemberAssignment) -> AssignmentChange:
    """The change from ``previous`` to ``current``; a standby promoted to active is both a
    revoked standby and an assigned active, as in Kafka Streams' task manager."""
    prev_active, cur_active = frozenset(previous.active), frozenset(current.active)
    prev_standby, cur_standby = frozenset(previous.standby), frozenset(current.standby)
    return AssignmentChange(
        previous=previous,
        current=current,
        revoked_active=tuple(sorted(prev_active - cur_active)),
        assigned_active=tuple(sorted(cur_active - prev_active)),
        revoked_standby=tuple(sorted(prev_standby - cur_standby)),
        assigned_standby=tuple(sorted(cur_standby - prev_standby)),
        released=tuple(sorted(previous.all_tasks() - current.all_tasks())),
    )
