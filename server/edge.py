"""The RPC edge: the ``GroupLeader`` servicer, the only code that converts protobuf to domain
values and back.

Every request is validated here, before anything changes: a malformed one is answered with
INVALID_ARGUMENT whose message starts with the offending field's path
(``subscription.num_threads: ...``). Protocol outcomes travel as ``error_code`` in the
response; gRPC status codes are for contract faults (INVALID_ARGUMENT) and for a server that is
draining or still loading (UNAVAILABLE), raised in one place (``_guard``).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import re
import threading
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

import grpc
from google.protobuf import message_factory

from assignor import STRATEGIES
from assignor.cluster import AssignorError, ClusterMetadata, MemberAssignment
from assignor.lag import UNKNOWN, Lag
from assignor.model import (
    AssignmentConfig,
    AssignmentProblem,
    AssignmentResult,
    AssignorKind,
    HostInfo,
    InvalidInput,
    Role,
    StateStore,
    TaskId,
)
from assignor.scenario import parse_problem
from assignor.topology import SourceTopic, Subtopology, Topology
from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from server.auth import AuthError, Denied, Gate, Operation, Unauthenticated, check_member_call
from server.auth import check_join as check_join_owner
from server.failures import contain, decoder
from server.limits import (
    ASSIGN_LIMITS,
    GROUP_CAPACITY_LIMITS,
    HEARTBEAT_LIMITS,
    JOIN_LIMITS,
    OFF_LOOP_BYTES,
    OFF_LOOP_TASKS,
    PRINCIPAL_QUOTA_LIMIT,
    BoundedWork,
    Limits,
    check_assign,
    check_group_capacity,
    check_heartbeat,
    check_join,
    check_merged_topology,
    limit_code,
)
from server.model import (
    RUNNING_OFFSET_SUM,
    STANDBY_HOSTS_VERSION,
    ErrorCode,
    GroupView,
    HeartbeatRequest,
    JoinGroupRequest,
    LagReport,
    LeaveGroupRequest,
    NotCoordinator,
    ReplicaInfo,
    Subscription,
    SyncGroupRequest,
)
from server.runtime import Coordinator

_MAX_ID = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Beyond ASCII, by Unicode category: C1 controls (an 8-bit CSI among them), format characters
#: (the bidirectional overrides that make a log line read other than it is) and line separators.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
#: Distinct topologies and configs kept parsed: every member of a group sends the same ones.
_PARSED_CACHE = 64
# Each registered assignor kind (assignor.STRATEGIES) is the wire's ASSIGNOR_KIND_<NAME>.
_ASSIGNOR_KIND_TO_PB = {kind: apb.AssignorKind.Value(f"ASSIGNOR_KIND_{kind.name}") for kind in STRATEGIES}
_ASSIGNOR_KINDS = {
    apb.ASSIGNOR_KIND_UNSPECIFIED: AssignorKind.HIGH_AVAILABILITY,
    **{number: kind for kind, number in _ASSIGNOR_KIND_TO_PB.items()},
}
_STRATEGIES = {
    apb.RACK_AWARE_STRATEGY_UNSPECIFIED: "none",
    apb.RACK_AWARE_STRATEGY_NONE: "none",
    apb.RACK_AWARE_STRATEGY_MIN_TRAFFIC: "min_traffic",
    apb.RACK_AWARE_STRATEGY_BALANCE_SUBTOPOLOGY: "balance_subtopology",
}
_STRATEGY_TO_PB = {v: k for k, v in _STRATEGIES.items() if k != apb.RACK_AWARE_STRATEGY_UNSPECIFIED}
_ROLE_TO_PB = {Role.ACTIVE.value: apb.ROLE_ACTIVE, Role.STANDBY.value: apb.ROLE_STANDBY, Role.WARMUP.value: apb.ROLE_WARMUP}
_STATE_TO_PB = {
    "Empty": pb.GROUP_STATE_EMPTY,
    "PreparingRebalance": pb.GROUP_STATE_PREPARING_REBALANCE,
    "CompletingRebalance": pb.GROUP_STATE_COMPLETING_REBALANCE,
    "Stable": pb.GROUP_STATE_STABLE,
    "Dead": pb.GROUP_STATE_DEAD,
}
_OPTIONAL_CONFIG = (
    "acceptable_recovery_lag",
    "max_warmup_replicas",
    "num_standby_replicas",
    "probing_rebalance_interval_ms",
    "balance_factor",
    "rack_aware_traffic_cost",
    "rack_aware_non_overlap_cost",
)


# ---- protobuf -> domain ---------------------------------------------------------------------------


def _identifier(value: str, where: str, *, required: bool) -> str:
    if required and not value:
        raise InvalidInput(where, "must not be empty")
    if len(value) > _MAX_ID:
        raise InvalidInput(where, f"longer than {_MAX_ID} characters")
    if _CONTROL.search(value) or (not value.isascii() and any(
            unicodedata.category(character) in _CONTROL_CATEGORIES for character in value)):
        raise InvalidInput(where, "contains control characters")
    return value


def _instance_id(request: Any, where: str = "group_instance_id") -> str | None:
    if not request.HasField("group_instance_id"):
        return None
    return _identifier(request.group_instance_id, where, required=True)


def _task(msg: apb.TaskId, where: str) -> TaskId:
    return TaskId.checked(msg.subtopology, msg.partition, where)


def _task_of(parent: Any, name: str, where: str) -> TaskId:
    """The task id in ``parent``'s field ``name``, which must be set: left out, proto3 reads it
    as 0_0, and a client that forgot it reported lags against the wrong task (an audit's find)."""
    if not parent.HasField(name):
        raise InvalidInput(where, "is required")
    return _task(getattr(parent, name), where)


def config_from_proto(msg: apb.AssignmentConfig, where: str) -> AssignmentConfig:
    if msg.assignor not in _ASSIGNOR_KINDS:
        raise InvalidInput(f"{where}.assignor", f"unknown assignor kind {msg.assignor}")
    if msg.rack_aware_strategy not in _STRATEGIES:
        raise InvalidInput(f"{where}.rack_aware_strategy", f"unknown strategy {msg.rack_aware_strategy}")
    for i, tag in enumerate(msg.rack_aware_assignment_tags):
        _identifier(tag, f"{where}.rack_aware_assignment_tags[{i}]", required=True)
    values: dict[str, Any] = {
        "assignor": _ASSIGNOR_KINDS[msg.assignor],
        "rack_aware_strategy": _STRATEGIES[msg.rack_aware_strategy],
        "rack_aware_assignment_tags": tuple(msg.rack_aware_assignment_tags),
    }
    for name in _OPTIONAL_CONFIG:
        if msg.HasField(name):
            values[name] = getattr(msg, name)
    try:
        return AssignmentConfig(**values)
    except InvalidInput as error:
        raise InvalidInput(where + error.field.removeprefix("config"), error.message) from None


def topology_from_proto(msg: pb.Topology, where: str) -> Topology:
    if not msg.subtopologies:
        raise InvalidInput(f"{where}.subtopologies", "must not be empty")
    seen_ids: set[int] = set()
    stores: set[str] = set()
    sources: dict[str, int] = {}  # topic -> the subtopology it feeds (one, as in Kafka Streams)
    subs = []
    for i, sub in enumerate(msg.subtopologies):
        here = f"{where}.subtopologies[{i}]"
        if sub.id < 0 or sub.id in seen_ids:
            raise InvalidInput(f"{here}.id", f"must be a unique id >= 0, got {sub.id}")
        seen_ids.add(sub.id)
        if not sub.source_topics:
            raise InvalidInput(f"{here}.source_topics", "must not be empty")
        topics, names = [], set()
        for j, topic in enumerate(sub.source_topics):
            there = f"{here}.source_topics[{j}]"
            name = _identifier(topic.name, f"{there}.name", required=True)
            if name in names:
                raise InvalidInput(f"{there}.name", f"duplicate source topic {name!r}")
            if name in sources:
                raise InvalidInput(f"{there}.name", f"source topic {name!r} already feeds subtopology {sources[name]}: "
                                                    "a topic is the source of one subtopology")
            names.add(name)
            sources[name] = sub.id
            if topic.partition_count < 0:
                raise InvalidInput(f"{there}.partition_count", f"must be >= 0, got {topic.partition_count}")
            racks = []
            for k, pr in enumerate(topic.partition_racks):
                if pr.partition < 0 or (topic.partition_count and pr.partition >= topic.partition_count):
                    raise InvalidInput(f"{there}.partition_racks[{k}].partition", f"no partition {pr.partition}")
                for m, rack in enumerate(pr.racks):
                    _identifier(rack, f"{there}.partition_racks[{k}].racks[{m}]", required=True)
                racks.append((pr.partition, frozenset(pr.racks)))
            topics.append(SourceTopic(name, topic.partition_count, tuple(sorted(racks, key=lambda r: r[0]))))
        state_stores = []
        for j, store in enumerate(sub.state_stores):
            name = _identifier(store.name, f"{here}.state_stores[{j}].name", required=True)
            if name in stores:
                raise InvalidInput(f"{here}.state_stores[{j}].name", f"duplicate state store {name!r}")
            stores.add(name)
            state_stores.append(StateStore(name, store.logged))
        subs.append(
            Subtopology(sub.id, tuple(sorted(topics, key=lambda t: t.name)), tuple(sorted(state_stores, key=lambda s: s.name)))
        )
    return Topology(tuple(sorted(subs, key=lambda s: s.id)))


@functools.lru_cache(maxsize=_PARSED_CACHE)
def _topology_from_bytes(data: bytes, where: str) -> Topology:
    return topology_from_proto(pb.Topology.FromString(data), where)


@functools.lru_cache(maxsize=_PARSED_CACHE)
def _config_from_bytes(data: bytes, where: str) -> AssignmentConfig:
    return config_from_proto(apb.AssignmentConfig.FromString(data), where)


def _parsed(msg: Any, parse: Any, where: str) -> Any:
    """Every member of a group sends the same topology and config: validate and convert each
    distinct one once, keyed by its deterministic encoding (a bad one raises every time: only
    successes are cached). The same bytes also give the same object, which lets the group
    skip comparing it with its own (``Group._inconsistency``)."""
    return parse(msg.SerializeToString(deterministic=True), where)


_WIRE_UNKNOWN: Final = UNKNOWN.to_wire()


def _task_values(items: Any, where: str, value_field: str, minimum: int) -> Mapping[TaskId, int]:
    values: dict[TaskId, int] = {}
    for i, item in enumerate(items):
        task = _task_of(item, "task", f"{where}[{i}].task")
        if task in values:
            raise InvalidInput(f"{where}[{i}].task", f"duplicate task {task}")
        value = getattr(item, value_field)
        if value < minimum:
            raise InvalidInput(f"{where}[{i}].{value_field}", f"must be >= {minimum}, got {value}")
        values[task] = value
    return MappingProxyType(values)


def lags_from_proto(msg: pb.LagReport, where: str) -> LagReport:
    task_lags = _task_values(msg.task_lags, f"{where}.task_lags", "lag", _WIRE_UNKNOWN)
    if msg.age_ms < 0:
        raise InvalidInput(f"{where}.age_ms", f"must be >= 0, got {msg.age_ms}")
    return LagReport(
        task_lags=MappingProxyType({task: Lag.from_wire(lag) for task, lag in task_lags.items()}),
        offset_sums=_task_values(msg.task_offset_sums, f"{where}.task_offset_sums", "offset_sum", RUNNING_OFFSET_SUM),
        end_offsets=_task_values(msg.changelog_end_offsets, f"{where}.changelog_end_offsets", "end_offset_sum", 0),
        age_ms=msg.age_ms,
    )


def subscription_from_proto(msg: pb.Subscription, where: str = "subscription") -> Subscription:
    if msg.version < 1:
        raise InvalidInput(f"{where}.version", f"must be >= 1, got {msg.version}")
    if msg.latest_supported_version < msg.version:
        raise InvalidInput(f"{where}.latest_supported_version", f"must be >= version {msg.version}, got {msg.latest_supported_version}")
    _identifier(msg.process_id, f"{where}.process_id", required=True)  # before it is echoed: bounded
    try:
        process_id = str(uuid.UUID(msg.process_id))
    except ValueError:
        raise InvalidInput(f"{where}.process_id", f"expected a UUID, got {msg.process_id!r}") from None
    endpoint = None
    if msg.HasField("endpoint"):
        _identifier(msg.endpoint.host, f"{where}.endpoint.host", required=True)
        if not 1 <= msg.endpoint.port <= 65535:
            raise InvalidInput(f"{where}.endpoint.port", f"must be in 1..65535, got {msg.endpoint.port}")
        endpoint = HostInfo(msg.endpoint.host, msg.endpoint.port)
    rack = _identifier(msg.rack, f"{where}.rack", required=True) if msg.HasField("rack") else None
    for key, value in msg.client_tags.items():
        _identifier(key, f"{where}.client_tags", required=True)
        _identifier(value, f"{where}.client_tags[{key!r}]", required=True)
    if msg.num_threads < 1:
        raise InvalidInput(f"{where}.num_threads", f"must be >= 1, got {msg.num_threads}")
    if not msg.HasField("topology"):
        raise InvalidInput(f"{where}.topology", "is required")
    if msg.error_code not in (AssignorError.NONE, AssignorError.SHUTDOWN_REQUESTED):
        raise InvalidInput(f"{where}.error_code", "only NONE or SHUTDOWN_REQUESTED may be sent")
    return Subscription(
        version=msg.version,
        latest_supported_version=msg.latest_supported_version,
        process_id=process_id,
        topology=_parsed(msg.topology, _topology_from_bytes, f"{where}.topology"),
        config=_parsed(msg.config, _config_from_bytes, f"{where}.config"),
        num_threads=msg.num_threads,
        endpoint=endpoint,
        rack=rack,
        client_tags=MappingProxyType(dict(sorted(msg.client_tags.items()))),
        lags=lags_from_proto(msg.lags, f"{where}.lags"),
        error_code=AssignorError(msg.error_code),
    )


def join_from_proto(msg: pb.JoinGroupRequest) -> JoinGroupRequest:
    group_id = _identifier(msg.group_id, "group_id", required=True)
    member_id = _identifier(msg.member_id, "member_id", required=False)
    instance = _instance_id(msg)
    if msg.session_timeout_ms <= 0:
        raise InvalidInput("session_timeout_ms", f"must be > 0, got {msg.session_timeout_ms}")
    if msg.rebalance_timeout_ms < 0:
        raise InvalidInput("rebalance_timeout_ms", f"must be >= 0, got {msg.rebalance_timeout_ms}")
    if not msg.HasField("subscription"):
        raise InvalidInput("subscription", "is required")
    subscription = subscription_from_proto(msg.subscription)
    return JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=instance,
        session_timeout_ms=msg.session_timeout_ms,
        rebalance_timeout_ms=msg.rebalance_timeout_ms,
        subscription=subscription,
        # within the member id's own limit whatever the instance id (the uuid: 37 characters); a
        # long instance id made an id every later call refused (an audit's find)
        new_member_id=f"{(instance or 'member')[:_MAX_ID - 37]}-{uuid.uuid4()}",
    )


