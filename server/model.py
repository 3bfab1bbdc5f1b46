"""The group protocol's domain values: what the RPC edge builds from protobuf and the state
machine consumes and returns.

Frozen values only (house style, "Domain model"); the numbers of ``ErrorCode`` and
``AssignorError`` are the wire's (proto/remote_leader/v1/errors.proto), which reuses Kafka's
where the meaning is the same. Nothing here imports grpc or protobuf: the edge converts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from assignor.lag import RUNNING, UNKNOWN, Lag
from assignor.model import (
    AssignmentConfig,
    AssignmentResult,
    HostInfo,
    StateStore,
    TaskId,
    TaskSpec,
    TopicPartition,
)
from assignor.probing import Trigger as Trigger

#: The newest metadata version this server speaks (group_leader.proto, version history).
LATEST_SUPPORTED_VERSION: Final = 2
#: The first version whose assignment carries standby_partitions_by_host and warm-up marks (KIP-535).
STANDBY_HOSTS_VERSION: Final = 2


class ErrorCode(enum.IntEnum):
    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    GROUP_ID_NOT_FOUND = 69
    FENCED_INSTANCE_ID = 82
    UNKNOWN_STATE_STORE = 1001
    UNKNOWN_PARTITION = 1002


class AssignorError(enum.IntEnum):
    """Kafka Streams' AssignorError, with its numbers."""

    NONE = 0
    INCOMPLETE_SOURCE_TOPIC_METADATA = 1
    VERSION_PROBING = 2
    ASSIGNMENT_ERROR = 3
    SHUTDOWN_REQUESTED = 4


@dataclass(frozen=True, slots=True)
class SourceTopic:
    """``partition_count`` 0 means unknown (INCOMPLETE_SOURCE_TOPIC_METADATA)."""

    name: str
    partition_count: int
    partition_racks: tuple[tuple[int, frozenset[str]], ...] = ()
    # An index of partition_racks, so that building a group's tasks is linear in partitions.
    _racks_by_partition: Mapping[int, frozenset[str]] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_racks_by_partition", dict(self.partition_racks))

    def racks(self, partition: int) -> frozenset[str]:
        return self._racks_by_partition.get(partition, frozenset())


@dataclass(frozen=True, slots=True)
class Subtopology:
    id: int
    source_topics: tuple[SourceTopic, ...]
    state_stores: tuple[StateStore, ...] = ()

    @property
    def stateful(self) -> bool:
        return bool(self.state_stores)

    @property
    def logged(self) -> bool:
        return any(store.logged for store in self.state_stores)

    @property
    def partition_count(self) -> int:
        """Kafka Streams forms one task per partition of the widest source topic."""
        return max((topic.partition_count for topic in self.source_topics), default=0)

    @property
    def metadata_complete(self) -> bool:
        return bool(self.source_topics) and all(topic.partition_count > 0 for topic in self.source_topics)


