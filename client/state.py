"""The worker's local state: task directories, checkpoint files, the cleanup lock and the cleaner.

KIP-441 "Race between assignment and state cleanup": a member reports lags for every task it has
state for, assigned or not, so a cleaner that deletes an unassigned task's directory while a
rebalance is under way would make the reported lag a lie, and the leader could hand the task to
a member that must then restore it from scratch. The cure is one mutex per member: the cleaner
holds it for its whole run; the member takes it before it computes the lags it reports in
JoinGroup and releases it only once the resulting assignment has been applied (``client.member``).

Layout (Kafka Streams' own): ``ROOT/<subtopology>_<partition>/`` per task, with a ``.checkpoint``
file in Kafka's OffsetCheckpoint text format (version ``0``, the entry count, then one
``topic partition offset`` line per changelog partition).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from assignor.model import InvalidInput, TaskId

log = structlog.get_logger(__name__)

CHECKPOINT_FILE = ".checkpoint"
_CHECKPOINT_VERSION = 0

ChangelogPartition = tuple[str, int]


class StateDirectory:
    """Task state directories under one root; the only code here that touches the file system."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def task_dir(self, task: TaskId) -> Path:
        return self.root / str(task)

    def create(self, task: TaskId) -> Path:
        path = self.task_dir(task)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def task_ids(self) -> tuple[TaskId, ...]:
        """Tasks that have a state directory, sorted; other entries in the root are ignored."""
        if not self.root.is_dir():
            return ()
        found = []
        for entry in self.root.iterdir():
            if not entry.is_dir():
                continue
            try:
                found.append(TaskId.parse(entry.name))
            except InvalidInput:
                continue
        return tuple(sorted(found))

    def read_checkpoint(self, task: TaskId) -> dict[ChangelogPartition, int] | None:
        """The task's checkpointed changelog offsets, or None when it has no checkpoint file."""
        path = self.task_dir(task) / CHECKPOINT_FILE
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        return parse_checkpoint(text, str(path))

    def write_checkpoint(self, task: TaskId, offsets: Mapping[ChangelogPartition, int]) -> None:
        """Write atomically (temporary file, then rename), as Kafka's OffsetCheckpoint does."""
        directory = self.create(task)
        tmp = directory / (CHECKPOINT_FILE + ".tmp")
        tmp.write_text(render_checkpoint(offsets))
        os.replace(tmp, directory / CHECKPOINT_FILE)

    def last_modified_ms(self, task: TaskId) -> int | None:
        """When the task directory last changed (a checkpoint write renames into it)."""
        try:
            return int(self.task_dir(task).stat().st_mtime * 1000)
        except FileNotFoundError:
            return None

    def delete(self, task: TaskId) -> None:
        shutil.rmtree(self.task_dir(task), ignore_errors=True)


def render_checkpoint(offsets: Mapping[ChangelogPartition, int]) -> str:
    lines = [str(_CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    return "\n".join(lines) + "\n"


def parse_checkpoint(text: str, source: str = "checkpoint") -> dict[ChangelogPartition, int]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() != str(_CHECKPOINT_VERSION):
        raise InvalidInput(source, f"unsupported checkpoint version {lines[0] if lines else '(empty)'!r}")
    try:
        count = int(lines[1])
    except (IndexError, ValueError):
        raise InvalidInput(source, "the second line must be the entry count") from None
    entries = lines[2:]
    if len(entries) != count:
        raise InvalidInput(source, f"expected {count} entries, found {len(entries)}")
    offsets: dict[ChangelogPartition, int] = {}
    for number, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].lstrip("-").isdigit():
            raise InvalidInput(f"{source}:{number}", f"expected 'topic partition offset', got {line!r}")
        if int(parts[2]) >= 0:  # Kafka's -4 is "offset unknown", any other negative no position either
            offsets[(parts[0], int(parts[1]))] = int(parts[2])
    return offsets


class StateCleanupLock:
    """KIP-441's mutex between lag reporting and state cleanup, for one member.

    Not re-entrant and not bound to a task: the member takes it in one coroutine (before it
    computes JoinGroup's lags) and releases it in another (after the assignment is applied), and
    a sidecar holds it on behalf of a worker in another process. ``holder`` names who has it.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._holder: str | None = None

    @property
    def holder(self) -> str | None:
        return self._holder

    def locked(self) -> bool:
        return self._lock.locked()

    async def acquire(self, holder: str) -> None:
        await self._lock.acquire()
        self._holder = holder

    def release(self, holder: str) -> None:
        """Release; a holder that does not have the lock is a bug, not a race to ignore."""
        if self._holder != holder or not self._lock.locked():
            raise RuntimeError(f"state-cleanup lock released by {holder!r} but held by {self._holder!r}")
        self._holder = None
        self._lock.release()

    @contextlib.asynccontextmanager
    async def hold(self, holder: str) -> AsyncIterator[None]:
        await self.acquire(holder)
        try:
            yield
        finally:
            self.release(holder)


@dataclass(frozen=True, slots=True)
class CleanupResult:
    deleted: tuple[TaskId, ...]
    kept_assigned: tuple[TaskId, ...]
    kept_recent: tuple[TaskId, ...]


class StateCleaner:
    """Deletes the state of unassigned tasks untouched for ``state_cleanup_delay_ms``.

    Kafka Streams' ``StateDirectory#cleanRemovedTasks``, with KIP-441's rule: the whole run,
    from reading the assigned set to the last deletion, happens under the cleanup lock, so a
    task the member has just reported and been given can never be deleted.
    """

    HOLDER = "state-cleaner"

    def __init__(
        self,
        directory: StateDirectory,
        lock: StateCleanupLock,
        assigned_tasks: Callable[[], frozenset[TaskId]],
        *,
        state_cleanup_delay_ms: int = 600_000,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if isinstance(state_cleanup_delay_ms, bool) or not isinstance(state_cleanup_delay_ms, int) or state_cleanup_delay_ms < 0:
            raise InvalidInput("state_cleanup_delay_ms", f"expected an integer >= 0, got {state_cleanup_delay_ms!r}")
        self.directory = directory
        self.lock = lock
        self.assigned_tasks = assigned_tasks
        self.state_cleanup_delay_ms = state_cleanup_delay_ms
        self.clock_ms = clock_ms

    async def clean_once(self) -> CleanupResult:
        async with self.lock.hold(self.HOLDER):
            assigned = self.assigned_tasks()
            now = self.clock_ms()
            deleted, kept_assigned, kept_recent = [], [], []
            for task in self.directory.task_ids():
                if task in assigned:
                    kept_assigned.append(task)
                    continue
                modified = self.directory.last_modified_ms(task)
                if modified is None:
                    continue
                if now - modified < self.state_cleanup_delay_ms:
                    kept_recent.append(task)
                    continue
                await asyncio.to_thread(self.directory.delete, task)
                deleted.append(task)
        if deleted:
            log.info("state.cleanup.deleted", tasks=[str(t) for t in deleted])
        return CleanupResult(tuple(deleted), tuple(kept_assigned), tuple(kept_recent))

    async def run(self, interval_s: float) -> None:
        """Clean every ``interval_s`` until cancelled (Kafka: ``state.cleanup.delay.ms`` / 2)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.clean_once()
            except OSError as error:
                log.warning("state.cleanup.failed", error=str(error))