def _member_fields(msg: Any) -> tuple[str, str, str | None]:
    return (
        _identifier(msg.group_id, "group_id", required=True),
        _identifier(msg.member_id, "member_id", required=True),
        _instance_id(msg),
    )


def _leave_fields(msg: Any) -> tuple[str, str, str | None]:
    """LeaveGroup may name a static member by its instance id alone (KIP-345: how an admin
    removes one, Kafka's removeMembersFromConsumerGroup)."""
    instance = _instance_id(msg)
    return (
        _identifier(msg.group_id, "group_id", required=True),
        _identifier(msg.member_id, "member_id", required=instance is None),
        instance,
    )


#: ListGroups: the page size when the caller asks for none, and the largest it may ask for.
LIST_GROUPS_PAGE = 1_000
_TOKEN_PREFIX = "after:"


def _page_token(last_group_id: str) -> str:
    return base64.urlsafe_b64encode((_TOKEN_PREFIX + last_group_id).encode()).decode()


def _page_from_proto(msg: pb.ListGroupsRequest) -> tuple[int, str]:
    """(page size, the group id the page starts after)."""
    if msg.page_size < 0:
        raise InvalidInput("page_size", f"must be >= 0, got {msg.page_size}")
    after = ""
    if msg.page_token:
        try:
            text = base64.urlsafe_b64decode(msg.page_token.encode("ascii")).decode()
        except (ValueError, UnicodeError):
            text = ""
        if not text.startswith(_TOKEN_PREFIX):
            raise InvalidInput("page_token", "not a next_page_token of this server")
        after = text.removeprefix(_TOKEN_PREFIX)
    return min(msg.page_size or LIST_GROUPS_PAGE, LIST_GROUPS_PAGE), after


