"""Bounded work at the edge: the sizes a request may have, checked on the wire message before
any conversion, lock or state change (docs/security.md, "Limits").

A request that asks for more than a limit allows is refused as a whole: a size beyond what any
group may hold answers INVALID_ARGUMENT, a full group or a full server RESOURCE_EXHAUSTED. Every
message names the limit (its flag) and the value that exceeded it, so that an operator can tell
a misconfigured application from an attack. The checks count only (repeated-field lengths and
integers): they cost microseconds whatever the request's size, which is what makes it safe to
run them on the event loop before the conversion itself is sent to a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, fields
from typing import Any

import grpc

from assignor.model import AssignmentConfig

#: A request larger than this many bytes is converted in a worker thread instead of on the event
#: loop: below it the thread hop (about 0.1 ms) costs more than the conversion itself.
OFF_LOOP_BYTES = 64 * 1024
#: An answer about a group of more tasks than this is encoded in a worker thread: a SyncGroup
#: answer of 50,000 tasks takes about half a second to build.
OFF_LOOP_TASKS = 2_000


@dataclass(frozen=True, slots=True)
class Limits:
    """Server-wide limits (docs/interfaces.md, "Server settings"; docs/security.md)."""

    max_message_bytes: int = 16 * 1024 * 1024
    max_partitions_per_topic: int = 10_000
    max_partitions_per_group: int = 100_000
    max_subtopologies: int = 1_000
    max_tasks_per_group: int = 50_000
    max_store_partitions_per_group: int = 200_000
    max_host_map_bytes: int = 16 * 1024 * 1024
    max_members_per_group: int = 10_000
    max_groups: int = 10_000
    max_groups_per_principal: int = 1_000
    max_tasks_per_assign: int = 50_000
    max_clients_per_assign: int = 5_000
    max_replicas_per_group: int = 200_000
    max_replicas_per_assign: int = 200_000
    max_concurrent_assigns: int = 2
    max_rebalance_timeout_ms: int = 1_800_000
    # A client's tags and the tag keys a config names (KIP-708) are 255 characters each at most,
    # and were not bounded in number: six JoinGroups of 120,000 tags (14 MB each) grew a server
    # by 0.44 GB, and 2,000 keys per member of 500 made one rebalance take 193 s (an audit's
    # finds). Kafka Streams allows 5 of each; this leaves room for more.
    max_client_tags: int = 32

    def validate(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 1:
                raise ValueError(f"--{f.name.replace('_', '-')}: must be >= 1, got {getattr(self, f.name)}")


#: The limits of a full group or server: RESOURCE_EXHAUSTED (retry later or elsewhere); any other
#: is a size no group may have: INVALID_ARGUMENT.
CAPACITY_LIMITS = frozenset({"max_groups", "max_groups_per_principal", "max_members_per_group", "max_concurrent_assigns"})


def limit_code(limit: str) -> grpc.StatusCode:
    return grpc.StatusCode.RESOURCE_EXHAUSTED if limit in CAPACITY_LIMITS else grpc.StatusCode.INVALID_ARGUMENT


class LimitExceeded(Exception):
    """A request beyond a configured limit; ``code`` is the gRPC status to answer."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(f"{message} (limit --{limit.replace('_', '-')})")
        self.limit = limit
        self.code = limit_code(limit)


def _over(limits: Limits, name: str, value: int, what: str) -> None:
    maximum = getattr(limits, name)
    if value > maximum:
        raise LimitExceeded(name, f"{what}: {value} exceeds {name} = {maximum}")


#: The limits each ``check_*`` below may refuse for: ``server.edge.refusals`` has the metrics
#: export each at 0 from the start. A limit a check gains belongs in its tuple.
TOPOLOGY_LIMITS = ("max_subtopologies", "max_partitions_per_topic", "max_partitions_per_group", "max_tasks_per_group",
                   "max_store_partitions_per_group")
# Bytes a host map entry (a TopicPartition or StorePartition) takes besides its name: its tags,
# lengths and partition number, with some room
HOST_MAP_ENTRY_BYTES = 8


