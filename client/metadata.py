"""KIP-535 interactive-query metadata, built on the client from each assignment.

Every member receives the hosts of every active and standby task (KIP-535 "AssignmentInfo ...
``standbyPartitionsByHost``"), so any instance can answer "who can serve this key?" locally:
``query_metadata_for_key`` (the active host, the standby hosts, the partition), the metadata of
each host (``StreamsMetadata``: active and standby partitions and stores), and, for the local
instance, ``all_local_store_partition_lags``. ``StreamsMetadataState`` (Kafka Streams' name for
the holder of these views) answers them from the generation's ``assignor.cluster.ClusterMetadata``. Choosing among the standbys by lag is the part
KIP-535 leaves to the application; the server's ``RouteQuery`` RPC does it (``client.member``).

The default partitioner is Kafka's: ``toPositive(murmur2(serialized key)) % partitions``
(``DefaultStreamPartitioner`` → ``BuiltInPartitioner.partitionForKey``), so a key lands on the
same partition as a Java producer would write it. A given partitioner replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from assignor.cluster import ClusterMetadata, MemberAssignment
from assignor.model import HostInfo, InvalidInput, TaskId
from assignor.topology import Topology
from client.lags import LagInfo

_MASK32: Final = 0xFFFFFFFF
_MURMUR2_SEED: Final = 0x9747B28C
_MURMUR2_M: Final = 0x5BD1E995
_MURMUR2_R: Final = 24


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 with Kafka's seed, as a signed int like Java's ``Utils.murmur2``.

    The algorithm (Appleby's MurmurHash2): mix each little-endian 4-byte block into the hash
    with the multiplier m and shift r, fold in the 1–3 tail bytes, then avalanche (>>> 13,
    * m, >>> 15). Java's int overflow is reproduced by masking to 32 bits after each step.
    """
    length = len(data)
    h = (_MURMUR2_SEED ^ length) & _MASK32
    blocks = length // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i: 4 * i + 4], "little")
        k = (k * _MURMUR2_M) & _MASK32
        k ^= k >> _MURMUR2_R
        k = (k * _MURMUR2_M) & _MASK32
        h = (h * _MURMUR2_M) & _MASK32
        h ^= k
    tail = data[4 * blocks:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _MURMUR2_M) & _MASK32
    h ^= h >> 13
    h = (h * _MURMUR2_M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows)."""
    return number & 0x7FFFFFFF


def default_serializer(key: Any) -> bytes:
    """Kafka's StringSerializer (UTF-8) for str, bytes unchanged; other keys need a serializer."""
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    raise InvalidInput("key_serializer", f"no default serializer for a {type(key).__name__} key; pass one "
                       "(e.g. int32_serializer for Kafka's IntegerSerializer)")


def int32_serializer(key: int) -> bytes:
    """Kafka's IntegerSerializer: 4 bytes, big-endian, two's complement."""
    return int(key).to_bytes(4, "big", signed=True)


def int64_serializer(key: int) -> bytes:
    """Kafka's LongSerializer: 8 bytes, big-endian, two's complement."""
    return int(key).to_bytes(8, "big", signed=True)


StreamPartitioner = Callable[[str, Any, int], int]
"""(topic, key, number of partitions) -> partition, like Kafka's ``StreamPartitioner``."""


def default_partitioner(serializer: Callable[[Any], bytes] = default_serializer) -> StreamPartitioner:
    def partition(topic: str, key: Any, partitions: int) -> int:
        return to_positive(murmur2(serializer(key))) % partitions

    return partition


def partition_for_key(
    topology: Topology,
    store: str,
    key: Any,
    serializer: Callable[[Any], bytes] | None = None,
    partitioner: StreamPartitioner | None = None,
) -> int:
    """The store partition of ``key``: a given partitioner, or Kafka's default over the key's
    bytes (``serializer``, default UTF-8 for str). Not both."""
    if serializer is not None and partitioner is not None:
        raise InvalidInput("partitioner", "give a serializer or a partitioner, not both")
    sub, _ = topology.store(store)
    chosen = partitioner or default_partitioner(serializer or default_serializer)
    partitions = sub.partition_count
    partition = chosen(sub.source_topics[0].name, key, partitions)
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < partitions:
        raise InvalidInput("partitioner", f"returned {partition!r}; expected 0..{partitions - 1}")
    return partition


@dataclass(frozen=True, slots=True)
class KeyQueryMetadata:
    """KIP-535 ``KeyQueryMetadata``: where a key of a store lives. ``active_host`` is None when
    no live member has the task active (Kafka's ``NOT_AVAILABLE``)."""

    active_host: HostInfo | None
    standby_hosts: tuple[HostInfo, ...]
    partition: int
    task: TaskId