# ---- domain -> protobuf -------------------------------------------------------------------------


def task_to_proto(task: TaskId) -> apb.TaskId:
    return apb.TaskId(subtopology=task.subtopology, partition=task.partition)


def config_to_proto(config: AssignmentConfig) -> apb.AssignmentConfig:
    msg = apb.AssignmentConfig(
        assignor=_ASSIGNOR_KIND_TO_PB[config.assignor],
        rack_aware_strategy=_STRATEGY_TO_PB[str(config.rack_aware_strategy)],
        rack_aware_assignment_tags=list(config.rack_aware_assignment_tags),
    )
    for name in _OPTIONAL_CONFIG:
        value = getattr(config, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def topology_to_proto(topology: Topology) -> pb.Topology:
    return pb.Topology(
        subtopologies=[
            pb.Subtopology(
                id=sub.id,
                source_topics=[
                    pb.SourceTopic(
                        name=t.name,
                        partition_count=t.partition_count,
                        partition_racks=[pb.PartitionRacks(partition=p, racks=sorted(r)) for p, r in t.partition_racks],
                    )
                    for t in sub.source_topics
                ],
                state_stores=[pb.StateStore(name=s.name, logged=s.logged) for s in sub.state_stores],
            )
            for sub in topology.subtopologies
        ]
    )


def _host_partitions(cluster: ClusterMetadata, standby: bool) -> list[pb.HostPartitions]:
    topology = cluster.topology
    stores_by_sub = {sub.id: [s.name for s in sub.state_stores] for sub in topology.subtopologies}
    hosts = []
    for host in cluster.hosts:
        if host.endpoint is None:
            continue
        tasks = host.standby if standby else host.active
        if not tasks:
            continue
        partitions = [
            apb.TopicPartition(topic=tp.topic, partition=tp.partition) for task in tasks for tp in topology.task_partitions(task)
        ]
        store_partitions = [
            pb.StorePartition(store=name, partition=task.partition) for task in tasks for name in stores_by_sub.get(task.subtopology, ())
        ]
        hosts.append(
            pb.HostPartitions(
                host=pb.HostInfo(host=host.endpoint.host, port=host.endpoint.port),
                process_id=host.process_id,
                partitions=partitions,
                store_partitions=store_partitions,
            )
        )
    return hosts


class _HostMapCache:
    """The host maps of a generation are the same for every member: encode them once, as the
    serialised bytes of a SyncGroupResponse holding only them. Protobuf merges a message field
    that occurs twice, so appending these bytes to a member's own serialised answer yields its
    whole answer, without copying n hosts into each of n answers."""

    def __init__(self, size: int = 64) -> None:
        self._entries: dict[tuple[int, int], tuple[ClusterMetadata, bytes]] = {}
        self._size = size
        # A large group's answers are encoded in worker threads, many at once: one of them
        # encodes a generation's maps while the others wait for it (a lock per key), and the
        # table itself changes only under a short lock.
        self._table_lock = threading.Lock()
        self._key_locks: dict[tuple[int, int], threading.Lock] = {}

    def get(self, cluster: ClusterMetadata, version: int) -> bytes:
        key = (id(cluster), version)
        with self._table_lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is cluster:
                return entry[1]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._table_lock:
                entry = self._entries.get(key)
            if entry is not None and entry[0] is cluster:
                return entry[1]
            template = pb.Assignment(partitions_by_host=_host_partitions(cluster, standby=False),
                                     topic_partition_counts={t.name: t.partition_count for sub in cluster.topology.subtopologies
                                                             for t in sub.source_topics})
            if version >= STANDBY_HOSTS_VERSION:
                template.standby_partitions_by_host.extend(_host_partitions(cluster, standby=True))
            encoded = pb.SyncGroupResponse(assignment=template).SerializeToString()
            with self._table_lock:
                if len(self._entries) >= self._size:
                    oldest = next(iter(self._entries))
                    del self._entries[oldest]
                    self._key_locks.pop(oldest, None)
                self._entries[key] = (cluster, encoded)
            return encoded


def assignment_to_proto(assignment: MemberAssignment) -> pb.Assignment:
    """The member's own part of its assignment (the host maps travel separately: _HostMapCache)."""
    topology = assignment.cluster.topology
    msg = pb.Assignment()
    msg.version = assignment.version
    msg.commonly_supported_version = assignment.commonly_supported_version
    msg.error_code = int(assignment.error)
    if assignment.next_rebalance_ms is not None:
        msg.next_rebalance_ms = assignment.next_rebalance_ms
    mark_warmups = assignment.version >= STANDBY_HOSTS_VERSION
    for task in assignment.active:
        msg.active_tasks.add(task=task_to_proto(task), partitions=_partitions(topology, task))
    for task in assignment.standby:
        msg.standby_tasks.add(task=task_to_proto(task), partitions=_partitions(topology, task),
                              warmup=mark_warmups and task in assignment.warmup)
    return msg


def _partitions(topology: Topology, task: TaskId) -> list[apb.TopicPartition]:
    return [apb.TopicPartition(topic=tp.topic, partition=tp.partition, racks=sorted(tp.racks)) for tp in topology.task_partitions(task)]


def _lag_list(lags: Mapping[TaskId, Lag]) -> list[apb.TaskLag]:
    return [apb.TaskLag(task=task_to_proto(t), lag=lag.to_wire()) for t, lag in sorted(lags.items())]


def reason_to_proto(reason: Any) -> apb.Reason:
    msg = apb.Reason(task=task_to_proto(reason.task), role=_ROLE_TO_PB[str(reason.role)], code=str(reason.code), detail=reason.detail)
    if reason.client is not None:
        msg.client = reason.client
    return msg


def result_to_proto(result: AssignmentResult) -> apb.AssignmentResult:
    msg = apb.AssignmentResult(
        clients=[
            apb.ClientAssignment(
                client_id=cid,
                active=[task_to_proto(t) for t in a.active],
                standby=[task_to_proto(t) for t in a.standby],
                warmup=[task_to_proto(t) for t in a.warmup],
            )
            for cid, a in sorted(result.clients.items())
        ],
        probing_rebalance_needed=result.probing_rebalance_needed,
        reasons=[reason_to_proto(r) for r in result.reasons],
        rack_awareness=apb.RackAwareReport(
            strategy=_STRATEGY_TO_PB[str(result.rack_awareness.strategy)],
            enabled=result.rack_awareness.enabled,
            disabled_reason=result.rack_awareness.disabled_reason,
            cross_rack_before=result.rack_awareness.cross_rack_before,
            cross_rack_after=result.rack_awareness.cross_rack_after,
        ),
    )
    if result.followup_rebalance_ms is not None:
        msg.followup_rebalance_ms = result.followup_rebalance_ms
    return msg


def describe_to_proto(view: GroupView) -> pb.GroupDescription:
    msg = pb.GroupDescription(
        group_id=view.group_id,
        state=_STATE_TO_PB[view.state],
        generation_id=view.generation,
        commonly_supported_version=view.commonly_supported_version,
        next_probe_reason=view.next_probe_reason,
        reasons=[reason_to_proto(r) for r in view.reasons],
        last_rebalance_ms=view.last_rebalance_ms,
        last_rebalance_trigger=view.last_rebalance_trigger,
        assignment_error=int(view.assignment_error),
    )
    if view.topology is not None:
        msg.topology.CopyFrom(topology_to_proto(view.topology))
    if view.config is not None:
        msg.config.CopyFrom(config_to_proto(view.config))
    if view.next_probe_ms is not None:
        msg.next_probe_ms = view.next_probe_ms
    for m in view.members:
        member = msg.members.add(
            member_id=m.member_id,
            process_id=m.process_id,
            client_tags=dict(m.client_tags),
            num_threads=m.num_threads,
            version=m.version,
            latest_supported_version=m.latest_supported_version,
            lags=_lag_list(m.lags),
            lags_updated_ms=m.lags_updated_ms,
            active=[task_to_proto(t) for t in m.active],
            standby=[task_to_proto(t) for t in m.standby],
            warmup=[task_to_proto(t) for t in m.warmup],
            session_timeout_ms=m.session_timeout_ms,
        )
        if m.group_instance_id is not None:
            member.group_instance_id = m.group_instance_id
        if m.endpoint is not None:
            member.endpoint.CopyFrom(pb.HostInfo(host=m.endpoint.host, port=m.endpoint.port))
        if m.rack is not None:
            member.rack = m.rack
    if view.owner is not None:
        msg.owner.CopyFrom(coordinator_to_proto(view.owner))
    return msg


# ---- the stateless Assign RPC -------------------------------------------------------------------


def _lag_json(lag: int) -> int | str:
    """A wire lag as scenario JSON; a value that is no lag goes through for the scenario
    parser to name its field."""
    return Lag.from_wire(lag).to_json() if lag >= _WIRE_UNKNOWN else lag



def _route_lag(lag: Lag) -> int:
    """group_leader.proto QueryHost.lag: offsets behind, 0 for a running active, -2 unknown."""
    offsets = lag.known_offsets
    return UNKNOWN.to_wire() if offsets is None else offsets


def problem_document_from_proto(msg: apb.AssignmentProblem) -> dict[str, Any]:
    """The scenario document (docs/scenario-format.md) this problem is the twin of; the
    scenario parser then validates it and names fields the way the document does."""
    config = config_from_proto(msg.config, "config")
    tasks = []
    for i, spec in enumerate(msg.tasks):
        task = _task_of(spec, "id", f"tasks[{i}].id")
        document: dict[str, Any] = {
            "id": str(task),
            "stateful": spec.stateful,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "racks": list(tp.racks)} for tp in spec.partitions],
        }
        if spec.HasField("changelog_offsets"):
            document["changelog_offsets"] = spec.changelog_offsets
        tasks.append(document)
    clients = []
    for i, client in enumerate(msg.clients):
        lags: dict[str, int | str] = {}
        for j, item in enumerate(client.lags):
            key = str(_task_of(item, "task", f"clients[{i}].lags[{j}].task"))
            if key in lags:
                raise InvalidInput(f"clients[{i}].lags[{j}].task", f"duplicate task {key}")
            lags[key] = _lag_json(item.lag)
        document = {
            "id": client.id,
            "threads": client.threads,
            "tags": dict(client.tags),
            "prev_active": [str(_task(t, f"clients[{i}].prev_active[{j}]")) for j, t in enumerate(client.prev_active)],
            "prev_standby": [str(_task(t, f"clients[{i}].prev_standby[{j}]")) for j, t in enumerate(client.prev_standby)],
            "lags": lags,
        }
        if client.HasField("rack"):
            document["rack"] = client.rack
        clients.append(document)
    config_doc = {name: getattr(config, name) for name in AssignmentConfig.__dataclass_fields__}
    config_doc["assignor"] = str(config.assignor)
    config_doc["rack_aware_strategy"] = str(config.rack_aware_strategy)
    config_doc["rack_aware_assignment_tags"] = list(config.rack_aware_assignment_tags)
    return {"version": 1, "config": config_doc, "tasks": tasks, "clients": clients}


