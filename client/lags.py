"""Lag sources: how far behind the changelog each task's local state is.

A lag source answers two questions: the per-task lag the member reports in JoinGroup and in
heartbeats (KIP-441 "Rebalance Metadata": ``TaskLags``, summed over a task's stores), and the
per-store-partition lag KIP-535 exposes as ``allLocalStorePartitionLags``. It is pluggable
(``LagSource``); ``CheckpointLagSource`` is the default, reading the worker's checkpoint files
and the changelog end offsets the worker supplies.

Rules, each from the KIPs:
- a running (restored) active reports ``LATEST`` (KIP-441; KIP-535 "active partitions always
  reporting 0 lag in RUNNING state");
- a task's lag is the sum over its logged stores; a store with logging disabled contributes zero
  (KIP-441 revision, "State with logging disabled": zero is the additive identity);
- a task with state but no readable position (no checkpoint yet, or an end offset the worker
  could not supply) reports ``UNKNOWN``: better than no state, not caught up;
- a task without a local state directory is absent: the server uses the changelog length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from assignor.lag import Lag
from assignor.model import LATEST, UNKNOWN, InvalidInput, TaskId
from assignor.topology import Topology
from client.state import ChangelogPartition, StateDirectory

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LagInfo:
    """KIP-535 ``LagInfo``: a store partition's position, its changelog end, and the difference."""

    current_offset_position: int
    end_offset_position: int

    @property
    def offset_lag(self) -> int:
        return max(0, self.end_offset_position - self.current_offset_position)


class LagSource(Protocol):
    """What the member asks each time it reports lags (JoinGroup, heartbeats, KIP-535 queries)."""

    def task_lags(self) -> Mapping[TaskId, Lag]:
        """Every task with local state: offsets behind, ``LATEST`` (running) or ``UNKNOWN``."""

    def store_partition_lags(self) -> Mapping[str, Mapping[int, LagInfo]]:
        """store name -> partition -> LagInfo, for every store partition with local state."""

    # Optional: ``lags_age_ms() -> int``, how long ago the lags were measured, for a source that
    # passes on someone else's report (the sidecar's worker); without it they are measured now.


#: The largest age sent (``LagReport.age_ms`` is an int64): a year, older than any report a
#: worker still stands by.
MAX_LAGS_AGE_MS = 365 * 24 * 3600 * 1000


def lags_age_ms(source: LagSource) -> int:
    """How old ``source``'s lags are, in milliseconds (0 for a source that measures them when
    asked): a worker that died behind its sidecar must not look freshly measured to KIP-535
    callers (``LagReport.age_ms``)."""
    age = getattr(source, "lags_age_ms", None)
    return min(max(0, int(age())), MAX_LAGS_AGE_MS) if age is not None else 0


EndOffsets = Callable[[frozenset[ChangelogPartition]], Mapping[ChangelogPartition, int]]