@dataclass(frozen=True, slots=True)
class Topology:
    """The application's subtopologies, sorted by id; every member of a group must agree on its
    structure (ids, source topics, stores and their logging), not on its partition counts."""

    subtopologies: tuple[Subtopology, ...]

    def structure(self) -> tuple:
        return tuple(
            (sub.id, tuple(t.name for t in sub.source_topics), tuple((s.name, s.logged) for s in sub.state_stores))
            for sub in self.subtopologies
        )

    def structure_difference(self, other: Topology) -> str | None:
        """The first structural difference, worded for an INCONSISTENT_GROUP_PROTOCOL message."""
        mine = {sub.id: sub for sub in self.subtopologies}
        theirs = {sub.id: sub for sub in other.subtopologies}
        if sorted(mine) != sorted(theirs):
            return f"subtopology ids {sorted(theirs)} differ from the group's {sorted(mine)}"
        for sub_id in sorted(mine):
            a, b = mine[sub_id], theirs[sub_id]
            if [t.name for t in a.source_topics] != [t.name for t in b.source_topics]:
                return f"subtopology {sub_id}: source topics {[t.name for t in b.source_topics]} differ from the group's {[t.name for t in a.source_topics]}"
            if a.state_stores != b.state_stores:
                return f"subtopology {sub_id}: state stores differ from the group's"
        return None

    def merged(self, other: Topology) -> Topology:
        """Same structure, the larger partition count of each topic (partitions are only added),
        and the newer rack information where the other report has some."""
        theirs = {(sub.id, t.name): t for sub in other.subtopologies for t in sub.source_topics}
        subs = []
        for sub in self.subtopologies:
            topics = []
            for topic in sub.source_topics:
                new = theirs.get((sub.id, topic.name), topic)
                topics.append(
                    SourceTopic(
                        topic.name,
                        max(topic.partition_count, new.partition_count),
                        new.partition_racks or topic.partition_racks,
                    )
                )
            subs.append(Subtopology(sub.id, tuple(topics), sub.state_stores))
        return Topology(tuple(subs))

    @property
    def metadata_complete(self) -> bool:
        return all(sub.metadata_complete for sub in self.subtopologies)

    def task_ids(self) -> list[TaskId]:
        return [TaskId(sub.id, p) for sub in self.subtopologies for p in range(sub.partition_count)]

    def subtopology(self, sub_id: int) -> Subtopology | None:
        for sub in self.subtopologies:
            if sub.id == sub_id:
                return sub
        return None

    def store_subtopology(self, store: str) -> Subtopology | None:
        for sub in self.subtopologies:
            if any(s.name == store for s in sub.state_stores):
                return sub
        return None

    def task_partitions(self, task: TaskId) -> tuple[TopicPartition, ...]:
        sub = self.subtopology(task.subtopology)
        if sub is None:
            return ()
        return tuple(
            TopicPartition(t.name, task.partition, t.racks(task.partition))
            for t in sub.source_topics
            if t.partition_count > task.partition
        )

    def task_specs(self, end_offsets: Mapping[TaskId, int]) -> tuple[TaskSpec, ...]:
        """The assignor's tasks. A stateful subtopology without logged stores has
        ``changelog_offsets = 0`` (KIP-441 revision, "State with logging disabled"); a logged one
        uses the largest changelog end offset any member reported, else unbounded."""
        specs = []
        for sub in self.subtopologies:
            for p in range(sub.partition_count):
                task = TaskId(sub.id, p)
                if not sub.stateful:
                    offsets = None
                elif not sub.logged:
                    offsets = 0
                else:
                    offsets = end_offsets.get(task)
                specs.append(TaskSpec(task, sub.stateful, offsets, self.task_partitions(task)))
        return tuple(specs)


# Kafka's offset sum of a running active (TaskMetadata "LATEST_OFFSET"), as on the wire.
RUNNING_OFFSET_SUM: Final = -1


@dataclass(frozen=True, slots=True)
class LagReport:
    """A member's report of its state (KIP-441 "Rebalance Metadata": task lags), either as lags
    or as offset sums (``RUNNING_OFFSET_SUM`` for a running active) plus changelog end offsets
    (lag = end - offset sum)."""

    task_lags: Mapping[TaskId, Lag] = field(default_factory=lambda: MappingProxyType({}))
    offset_sums: Mapping[TaskId, int] = field(default_factory=lambda: MappingProxyType({}))
    end_offsets: Mapping[TaskId, int] = field(default_factory=lambda: MappingProxyType({}))

    def lags(self, end_offsets: Mapping[TaskId, int]) -> dict[TaskId, Lag]:
        """Task lags, with offset sums turned into lags against the group's end offsets."""
        lags: dict[TaskId, Lag] = {}
        for task, offset_sum in self.offset_sums.items():
            if offset_sum == RUNNING_OFFSET_SUM:
                lags[task] = RUNNING
            elif task in end_offsets:
                lags[task] = Lag.behind(max(0, end_offsets[task] - offset_sum))
            else:
                lags[task] = UNKNOWN
        lags.update(self.task_lags)
        return lags


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    latest_supported_version: int
    process_id: str
    topology: Topology
    config: AssignmentConfig
    num_threads: int = 1
    endpoint: HostInfo | None = None
    rack: str | None = None
    client_tags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    lags: LagReport = LagReport()
    error_code: AssignorError = AssignorError.NONE


# ---- requests and responses of the group RPCs -------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: Subscription
    #: The id a new member gets; drawn by the edge so that the state machine stays deterministic.
    new_member_id: str = ""
    #: The authenticated caller (server/auth.py); "" with authentication off.
    principal: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: ErrorCode
    message: str = ""
    generation_id: int = 0
    member_id: str = ""
    commonly_supported_version: int = 0


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int