# ---- the servicer ---------------------------------------------------------------------------------


def coordinator_to_proto(replica: ReplicaInfo) -> pb.Coordinator:
    return pb.Coordinator(replica_id=replica.replica_id, address=replica.address, epoch=replica.epoch)


def _redirects(response_type: Any):
    """Answer a call that reached a replica which does not own its group with NOT_COORDINATOR
    and the owner, when known, in the response of the call's own type (Kafka's answer)."""

    def wrap(method):
        @functools.wraps(method)
        async def handler(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                return await method(self, request, context)
            except NotCoordinator as moved:
                response = response_type(error_code=int(ErrorCode.NOT_COORDINATOR), error_message=moved.message)
                if moved.owner is not None:
                    response.coordinator.CopyFrom(coordinator_to_proto(moved.owner))
                return response

        return handler

    return wrap


_SERVICE = pb.DESCRIPTOR.services_by_name["GroupLeader"]
METHODS = tuple(method.name for method in _SERVICE.methods)
_CONCURRENT_ASSIGNS = "max_concurrent_assigns"
_OWN_IDS = (Denied.MEMBER_ID_OWNER, Denied.INSTANCE_ID_OWNER)
#: What each RPC may be refused for besides its limits and, with authentication on, failing to
#: authenticate (any RPC may): ``refusals``.
_REFUSED = {
    "JoinGroup": (*JOIN_LIMITS, *GROUP_CAPACITY_LIMITS, Denied.SHUTDOWN_NOT_MEMBER),
    "Heartbeat": HEARTBEAT_LIMITS,
    "Assign": (*ASSIGN_LIMITS, _CONCURRENT_ASSIGNS),
}
#: Only with authentication on: anonymous callers own every id alike and have no quota.
_REFUSED_WITH_AUTH = {
    "JoinGroup": (Denied.ACL, *_OWN_IDS, Denied.PROCESS_ID_OWNER, PRINCIPAL_QUOTA_LIMIT),
    "SyncGroup": (Denied.ACL, *_OWN_IDS),
    "Heartbeat": (Denied.ACL, *_OWN_IDS),
    "LeaveGroup": (Denied.ACL, *_OWN_IDS),
    "DescribeGroup": (Denied.ACL,),
    "Assign": (Denied.ACL,),
    "RouteQuery": (Denied.ACL,),
}


def refusals(authentication: bool) -> Iterator[tuple[str, str, str]]:
    """(method, code, reason) of each refusal an RPC of this server may meet, which the metrics
    export at 0 from the start (``Metrics.expect_refused``): those it cannot meet (authentication
    off) stay out."""
    for method in METHODS:
        reasons = [*_REFUSED.get(method, ())]
        if authentication:
            reasons += [*Unauthenticated, *_REFUSED_WITH_AUTH.get(method, ())]
        for reason in dict.fromkeys(reasons):
            code = reason.code if isinstance(reason, Unauthenticated | Denied) else limit_code(reason)
            yield method, code.name, str(reason)


class GroupLeaderServicer(pb_grpc.GroupLeaderServicer):
    def __init__(self, coordinator: Coordinator, limits: Limits | None = None, gate: Gate | None = None,
                 assign: Callable[[AssignmentProblem], Awaitable[AssignmentResult]] | None = None) -> None:
        """``assign`` runs the ``Assign`` calls' problems: by default where the groups' run; the
        server gives them a runner of their own (``server.app``), so that no group's rebalance
        waits behind them."""
        self._coordinator = coordinator
        self._host_maps = _HostMapCache()
        self.limits = limits or Limits()
        self.gate = gate or Gate()
        self._assign = assign or coordinator.assign
        self._assign_calls = BoundedWork(_CONCURRENT_ASSIGNS, self.limits.max_concurrent_assigns, "Assign calls")

    async def _admitted(self, context: grpc.aio.ServicerContext, method: str, principal: Any, group_id: str,
                        call: Any) -> Any:
        """Await a coordinator call whose admit check (run under the group's lock) may refuse it:
        a full group or server, or an id that belongs to another principal (logged with its group)."""
        try:
            return await call  # a LimitExceeded goes on to ``server.failures.contain``
        except AuthError as error:
            self.gate.refuse(method, principal, error, group_id)
            await context.abort(error.code, str(error))

    async def _guard(self, context: grpc.aio.ServicerContext, convert, *args: Any, off_loop: bool = False) -> Any:
        """The one place where contract faults become gRPC status codes; ``off_loop`` converts
        in a worker thread (a large request is seconds of Python work)."""
        if self._coordinator.draining or not self._coordinator.loaded:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is draining or loading its state")
        try:
            return await asyncio.to_thread(convert, *args) if off_loop else convert(*args)
        except InvalidInput as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{error.field}: {error.message}")
        # LimitExceeded goes on to ``server.failures.contain``, which counts and answers it

    async def _guard_large(self, context: grpc.aio.ServicerContext, request: Any, check, convert) -> Any:
        """``_guard`` for a request that may be large: the limits are checked first (they only
        count), and a request over ``OFF_LOOP_BYTES`` is converted in a worker thread, so that
        the event loop keeps answering heartbeats and health checks meanwhile."""
        await self._guard(context, check, self.limits, request)
        return await self._guard(context, convert, request, off_loop=request.ByteSize() > OFF_LOOP_BYTES)

    @_redirects(pb.JoinGroupResponse)
    async def JoinGroup(self, request: pb.JoinGroupRequest, context: grpc.aio.ServicerContext) -> pb.JoinGroupResponse:
        principal = await self.gate.check(context, "JoinGroup", Operation.MEMBER, request.group_id)
        domain = await self._guard_large(context, request, check_join, join_from_proto)
        domain = dataclasses.replace(domain, principal=principal.name)
        shutdown = domain.subscription.error_code == AssignorError.SHUTDOWN_REQUESTED

        def admit(group: Any, groups: Mapping[str, Any]) -> None:
            check_join_owner(group, principal, domain.member_id, domain.group_instance_id, domain.subscription.process_id,
                             shutdown, owners=self.gate.enabled)
            check_group_capacity(self.limits, group, groups, domain.member_id, domain.group_instance_id, principal.name)
            check_merged_topology(self.limits, group, domain.subscription.topology, "subscription.topology (merged with the group's)")

        response = await self._admitted(context, "JoinGroup", principal, domain.group_id, self._coordinator.join(domain, admit))
        return pb.JoinGroupResponse(
            error_code=int(response.error),
            error_message=response.message,
            generation_id=response.generation_id,
            member_id=response.member_id,
            commonly_supported_version=response.commonly_supported_version,
        )

    @_redirects(pb.SyncGroupResponse)
    async def SyncGroup(self, request: pb.SyncGroupRequest, context: grpc.aio.ServicerContext) -> pb.SyncGroupResponse | bytes:
        principal = await self.gate.check(context, "SyncGroup", Operation.MEMBER, request.group_id)
        group_id, member_id, instance = await self._guard(context, _member_fields, request)
        response = await self._admitted(context, "SyncGroup", principal, group_id, self._coordinator.sync(
            SyncGroupRequest(group_id, member_id, instance, request.generation_id),
            lambda group, _n: check_member_call(group, principal, member_id, instance)))
        msg = pb.SyncGroupResponse(error_code=int(response.error), error_message=response.message)
        if response.assignment is None:
            return msg
        assignment = response.assignment

        def encode() -> bytes:
            msg.assignment.CopyFrom(assignment_to_proto(assignment))
            return msg.SerializeToString() + self._host_maps.get(assignment.cluster, assignment.version)

        if assignment.cluster.topology.task_count <= OFF_LOOP_TASKS:
            return encode()
        return await asyncio.to_thread(encode)

    @_redirects(pb.HeartbeatResponse)
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext) -> pb.HeartbeatResponse:
        def convert(msg: pb.HeartbeatRequest) -> HeartbeatRequest:
            group_id, member_id, instance = _member_fields(msg)
            lags = lags_from_proto(msg.lags, "lags") if msg.HasField("lags") else None
            return HeartbeatRequest(group_id, member_id, instance, msg.generation_id, lags)

        principal = await self.gate.check(context, "Heartbeat", Operation.MEMBER, request.group_id)
        domain = await self._guard_large(context, request, check_heartbeat, convert)
        response = await self._admitted(context, "Heartbeat", principal, domain.group_id, self._coordinator.heartbeat(
            domain, lambda group, _n: check_member_call(group, principal, domain.member_id, domain.group_instance_id)))
        msg = pb.HeartbeatResponse(error_code=int(response.error), error_message=response.message)
        if response.next_rebalance_ms is not None:
            msg.next_rebalance_ms = response.next_rebalance_ms
        return msg

    @_redirects(pb.LeaveGroupResponse)
    async def LeaveGroup(self, request: pb.LeaveGroupRequest, context: grpc.aio.ServicerContext) -> pb.LeaveGroupResponse:
        principal = await self.gate.check(context, "LeaveGroup", Operation.MEMBER, request.group_id)
        group_id, member_id, instance = await self._guard(context, _leave_fields, request)
        admin = self.gate.enabled and self.gate.authorize(principal, Operation.ADMIN, group_id)
        response = await self._admitted(context, "LeaveGroup", principal, group_id, self._coordinator.leave(
            LeaveGroupRequest(group_id, member_id, instance),
            lambda group, _n: check_member_call(group, principal, member_id, instance, admin_may=admin)))
        return pb.LeaveGroupResponse(error_code=int(response.error), error_message=response.message)

    @_redirects(pb.DescribeGroupResponse)
    async def DescribeGroup(self, request: pb.DescribeGroupRequest, context: grpc.aio.ServicerContext
                            ) -> pb.DescribeGroupResponse | bytes:
        await self.gate.check(context, "DescribeGroup", Operation.DESCRIBE, request.group_id)
        group_id = await self._guard(context, lambda: _identifier(request.group_id, "group_id", required=True))
        await self._coordinator.check_owner(group_id)
        view = self._coordinator.describe(group_id)
        if view is None:
            return pb.DescribeGroupResponse(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), error_message=f"group {group_id!r} not found")

        def encode() -> bytes:
            return pb.DescribeGroupResponse(group=describe_to_proto(view)).SerializeToString()

        # the view holds only values no call replaces in place: it is read safely off the loop,
        # where a large group's answer is built (0.3 s for 20,000 tasks, an outsider measured:
        # every health check and heartbeat waited for it; the members' lags count as much)
        tasks = 0 if view.topology is None else view.topology.task_count
        if tasks + sum(len(member.lags) for member in view.members) <= OFF_LOOP_TASKS:
            return encode()
        return await asyncio.to_thread(encode)

    async def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext) -> pb.ListGroupsResponse:
        principal = await self.gate.principal(context, "ListGroups")
        size, after = await self._guard(context, _page_from_proto, request)
        page = []
        for g in self._coordinator.list_groups():
            if g.group_id <= after or not self.gate.authorize(principal, Operation.DESCRIBE, g.group_id):
                continue
            if len(page) == size:
                return pb.ListGroupsResponse(groups=page, next_page_token=_page_token(page[-1].group_id))
            page.append(pb.GroupOverview(group_id=g.group_id, state=_STATE_TO_PB[g.state], generation_id=g.generation,
                                         member_count=g.member_count,
                                         owner=coordinator_to_proto(g.owner) if g.owner is not None else None))
        return pb.ListGroupsResponse(groups=page)

    async def Assign(self, request: pb.AssignRequest, context: grpc.aio.ServicerContext) -> bytes:
        def convert(msg: pb.AssignRequest):
            try:
                return parse_problem(problem_document_from_proto(msg.problem))
            except InvalidInput as error:
                raise InvalidInput(f"problem.{error.field}", error.message) from None

        async def assigned() -> bytes:
            # converting, solving and encoding a large problem are Python work: off the event loop
            problem = await asyncio.to_thread(convert, request)
            try:
                result = await self._assign(problem)
            except InvalidInput as error:
                raise InvalidInput(f"problem.{error.field}", error.message) from None
            return await asyncio.to_thread(lambda: pb.AssignResponse(result=result_to_proto(result)).SerializeToString())

        await self.gate.check(context, "Assign", Operation.ASSIGN)
        await self._guard(context, check_assign, self.limits, request)
        # a LimitExceeded (too many at once) goes on to ``server.failures.contain``
        work = self._assign_calls.start(assigned())
        try:
            return await asyncio.shield(work)  # a cancelled call leaves its work running, and counted
        except InvalidInput as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{error.field}: {error.message}")

    @_redirects(pb.RouteQueryResponse)
    async def RouteQuery(self, request: pb.RouteQueryRequest, context: grpc.aio.ServicerContext) -> pb.RouteQueryResponse:
        def convert(msg: pb.RouteQueryRequest):
            group_id = _identifier(msg.group_id, "group_id", required=True)
            store = _identifier(msg.store, "store", required=True)
            if msg.partition < 0:
                raise InvalidInput("partition", f"must be >= 0, got {msg.partition}")
            if msg.HasField("max_lag") and msg.max_lag < 0:
                raise InvalidInput("max_lag", f"must be >= 0, got {msg.max_lag}")
            return group_id, store, msg.partition, (msg.max_lag if msg.HasField("max_lag") else None)

        await self.gate.check(context, "RouteQuery", Operation.MEMBER, request.group_id)
        group_id, store, partition, max_lag = await self._guard(context, convert, request)
        await self._coordinator.check_owner(group_id)
        answer = self._coordinator.route(group_id, store, partition, max_lag)
        msg = pb.RouteQueryResponse(error_code=int(answer.error), error_message=answer.message)
        if answer.task is not None:
            msg.task.CopyFrom(task_to_proto(answer.task))
        for host in answer.hosts:
            entry = msg.hosts.add(process_id=host.process_id, role=_ROLE_TO_PB[host.role], lag=_route_lag(host.lag), lag_age_ms=host.lag_age_ms)
            if host.endpoint is not None:
                entry.host.CopyFrom(pb.HostInfo(host=host.endpoint.host, port=host.endpoint.port))
        return msg

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext) -> pb.FindCoordinatorResponse:
        # Authenticated callers only; no group ACL: the answer is a replica's address, no group
        # data, and a member must find its group's owner to use the rights it has there.
        await self.gate.principal(context, "FindCoordinator")
        group_id = await self._guard(context, lambda: _identifier(request.group_id, "group_id", required=True))
        try:
            replica = await self._coordinator.find_coordinator(group_id)
        except NotCoordinator as error:  # no owner can be named now (PostgreSQL unreachable): retry
            await context.abort(grpc.StatusCode.UNAVAILABLE, error.message)
        return pb.FindCoordinatorResponse(coordinator=coordinator_to_proto(replica))


def _serialize(response: Any) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def add_to_server(servicer: GroupLeaderServicer, server: grpc.aio.Server, on_internal_error=None, on_refused=None) -> None:
    """Register the servicer like the generated ``add_GroupLeaderServicer_to_server``, except that
    a handler may return pre-serialised bytes (SyncGroup does) and an unexpected exception is
    contained (``server.failures.contain``)."""
    handlers = {
        method.name: grpc.unary_unary_rpc_method_handler(
            contain(method.name, getattr(servicer, method.name), on_internal_error, on_refused),
            request_deserializer=decoder(message_factory.GetMessageClass(method.input_type)),
            response_serializer=_serialize,
        )
        for method in _SERVICE.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(_SERVICE.full_name, handlers)
