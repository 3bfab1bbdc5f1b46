"""Empty groups expire: a group that has had no members for ``--empty-group-retention-ms`` is
removed from memory, from the store and from ListGroups (Kafka removes an empty group once its
offsets pass ``offsets.retention.minutes``; here the group's own state is all there is).

The sweep runs on the runtime's timers (so tests drive it with the fake clock) every quarter of
the retention, at most once a minute. A group is timed from the first sweep that sees it empty,
so a server that restarts starts the clock again for the groups it loads: retention is a lower
bound, never shortened by a restart. The rebalance log keeps its lines: it is history.
"""

from __future__ import annotations

import structlog

from server.group import GroupState
from server.timers import Clock, Timers

log = structlog.get_logger(__name__)

TIMER_KEY = "retention:sweep"
MAX_SWEEP_INTERVAL_MS = 60_000


class Retention:
    def __init__(self, coordinator, clock: Clock, timers: Timers, retention_ms: int, on_expired=None) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._timers = timers
        self.retention_ms = retention_ms
        self.interval_ms = max(1, min(retention_ms // 4, MAX_SWEEP_INTERVAL_MS))
        self._empty_since: dict[str, int] = {}
        self._on_expired = on_expired

    def start(self) -> None:
        if self.retention_ms > 0:
            self._schedule()

    def stop(self) -> None:
        self._timers.cancel(TIMER_KEY)

    def _schedule(self) -> None:
        self._timers.schedule(TIMER_KEY, self._clock.now_ms() + self.interval_ms, self._fire)

    async def _fire(self) -> None:
        try:
            await self.sweep()
        finally:
            if not self._coordinator.draining:
                self._schedule()

    async def sweep(self) -> list[str]:
        """One pass: the ids of the groups expired by it."""
        now = self._clock.now_ms()
        groups = self._coordinator.groups
        for group_id in list(self._empty_since):
            if group_id not in groups:
                del self._empty_since[group_id]
        expired = []
        for group_id, group in sorted(groups.items()):
            if group.state is not GroupState.EMPTY or group.members:
                self._empty_since.pop(group_id, None)
                continue
            since = self._empty_since.setdefault(group_id, now)
            if now - since < self.retention_ms:
                continue
            if await self._coordinator.expire(group_id):
                expired.append(group_id)
                self._empty_since.pop(group_id, None)
                log.info("group.expired", group_id=group_id, empty_for_ms=now - since)
                if self._on_expired is not None:
                    self._on_expired(group_id)
        return expired