class CheckpointLagSource:
    """The default source: checkpoint offsets on disk against changelog end offsets.

    ``end_offsets`` is called with the changelog partitions whose end is needed and returns the
    ones it knows (a worker asks its Kafka consumer, ``Consumer#endOffsets``); ``running_actives``
    names the actives that finished restoring and are processing.
    """

    def __init__(
        self,
        topology: Topology,
        directory: StateDirectory,
        end_offsets: EndOffsets | Mapping[ChangelogPartition, int],
        running_actives: Callable[[], Iterable[TaskId]] = frozenset,
    ) -> None:
        self.topology = topology
        self.directory = directory
        self._end_offsets = end_offsets
        self._running_actives = running_actives

    def _stateful_local_tasks(self) -> tuple[TaskId, ...]:
        tasks = []
        for task in self.directory.task_ids():
            sub = self.topology.subtopology(task.subtopology)
            if sub is not None and sub.stateful and task.partition < sub.partition_count:
                tasks.append(task)
        return tuple(tasks)

    def _changelogs(self, task: TaskId) -> list[tuple[str, ChangelogPartition | None]]:
        sub = self.topology.subtopology(task.subtopology)
        stores = sub.state_stores if sub is not None else ()
        result = []
        for store in stores:
            topic = self.topology.changelog_topic(store)
            result.append((store.name, None if topic is None else (topic, task.partition)))
        return result

    def _fetch_end_offsets(self, tasks: Iterable[TaskId]) -> Mapping[ChangelogPartition, int]:
        wanted = frozenset(cp for task in tasks for _, cp in self._changelogs(task) if cp is not None)
        if not wanted:
            return {}
        if callable(self._end_offsets):
            return self._end_offsets(wanted)
        return {cp: self._end_offsets[cp] for cp in wanted if cp in self._end_offsets}

    def _positions(self) -> dict[TaskId, tuple[dict[str, LagInfo] | None, bool]]:
        """task -> (store -> LagInfo, or None when unknown; running active?)."""
        tasks = self._stateful_local_tasks()
        running = frozenset(self._running_actives())
        ends = self._fetch_end_offsets(tasks)
        positions: dict[TaskId, tuple[dict[str, LagInfo] | None, bool]] = {}
        for task in tasks:
            try:
                checkpoint = self.directory.read_checkpoint(task)
            except InvalidInput as error:  # a corrupt checkpoint: the state is there, its position is not
                log.warning("lags.checkpoint.unreadable", task=str(task), error=str(error))
                checkpoint = None
            infos: dict[str, LagInfo] | None = {}
            for store, changelog in self._changelogs(task):
                if changelog is None:  # logging disabled: contributes zero
                    infos[store] = LagInfo(0, 0)
                    continue
                end = ends.get(changelog)
                if end is None:
                    infos = None
                    break
                if task in running:
                    infos[store] = LagInfo(end, end)
                elif checkpoint is None:
                    infos = None
                    break
                else:
                    position = checkpoint.get(changelog, 0)
                    # beyond the end: the changelog was deleted and recreated since, and the state
                    # is rebuilt from it, all of it (the server counts offset sums so; protocol.md)
                    infos[store] = LagInfo(position if position <= end else 0, end)
            positions[task] = (infos, task in running)
        return positions

    def task_lags(self) -> Mapping[TaskId, Lag]:
        lags: dict[TaskId, Lag] = {}
        for task, (infos, running) in self._positions().items():
            if running:
                lags[task] = LATEST
            elif infos is None:
                lags[task] = UNKNOWN
            else:
                lags[task] = Lag.behind(sum(info.offset_lag for info in infos.values()))
        return lags

    def store_partition_lags(self) -> Mapping[str, Mapping[int, LagInfo]]:
        result: dict[str, dict[int, LagInfo]] = {}
        for task, (infos, _running) in self._positions().items():
            for store, info in (infos or {}).items():
                result.setdefault(store, {})[task.partition] = info
        return result


class StaticLagSource:
    """Lags given by the worker directly (a sidecar's ``ReportLags``, a simulation, a test); a
    plain integer given is that many offsets."""

    def __init__(self, task_lags: Mapping[TaskId, Lag | int] | None = None,
                 store_lags: Mapping[str, Mapping[int, LagInfo]] | None = None) -> None:
        self._task_lags = {task: Lag.coerce(lag) for task, lag in (task_lags or {}).items()}
        self._store_lags = {store: dict(parts) for store, parts in (store_lags or {}).items()}

    def update(self, task_lags: Mapping[TaskId, Lag | int],
               store_lags: Mapping[str, Mapping[int, LagInfo]] | None = None) -> None:
        self._task_lags = {task: Lag.coerce(lag) for task, lag in task_lags.items()}
        if store_lags is not None:
            self._store_lags = {store: dict(parts) for store, parts in store_lags.items()}

    def task_lags(self) -> Mapping[TaskId, Lag]:
        return dict(self._task_lags)

    def store_partition_lags(self) -> Mapping[str, Mapping[int, LagInfo]]:
        return {store: dict(parts) for store, parts in self._store_lags.items()}