def check_topology(limits: Limits, topology: Any, where: str) -> tuple[int, int]:
    """Partitions per topic and per group, subtopologies, tasks (one task per partition of a
    subtopology's widest source topic, as Kafka Streams forms them) and store partitions (each
    task's state stores). The answers grow with what is counted: SyncGroup's host maps list
    every task's topic partitions and store partitions, so each subtopology's listing of a
    topic counts (Kafka Streams lets a topic feed one subtopology only; listed in 500, 1,000
    topics of 100 partitions would be 50 million entries) and a few bytes of store names would
    otherwise buy the server gigabytes of answer. A topic of unknown size (``partition_count``
    0) counts as one partition, so its listing and its subtopology's stores count too (at 0 a
    join of a million stores got in, and kept 200 MB). Each sum is checked as it grows: a long
    request is refused at its first subtopology over a limit. Returns the tasks and the stateful
    ones (of subtopologies with a logged store), which the standbys multiply."""
    _over(limits, "max_subtopologies", len(topology.subtopologies), f"{where}.subtopologies")
    partitions = tasks = store_partitions = stateful = 0
    for i, sub in enumerate(topology.subtopologies):
        widest = 0
        for j, topic in enumerate(sub.source_topics):
            _over(limits, "max_partitions_per_topic", topic.partition_count,
                  f"{where}.subtopologies[{i}].source_topics[{j}].partition_count")
            _over(limits, "max_partitions_per_topic", len(topic.partition_racks),
                  f"{where}.subtopologies[{i}].source_topics[{j}].partition_racks")
            partitions += max(topic.partition_count, 1)
            widest = max(widest, topic.partition_count)
        tasks += widest
        store_partitions += max(widest, 1) * len(sub.state_stores)
        if any(store.logged for store in sub.state_stores):
            stateful += widest
        _over(limits, "max_partitions_per_group", partitions, f"{where} partitions")
        _over(limits, "max_tasks_per_group", tasks, f"{where} tasks")
        _over(limits, "max_store_partitions_per_group", store_partitions, f"{where} store partitions")
    return tasks, stateful