@dataclass(frozen=True, slots=True)
class StreamsMetadata:
    """KIP-535 ``StreamsMetadata``: one instance's active and standby partitions and stores."""

    host: HostInfo
    active_tasks: frozenset[TaskId]
    standby_tasks: frozenset[TaskId]
    topic_partitions: frozenset[tuple[str, int]]
    standby_topic_partitions: frozenset[tuple[str, int]]
    state_store_names: frozenset[str]
    standby_state_store_names: frozenset[str]


class StreamsMetadataState:
    """The group's query metadata as of one generation's cluster metadata (immutable once built)."""

    def __init__(self, cluster: ClusterMetadata) -> None:
        self.topology = cluster.topology
        # each subtopology's topics and stores, found by id once: looked up per task by a scan of
        # the subtopologies, 50,000 tasks on 500 of them took 1.5 s of every rebalance
        self._topics = {sub.id: tuple(topic.name for topic in sub.source_topics) for sub in self.topology.subtopologies}
        self._stores = {sub.id: tuple(store.name for store in sub.state_stores) for sub in self.topology.subtopologies}
        active_by_host, standby_by_host = cluster.active_by_host(), cluster.standby_by_host()
        self._active_owner: dict[TaskId, HostInfo] = {}
        self._standby_hosts: dict[TaskId, list[HostInfo]] = {}
        for host in sorted(active_by_host):
            for task in active_by_host[host]:
                self._active_owner[task] = host
        for host in sorted(standby_by_host):
            for task in standby_by_host[host]:
                self._standby_hosts.setdefault(task, []).append(host)
        hosts = sorted(set(active_by_host) | set(standby_by_host))
        self._by_host = {
            host: self._host_metadata(host, active_by_host.get(host, frozenset()), standby_by_host.get(host, frozenset()))
            for host in hosts
        }

    def _host_metadata(self, host: HostInfo, active: frozenset[TaskId], standby: frozenset[TaskId]) -> StreamsMetadata:
        def partitions(tasks: frozenset[TaskId]) -> frozenset[tuple[str, int]]:
            topics = self._topics
            return frozenset((topic, task.partition) for task in tasks for topic in topics.get(task.subtopology, ()))

        def stores(tasks: frozenset[TaskId]) -> frozenset[str]:
            named = self._stores
            return frozenset(store for subtopology in {task.subtopology for task in tasks}
                             for store in named.get(subtopology, ()))

        return StreamsMetadata(host, active, standby, partitions(active), partitions(standby),
                               stores(active), stores(standby))

    def all_metadata(self) -> tuple[StreamsMetadata, ...]:
        return tuple(self._by_host.values())

    def metadata_for_host(self, host: HostInfo) -> StreamsMetadata | None:
        return self._by_host.get(host)

    def all_metadata_for_store(self, store: str) -> tuple[StreamsMetadata, ...]:
        self.topology.store(store)
        return tuple(m for m in self._by_host.values()
                     if store in m.state_store_names or store in m.standby_state_store_names)

    def query_metadata_for_key(
        self,
        store: str,
        key: Any,
        serializer: Callable[[Any], bytes] | None = None,
        partitioner: StreamPartitioner | None = None,
    ) -> KeyQueryMetadata:
        """KIP-535 ``queryMetadataForKey``: with a serializer (Kafka's default partitioner over its
        bytes) or a partitioner, not both."""
        return self.query_metadata_for_partition(store, partition_for_key(self.topology, store, key, serializer, partitioner))

    def query_metadata_for_partition(self, store: str, partition: int) -> KeyQueryMetadata:
        task = store_task(self.topology, store, partition)
        return KeyQueryMetadata(self._active_owner.get(task), tuple(self._standby_hosts.get(task, ())), partition, task)


def store_task(topology: Topology, store: str, partition: int) -> TaskId:
    """The task holding ``partition`` of ``store``, or InvalidInput naming the store or the
    partition: one check for every query path (metadata and routing answer alike)."""
    sub, _ = topology.store(store)
    partitions = sub.partition_count
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < partitions:
        raise InvalidInput("partition", f"expected 0..{partitions - 1} for store {store!r}, got {partition!r}")
    return TaskId(sub.id, partition)


def local_store_partition_lags(
    store_lags: Mapping[str, Mapping[int, LagInfo]], topology: Topology, assignment: MemberAssignment
) -> dict[str, dict[int, LagInfo]]:
    """KIP-535 ``allLocalStorePartitionLags``: the lags of the store partitions this instance is
    assigned (active or standby), from what the lag source reports."""
    assigned = assignment.all_tasks()
    result: dict[str, dict[int, LagInfo]] = {}
    for store, partitions in sorted(store_lags.items()):
        try:
            sub, _ = topology.store(store)
        except InvalidInput:
            continue
        for partition, info in sorted(partitions.items()):
            if TaskId(sub.id, partition) in assigned:
                result.setdefault(store, {})[partition] = info
    return result
