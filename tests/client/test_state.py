"""The state cleaner and KIP-441's cleanup lock ("Race between assignment and state cleanup")."""

from __future__ import annotations

import asyncio
import os

import pytest

from assignor.model import InvalidInput, TaskId
from client.state import StateCleaner, StateCleanupLock, StateDirectory

T0, T1, T2 = TaskId(0, 0), TaskId(0, 1), TaskId(0, 2)
DELAY_MS = 10_000
NOW_MS = 1_000_000_000


def age(directory: StateDirectory, task: TaskId, age_ms: int) -> None:
    directory.create(task)
    stamp = (NOW_MS - age_ms) / 1000
    os.utime(directory.task_dir(task), (stamp, stamp))


def cleaner(directory, lock, assigned):
    return StateCleaner(directory, lock, lambda: frozenset(assigned), state_cleanup_delay_ms=DELAY_MS,
                        clock_ms=lambda: NOW_MS)


async def test_cleaner_deletes_only_unassigned_and_untouched_state(tmp_path):
    directory = StateDirectory(tmp_path)
    age(directory, T0, DELAY_MS + 1)  # unassigned, old: deleted
    age(directory, T1, DELAY_MS - 1)  # unassigned, recent: kept
    age(directory, T2, DELAY_MS * 5)  # assigned, old: kept
    result = await cleaner(directory, StateCleanupLock(), {T2}).clean_once()
    assert (result.deleted, result.kept_recent, result.kept_assigned) == ((T0,), (T1,), (T2,))
    assert directory.task_ids() == (T1, T2)


async def test_cleaner_waits_for_the_lock():
    lock = StateCleanupLock()
    await lock.acquire("member")
    task = asyncio.create_task(cleaner(StateDirectory("/nonexistent"), lock, ()).clean_once())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and lock.holder == "member"
    lock.release("member")
    assert (await task).deleted == ()
    assert not lock.locked()


async def test_lock_release_by_a_non_holder_is_a_bug():
    lock = StateCleanupLock()
    await lock.acquire("member")
    with pytest.raises(RuntimeError, match="held by 'member'"):
        lock.release("state-cleaner")


async def test_the_race_the_lock_prevents(tmp_path):
    """Deterministic interleaving of KIP-441's race: the member reports T0 (old, unassigned state),
    the cleaner wants to run mid-rebalance, the assignment then gives T0 to the member. Holding
    the lock from the lag computation until the assignment is applied keeps T0's state."""
    directory = StateDirectory(tmp_path)
    age(directory, T0, DELAY_MS * 2)
    lock = StateCleanupLock()
    applied: set[TaskId] = set()
    the_cleaner = cleaner(directory, lock, applied)

    await lock.acquire("member")          # JoinGroup: take the lock, then compute lags
    reported = directory.task_ids()       # T0 is reported with its (valid) lag
    cleaning = asyncio.create_task(the_cleaner.clean_once())  # the cleaner wakes up mid-rebalance
    for _ in range(5):
        await asyncio.sleep(0)
    assert not cleaning.done()            # blocked on the lock: nothing deleted yet
    applied.update(reported)              # SyncGroup: T0 assigned, applied ...
    lock.release("member")                # ... then the lock is released
    result = await cleaning
    assert result.deleted == () and directory.task_ids() == (T0,)


async def test_without_the_lock_the_reported_state_is_lost(tmp_path):
    """The control: the same interleaving with no lock taken deletes the reported task's state."""
    directory = StateDirectory(tmp_path)
    age(directory, T0, DELAY_MS * 2)
    applied: set[TaskId] = set()
    reported = directory.task_ids()
    result = await cleaner(directory, StateCleanupLock(), applied).clean_once()
    applied.update(reported)
    assert result.deleted == (T0,) and directory.task_ids() == ()


@pytest.mark.parametrize("delay", [-1, 1.5, True])
def test_bad_cleanup_delay_names_the_field(tmp_path, delay):
    with pytest.raises(InvalidInput) as error:
        StateCleaner(StateDirectory(tmp_path), StateCleanupLock(), frozenset, state_cleanup_delay_ms=delay)
    assert error.value.field == "state_cleanup_delay_ms"
