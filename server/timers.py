"""Clocks and keyed timers for the runtime, with a fake pair for tests.

The state machine only sees ``now_ms`` values; the runtime reads them from a ``Clock`` and
arms deadlines on a ``Timers``. Scheduling a key again replaces it (house style, "Group
lifecycle"). ``FakeClock`` is both: time moves only when a test calls ``advance``, which fires
the due timers in deadline order (Kafka's ``MockCoordinatorTimer``), so tests never sleep.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

Callback = Callable[[], Awaitable[None]]


class Clock(Protocol):
    def now_ms(self) -> int: ...


class Timers(Protocol):
    def schedule(self, key: str, deadline_ms: int, callback: Callback) -> None: ...
    def cancel(self, key: str) -> None: ...
    def cancel_all(self) -> None: ...


class SystemClock:
    """Wall-clock milliseconds: next_rebalance_ms and lag ages are epoch times on the wire."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class AsyncioTimers:
    """Real timers on the running loop; a fired callback runs as a supervised task."""

    def __init__(self, clock: Clock, on_error: Callable[[str, BaseException], None]) -> None:
        self._clock = clock
        self._handles: dict[str, tuple[int, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._on_error = on_error

    def schedule(self, key: str, deadline_ms: int, callback: Callback) -> None:
        """Arm ``key``; the same key at the same deadline is left as it is (a key's callback is
        a function of the key: every JoinGroup of a barrier restates the barrier's deadline)."""
        old = self._handles.get(key)
        if old is not None:
            if old[0] == deadline_ms:
                return
            old[1].cancel()
        self._arm(key, deadline_ms, callback)

    def _arm(self, key: str, deadline_ms: int, callback: Callback) -> None:
        delay = max(0.0, (deadline_ms - self._clock.now_ms()) / 1000.0)
        self._handles[key] = (deadline_ms, asyncio.get_running_loop().call_later(delay, self._fire, key, deadline_ms, callback))

    def _fire(self, key: str, deadline_ms: int, callback: Callback) -> None:
        if self._clock.now_ms() < deadline_ms:
            # Early by the clock the deadline is read on (uvloop fires a millisecond early now
            # and then): not due yet, so wait the rest. Fired, the handlers that find their
            # deadline not reached returned without re-arming, and a group waited for good on
            # a member that never synced, or on an early probe (an audit's find).
            self._arm(key, deadline_ms, callback)
            return
        self._handles.pop(key, None)
        task = asyncio.get_running_loop().create_task(callback())
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(key, t))

    def _done(self, key: str, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._on_error(key, task.exception())

    def cancel(self, key: str) -> None:
        entry = self._handles.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def cancel_all(self) -> None:
        for _deadline, handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def __len__(self) -> int:
        return len(self._handles)


class FakeClock:
    """A manual clock and timer set: ``await advance(ms)`` fires what falls due, in order."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._timers: dict[str, tuple[int, int, Callback]] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def schedule(self, key: str, deadline_ms: int, callback: Callback) -> None:
        seq = next(self._seq)
        self._timers[key] = (deadline_ms, seq, callback)
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, key: str) -> None:
        self._timers.pop(key, None)

    def cancel_all(self) -> None:
        self._timers.clear()
        self._heap.clear()

    def deadline(self, key: str) -> int | None:
        entry = self._timers.get(key)
        return entry[0] if entry else None

    def keys(self) -> list[str]:
        return sorted(self._timers)

    async def advance(self, ms: int) -> None:
        """Move time forward by ``ms``, firing each due timer at its own deadline."""
        target = self._now + ms
        while self._heap and self._heap[0][0] <= target:
            deadline, seq, key = heapq.heappop(self._heap)
            entry = self._timers.get(key)
            if entry is None or entry[1] != seq:
                continue  # cancelled or replaced
            del self._timers[key]
            self._now = max(self._now, deadline)
            await entry[2]()
            await asyncio.sleep(0)
        self._now = target
        # Let replies released by the fired timers reach their callers.
        for _ in range(3):
            await asyncio.sleep(0)