class BoundedWork:
    """At most ``limit`` pieces of work at once, each going on to its end whoever waits for it:
    one more is refused (``LimitExceeded``, RESOURCE_EXHAUSTED), not queued. A caller that
    cancels frees nothing: the work it started (a conversion in a thread, an assignment in a
    worker process) cannot be stopped, so its slot is freed when that work ends; freed on the
    call's end, a client sending and cancelling in a loop would pile up work without bound."""

    def __init__(self, limit_name: str, limit: int, what: str) -> None:
        self._limit_name, self._limit, self._what = limit_name, limit, what
        self._running: set[asyncio.Task] = set()

    def start(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task:
        if len(self._running) >= self._limit:
            work.close()
            raise LimitExceeded(self._limit_name, f"{len(self._running)} {self._what} in progress, "
                                f"{self._limit_name} = {self._limit}; retry later")
        task = asyncio.get_running_loop().create_task(work)
        self._running.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here: a caller that cancelled no longer awaits it


def _check_replicas(limits: Limits, name: str, tasks: int, stateful: int, standbys: int, where: str) -> None:
    """Every task's active and every stateful task's standbys: what the assignor places and the
    host maps list. ``num_standby_replicas`` may be any int (Kafka's config is one): at 2^31 - 1
    every task got a standby on every other client, a request of 52 KB cost 81 CPU seconds and
    a gigabyte, and a group's SyncGroup answers outgrew a client's 4 MB."""
    replicas = tasks + stateful * standbys
    if replicas > getattr(limits, name):
        raise LimitExceeded(name, f"{where}: {tasks} tasks and {stateful} stateful tasks x {standbys} standbys "
                                  f"make {replicas} replicas, exceeds {name} = {getattr(limits, name)}")


LAG_REPORT_LIMITS = ("max_tasks_per_group",)


def check_lag_report(limits: Limits, report: Any, where: str) -> None:
    for name in ("task_lags", "task_offset_sums", "changelog_end_offsets"):
        _over(limits, "max_tasks_per_group", len(getattr(report, name)), f"{where}.{name}")


def _check_host_maps(limits: Limits, topology: Any, standbys: int, warmups: int, where: str) -> None:
    """The bytes of the names a SyncGroup answer lists: the host maps every member's answer
    carries (``partitions_by_host`` and ``standby_partitions_by_host``: each task's topic and
    store names, for its active, each standby of a stateful task and the warm-ups, at most
    ``max_warmup_replicas``), and the racks of each partition a member's own task lists name.
    Counted in entries only, a few kilobytes of JoinGroup (50,000 tasks, names of 255
    characters) made answers of 40 MB, beyond what a client takes (gRPC's default is 4 MiB; the
    server sends at most ``remote_leader.tls.MAX_ANSWER_BYTES``). ``topology`` is a JoinGroup's
    or a group's merged one (the same fields)."""
    total = stateful = widest_names = 0
    for sub in topology.subtopologies:
        tasks = max(max((topic.partition_count for topic in sub.source_topics), default=0), 1)
        names = sum(len(topic.name.encode()) + HOST_MAP_ENTRY_BYTES for topic in sub.source_topics) + sum(
            len(store.name.encode()) + HOST_MAP_ENTRY_BYTES for store in sub.state_stores)
        racks = sum(len(rack.encode()) + 2 for topic in sub.source_topics for entry in topic.partition_racks
                    for rack in (entry.racks if hasattr(entry, "racks") else entry[1]))
        logged = any(store.logged for store in sub.state_stores)
        total += (tasks * names + racks) * (1 + (standbys if logged else 0))
        if logged:
            stateful += tasks
            widest_names = max(widest_names, names)
    total += min(warmups, stateful) * widest_names
    _over(limits, "max_host_map_bytes", total, f"{where}: the SyncGroup answers' names, bytes")


def check_merged_topology(limits: Limits, group: Any, topology: Any, where: str) -> None:
    """Called under the group's lock before a JoinGroup runs: a group runs on the merge of its
    members' topologies (each topic at the largest partition count any member reported), so
    joins each within the limits could grow it past them (five members widening one
    subtopology each made 50,000 tasks and SyncGroup answers of 80 MB, beyond what the server
    sends). The merge is checked as one JoinGroup's topology is; an Empty group takes the
    newcomer's own, checked at the edge."""
    if group is None or group.topology is None or not group.members or group.config is None:
        return
    merged = group.topology.merged(topology)
    if merged == group.topology:
        return
    tasks, stateful = check_topology(limits, merged, where)
    config = group.config
    _check_replicas(limits, "max_replicas_per_group", tasks, stateful, config.num_standby_replicas,
                    f"{where}: the group's num_standby_replicas")
    _check_host_maps(limits, merged, config.num_standby_replicas, config.max_warmup_replicas, where)


JOIN_LIMITS = ("max_rebalance_timeout_ms", *TOPOLOGY_LIMITS, "max_replicas_per_group", "max_host_map_bytes",
               "max_client_tags", *LAG_REPORT_LIMITS)


def check_join(limits: Limits, request: Any) -> None:
    """A group's standbys are counted as configured, however many members join: the config is
    checked before any member is known."""
    _over(limits, "max_rebalance_timeout_ms", request.rebalance_timeout_ms, "rebalance_timeout_ms")
    if request.HasField("subscription"):
        sub = request.subscription
        if sub.HasField("topology"):
            tasks, stateful = check_topology(limits, sub.topology, "subscription.topology")
            standbys = max(sub.config.num_standby_replicas, 0)
            _check_replicas(limits, "max_replicas_per_group", tasks, stateful, standbys,
                            "subscription.config.num_standby_replicas")
            warmups = (sub.config.max_warmup_replicas if sub.config.HasField("max_warmup_replicas")
                       else AssignmentConfig().max_warmup_replicas)
            _check_host_maps(limits, sub.topology, standbys, warmups, "subscription.topology")
        _over(limits, "max_client_tags", len(sub.client_tags), "subscription.client_tags")
        _over(limits, "max_client_tags", len(sub.config.rack_aware_assignment_tags),
              "subscription.config.rack_aware_assignment_tags")
        check_lag_report(limits, sub.lags, "subscription.lags")


HEARTBEAT_LIMITS = LAG_REPORT_LIMITS


def check_heartbeat(limits: Limits, request: Any) -> None:
    if request.HasField("lags"):
        check_lag_report(limits, request.lags, "lags")


ASSIGN_LIMITS = ("max_tasks_per_assign", "max_clients_per_assign", "max_replicas_per_assign", "max_client_tags")


def check_assign(limits: Limits, request: Any) -> None:
    problem = request.problem
    _over(limits, "max_tasks_per_assign", len(problem.tasks), "problem.tasks")
    _over(limits, "max_clients_per_assign", len(problem.clients), "problem.clients")
    standbys = min(max(problem.config.num_standby_replicas, 0), max(len(problem.clients) - 1, 0))
    _check_replicas(limits, "max_replicas_per_assign", len(problem.tasks), sum(t.stateful for t in problem.tasks),
                    standbys, "problem.config.num_standby_replicas")
    _over(limits, "max_client_tags", len(problem.config.rack_aware_assignment_tags),
          "problem.config.rack_aware_assignment_tags")
    for i, client in enumerate(problem.clients):
        _over(limits, "max_client_tags", len(client.tags), f"problem.clients[{i}].tags")
        for name in ("lags", "prev_active", "prev_standby"):
            items = getattr(client, name, None)
            if items is not None:
                _over(limits, "max_tasks_per_assign", len(items), f"problem.clients[{i}].{name}")


#: The quota per principal counts only with authentication on (a principal to count).
GROUP_CAPACITY_LIMITS = ("max_groups", "max_members_per_group")
PRINCIPAL_QUOTA_LIMIT = "max_groups_per_principal"


def check_group_capacity(limits: Limits, group: Any, groups: Mapping[str, Any], member_id: str, instance: str | None,
                         principal: str = "") -> None:
    """Called under the group's lock before a JoinGroup runs: a newcomer needs room in its group
    (a known member or a static instance taking its old place does not), a new group room on
    the server and, with authentication on, in its principal's quota: the groups a principal
    created count against it until they expire, members or not, so one tenant cannot fill the
    server with abandoned groups for everyone (docs/security.md). Counted on creation only (a
    scan of this server's groups)."""
    if group is None:
        _over(limits, "max_groups", len(groups) + 1, "groups on this server")
        if principal:
            created = sum(1 for other in groups.values() if other.creator == principal)
            _over(limits, "max_groups_per_principal", created + 1, f"groups created by {principal!r} on this server")
        return
    if member_id and member_id in group.members:
        return
    if instance and instance in group.instances:
        return
    _over(limits, "max_members_per_group", len(group.members) + 1, f"members of group {group.group_id!r}")
