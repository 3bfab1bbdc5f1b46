"""The client's wire edge: client values to ``remote_leader.v1`` messages and back.

The only module of ``client/`` besides the sidecar servicer that knows protobuf types, so the
member's logic, the metadata and the tests speak domain values (house style: "Boundaries").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from assignor import STRATEGIES
from assignor.cluster import AssignorError, ClusterMetadata, HostTasks, MemberAssignment
from assignor.lag import Lag
from assignor.model import AssignmentConfig, HostInfo, TaskId
from assignor.topology import Topology
from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import group_leader_pb2 as pb

# Each registered assignor kind (assignor.STRATEGIES) is the wire's ASSIGNOR_KIND_<NAME>.
_ASSIGNOR = {kind: apb.AssignorKind.Value(f"ASSIGNOR_KIND_{kind.name}") for kind in STRATEGIES}
_RACK_STRATEGY = {
    "none": apb.RACK_AWARE_STRATEGY_NONE,
    "min_traffic": apb.RACK_AWARE_STRATEGY_MIN_TRAFFIC,
    "balance_subtopology": apb.RACK_AWARE_STRATEGY_BALANCE_SUBTOPOLOGY,
}


def task_to_proto(task: TaskId) -> apb.TaskId:
    return apb.TaskId(subtopology=task.subtopology, partition=task.partition)


def task_from_proto(message: apb.TaskId) -> TaskId:
    return TaskId(message.subtopology, message.partition)


def tasks_to_proto(tasks: Iterable[TaskId]) -> list[apb.TaskId]:
    return [task_to_proto(t) for t in sorted(tasks)]


def host_to_proto(host: HostInfo) -> pb.HostInfo:
    return pb.HostInfo(host=host.host, port=host.port)


def host_from_proto(message: pb.HostInfo) -> HostInfo:
    return HostInfo(message.host, message.port)


def topology_to_proto(topology: Topology) -> pb.Topology:
    return pb.Topology(subtopologies=[
        pb.Subtopology(
            id=sub.id,
            source_topics=[pb.SourceTopic(name=topic.name, partition_count=topic.partition_count) for topic in sub.source_topics],
            state_stores=[pb.StateStore(name=store.name, logged=store.logged) for store in sub.state_stores],
        )
        for sub in topology.subtopologies
    ])


def config_to_proto(config: AssignmentConfig) -> apb.AssignmentConfig:
    message = apb.AssignmentConfig(
        assignor=_ASSIGNOR[config.assignor],
        acceptable_recovery_lag=config.acceptable_recovery_lag,
        max_warmup_replicas=config.max_warmup_replicas,
        num_standby_replicas=config.num_standby_replicas,
        probing_rebalance_interval_ms=config.probing_rebalance_interval_ms,
        balance_factor=config.balance_factor,
        rack_aware_strategy=_RACK_STRATEGY[config.rack_aware_strategy.value],
        rack_aware_assignment_tags=list(config.rack_aware_assignment_tags),
    )
    if config.rack_aware_traffic_cost is not None:
        message.rack_aware_traffic_cost = config.rack_aware_traffic_cost
    if config.rack_aware_non_overlap_cost is not None:
        message.rack_aware_non_overlap_cost = config.rack_aware_non_overlap_cost
    return message


def task_lags_to_proto(lags: Mapping[TaskId, Lag]) -> list[apb.TaskLag]:
    return [apb.TaskLag(task=task_to_proto(task), lag=lag.to_wire()) for task, lag in sorted(lags.items())]


def lag_report(lags: Mapping[TaskId, Lag], age_ms: int = 0) -> pb.LagReport:
    report = pb.LagReport(task_lags=task_lags_to_proto(lags))
    if age_ms:
        report.age_ms = age_ms
    return report


def _host_tasks(entries: Iterable[pb.HostPartitions], topology: Topology) -> dict[HostInfo, tuple[str, frozenset[TaskId]]]:
    """KIP-535 ``partitionsByHost`` back to tasks: a store partition p of a store of subtopology
    s, or a source-topic partition p of s, is task s_p. Each endpoint with its process id."""
    by_topic = {topic.name: sub.id for sub in topology.subtopologies for topic in sub.source_topics}
    by_store = {store.name: sub.id for sub in topology.subtopologies for store in sub.state_stores}
    result: dict[HostInfo, tuple[str, set[TaskId]]] = {}
    for entry in entries:
        if not entry.HasField("host") or not entry.host.host:
            continue
        _, tasks = result.setdefault(host_from_proto(entry.host), (entry.process_id, set()))
        for tp in entry.partitions:
            if tp.topic in by_topic:
                tasks.add(TaskId(by_topic[tp.topic], tp.partition))
        for sp in entry.store_partitions:
            if sp.store in by_store:
                tasks.add(TaskId(by_store[sp.store], sp.partition))
    return {host: (process_id, frozenset(tasks)) for host, (process_id, tasks) in result.items()}


def cluster_from_proto(message: pb.Assignment, topology: Topology) -> ClusterMetadata:
    """The generation's cluster metadata from the two host maps, one ``HostTasks`` per endpoint;
    its topology is the member's at the group's partition counts, which KIP-535 queries
    partition keys over (a member whose topology lags a topic's growth answered for another
    partitioning than the group's: a helper's audit)."""
    topology = topology.grown_to(message.topic_partition_counts)
    active = _host_tasks(message.partitions_by_host, topology)
    standby = _host_tasks(message.standby_partitions_by_host, topology)
    hosts = []
    for host in sorted(set(active) | set(standby)):
        active_pid, active_tasks = active.get(host, ("", frozenset()))
        standby_pid, standby_tasks = standby.get(host, ("", frozenset()))
        hosts.append(HostTasks(active_pid or standby_pid, host, tuple(sorted(active_tasks)), tuple(sorted(standby_tasks))))
    return ClusterMetadata(topology, tuple(hosts))


def _assignor_error(code: int) -> AssignorError:
    try:
        return AssignorError(code)
    except ValueError:  # a newer leader's code: an error all the same
        return AssignorError.ASSIGNMENT_ERROR


def assignment_from_proto(message: pb.Assignment, generation: int, topology: Topology) -> MemberAssignment:
    """The member's assignment; ``topology`` is the member's own (it names the changelogs)."""
    return MemberAssignment(
        generation=generation,
        active=tuple(sorted(task_from_proto(t.task) for t in message.active_tasks)),
        standby=tuple(sorted(task_from_proto(t.task) for t in message.standby_tasks)),
        warmup=frozenset(task_from_proto(t.task) for t in message.standby_tasks if t.warmup),
        next_rebalance_ms=message.next_rebalance_ms if message.HasField("next_rebalance_ms") else None,
        version=message.version,
        commonly_supported_version=message.commonly_supported_version,
        error=_assignor_error(message.error_code),
        cluster=cluster_from_proto(message, topology),
    )
