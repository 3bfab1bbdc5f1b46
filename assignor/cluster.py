"""What a member learns from one generation: its own assignment and the cluster metadata.

One shape for both sides: the leader builds it per member at SyncGroup (``server.group``), the
worker decodes it from the SyncGroup answer (``client.codec``), diffs it against its previous one
(``client.assignment``) and answers KIP-535 queries from its host maps (``client.metadata``).
Warm-ups travel as standbys (KIP-441 "Rejected Alternatives": a warm-up *is* a standby for the
worker), flagged. Pure values, no wire types.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from assignor.model import HostInfo, TaskId
from assignor.topology import Topology


class AssignorError(enum.IntEnum):
    """Kafka Streams' AssignorError, with its numbers (the wire's, errors.proto)."""

    NONE = 0
    INCOMPLETE_SOURCE_TOPIC_METADATA = 1
    VERSION_PROBING = 2
    ASSIGNMENT_ERROR = 3
    SHUTDOWN_REQUESTED = 4


@dataclass(frozen=True, slots=True)
class HostTasks:
    """One member's place in the cluster metadata of a generation (KIP-535 partitionsByHost and
    standbyPartitionsByHost): its process, its query endpoint (None: it serves no queries)."""

    process_id: str
    endpoint: HostInfo | None
    active: tuple[TaskId, ...]
    standby: tuple[TaskId, ...]  # warm-ups included


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """What every member of a generation learns about every other: built once per generation
    and shared by all its SyncGroup answers (the leader's edge caches its encoding by identity)."""

    topology: Topology
    hosts: tuple[HostTasks, ...] = ()

    def active_by_host(self) -> dict[HostInfo, frozenset[TaskId]]:
        """KIP-535 ``partitionsByHost`` as tasks: every endpoint with the tasks active there."""
        return _by_host(self.hosts, lambda host: host.active)

    def standby_by_host(self) -> dict[HostInfo, frozenset[TaskId]]:
        """KIP-535 ``standbyPartitionsByHost`` as tasks (warm-ups included)."""
        return _by_host(self.hosts, lambda host: host.standby)


def _by_host(hosts, tasks_of) -> dict[HostInfo, frozenset[TaskId]]:
    result: dict[HostInfo, frozenset[TaskId]] = {}
    for host in hosts:
        tasks = tasks_of(host)
        if host.endpoint is not None and tasks:
            result[host.endpoint] = result.get(host.endpoint, frozenset()) | frozenset(tasks)
    return result


EMPTY_CLUSTER = ClusterMetadata(Topology(()))


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """One member's part of one generation's assignment, and the generation's cluster metadata.

    ``standby`` holds every standby replica the member must maintain, warm-ups included;
    ``warmup`` flags the ones that exist only to move a task (a subset of ``standby``).
    ``next_rebalance_ms`` is the wall-clock time of the scheduled probing rebalance, if any.
    ``version`` is the version the assignment is encoded at and ``error`` the assignor's error
    code (version probing: a member newer than the group learns the group's version here).
    """

    generation: int
    active: tuple[TaskId, ...] = ()
    standby: tuple[TaskId, ...] = ()
    warmup: frozenset[TaskId] = frozenset()
    next_rebalance_ms: int | None = None
    version: int = 0
    commonly_supported_version: int = 0
    error: AssignorError = AssignorError.NONE
    cluster: ClusterMetadata = EMPTY_CLUSTER

    def all_tasks(self) -> frozenset[TaskId]:
        return frozenset(self.active) | frozenset(self.standby)

    @property
    def configured_standby(self) -> tuple[TaskId, ...]:
        return tuple(t for t in self.standby if t not in self.warmup)
