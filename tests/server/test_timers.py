"""Real timers (server/timers.py): a callback runs only once its deadline is reached by the clock
the deadline is read on."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.timers import AsyncioTimers

pytestmark = pytest.mark.asyncio


class _SlowClock:
    """Milliseconds that pass at 80% of the loop's pace: the loop's timer fires before the
    deadline is reached by this clock, as uvloop's did by the wall clock (a millisecond early
    now and then)."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def now_ms(self) -> int:
        return 1_000_000 + int((time.monotonic() - self._start) * 800)


async def test_a_timer_that_fires_early_by_its_clock_waits_for_its_deadline():
    """A regression audit's find: a handler that finds its deadline not reached returns without
    re-arming (the syncs' deadline, the early probe), so a timer fired early was lost, and a
    group waited on a member that never synced for good (2-6 of 40 groups under uvloop)."""
    clock = _SlowClock()
    errors: list = []
    timers = AsyncioTimers(clock, lambda key, error: errors.append((key, error)))
    fired: list[tuple[int, int]] = []
    deadline = clock.now_ms() + 100

    async def callback() -> None:
        fired.append((clock.now_ms(), deadline))

    timers.schedule("join:g", deadline, callback)
    for _ in range(100):
        if fired:
            break
        await asyncio.sleep(0.01)
    assert len(fired) == 1 and fired[0][0] >= deadline and not errors
    assert len(timers) == 0
