"""The group protocol's domain values: what the RPC edge builds from protobuf and the state
machine consumes and returns.

Frozen values only (house style, "Domain model"); the numbers of ``ErrorCode`` are the wire's
(proto/remote_leader/v1/errors.proto), which reuses Kafka's where the meaning is the same. The
shapes the worker shares (topology, member assignment, cluster metadata) are ``assignor.topology``
and ``assignor.cluster``. Nothing here imports grpc or protobuf: the edge converts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from assignor.cluster import AssignorError, MemberAssignment
from assignor.lag import RUNNING, UNKNOWN, Lag
from assignor.model import AssignmentConfig, AssignmentResult, HostInfo, TaskId
from assignor.probing import Trigger as Trigger
from assignor.topology import Topology

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
    #: How long before it was sent the report was measured (a sidecar forwards its worker's last
    #: one): the member's lags date from then. Not stored: ``lags_updated_ms`` is.
    age_ms: int = 0

    def lags(self, end_offsets: Mapping[TaskId, int]) -> dict[TaskId, Lag]:
        """Task lags, with offset sums turned into lags against the group's end offsets. An offset
        sum beyond the changelog's end (a changelog deleted and recreated, state from another
        run) is state that must be rebuilt: the whole changelog behind, as Kafka's ClientState
        counts it, so that a client whose state can be reused is preferred."""
        lags: dict[TaskId, Lag] = {}
        for task, offset_sum in self.offset_sums.items():
            if offset_sum == RUNNING_OFFSET_SUM:
                lags[task] = RUNNING
            elif task in end_offsets:
                end = end_offsets[task]
                lags[task] = Lag.behind(end - offset_sum if offset_sum <= end else end)
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
    #: The principal whose join created the group: it counts against their --max-groups-per-principal
    creator: str = ""
    #: Members whose join was answered and who have not synced (``Group.unsynced``), sorted; None
    #: in the snapshots of servers that did not store it
    unsynced: tuple[str, ...] | None = None
    #: The group's memory of who ran what (``Group.last_assignment``): ``result`` itself unless
    #: the generation ended without an assignment
    last_assignment: AssignmentResult | None = None


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


class StoreUnavailable(NotCoordinator):
    """A write that PostgreSQL did not take (unreachable, a connection lost): this replica
    cannot serve the group until it reloads it; not a takeover (no fenced write is counted)."""


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