@dataclass(frozen=True, slots=True)
class HostTasks:
    """One member's place in the cluster metadata of a generation (KIP-535 partitionsByHost)."""

    process_id: str
    endpoint: HostInfo | None
    active: tuple[TaskId, ...]
    standby: tuple[TaskId, ...]  # warm-ups included


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """What every member of a generation learns about every other; built once per generation
    and shared by all SyncGroup answers (the edge caches its encoding by identity)."""

    generation: int
    topology: Topology
    hosts: tuple[HostTasks, ...]


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    version: int
    commonly_supported_version: int
    active: tuple[TaskId, ...]
    standby: tuple[TaskId, ...]
    warmup: tuple[TaskId, ...]
    error: AssignorError
    next_rebalance_ms: int | None
    cluster: ClusterMetadata


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: ErrorCode
    message: str = ""
    assignment: MemberAssignment | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    lags: LagReport | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    message: str = ""
    next_rebalance_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: ErrorCode
    message: str = ""


# ---- durable state ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    """What survives a restart of one member: everything but its session deadline, its parked
    call and its lags (recomputed from ``report`` against the group's end offsets)."""

    member_id: str
    group_instance_id: str | None
    process_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    version: int
    latest_supported_version: int
    num_threads: int
    endpoint: HostInfo | None
    rack: str | None
    client_tags: Mapping[str, str]
    report: LagReport
    lags_updated_ms: int
    shutdown_requested: bool
    principal: str


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group's durable state as one handler left it, carried by the ``Persist`` effect to the
    store (docs/protocol.md, "Persistence"). ``state`` is a ``GroupState`` value (the state
    machine's enum lives in ``server.group``); members are sorted by id."""

    group_id: str
    state: str
    generation: int
    protocol_version: int
    topology: Topology | None
    config: AssignmentConfig | None
    end_offsets: Mapping[TaskId, int]
    result: AssignmentResult | None
    assignment_error: AssignorError
    last_rebalance_ms: int
    last_trigger: str
    pending_trigger: str
    next_probe_ms: int | None
    next_probe_reason: str
    members: tuple[MemberSnapshot, ...]


# ---- read-only views ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    process_id: str
    endpoint: HostInfo | None
    rack: str | None
    client_tags: Mapping[str, str]
    num_threads: int
    version: int
    latest_supported_version: int
    lags: Mapping[TaskId, Lag]
    lags_updated_ms: int
    active: tuple[TaskId, ...]
    standby: tuple[TaskId, ...]
    warmup: tuple[TaskId, ...]
    session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class GroupView:
    """DescribeGroup: state, generation, members, assignment, warm-ups, next probe and why."""

    group_id: str
    state: str
    generation: int
    commonly_supported_version: int
    members: tuple[MemberView, ...]
    topology: Topology | None
    config: AssignmentConfig | None
    next_probe_ms: int | None
    next_probe_reason: str
    reasons: tuple
    last_rebalance_ms: int
    last_rebalance_trigger: str
    assignment_error: AssignorError
    owner: ReplicaInfo | None = None


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    state: str
    generation: int
    member_count: int
    owner: ReplicaInfo | None = None


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica of the leader as clients reach it: its id, its address (host:port) and, when
    it owns a group, the epoch of its lease on that group (docs/high-availability.md)."""

    replica_id: str
    address: str
    epoch: int = 0


class NotCoordinator(Exception):
    """This replica does not own the group (Kafka's NOT_COORDINATOR): ``owner`` is the replica
    that does, or should, when known; otherwise the caller asks FindCoordinator again."""

    def __init__(self, owner: ReplicaInfo | None, message: str) -> None:
        super().__init__(message)
        self.owner = owner
        self.message = message


@dataclass(frozen=True, slots=True)
class QueryHost:
    process_id: str
    endpoint: HostInfo | None
    role: str  # assignor.model.Role value
    lag: Lag
    lag_age_ms: int


@dataclass(frozen=True, slots=True)
class RouteAnswer:
    error: ErrorCode
    message: str = ""
    task: TaskId | None = None
    hosts: tuple[QueryHost, ...] = ()
