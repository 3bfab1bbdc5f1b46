"""KIP-535 client-side metadata: Kafka's default partitioner, key routing, per-host metadata."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assignor.cluster import ClusterMetadata, HostTasks, MemberAssignment
from assignor.model import HostInfo, InvalidInput, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.lags import LagInfo
from client.metadata import (
    StreamsMetadataState,
    default_partitioner,
    int32_serializer,
    local_store_partition_lags,
    murmur2,
    to_positive,
)

# Kafka's own vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_MURMUR2_VECTORS = [
    pytest.param(b"21", -973932308, id="21"),
    pytest.param(b"foobar", -790332482, id="foobar"),
    pytest.param(b"a-little-bit-long-string", -985981536, id="long"),
    pytest.param(b"a-little-bit-longer-string", -1486304829, id="longer"),
    pytest.param(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, id="longest"),
    pytest.param(b"abc", 479470107, id="abc-tail-3"),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka_utils_test(data, expected):
    assert murmur2(data) == expected


@pytest.mark.parametrize(("number", "expected"), [
    pytest.param(-1, 0x7FFFFFFF, id="minus-one"),
    pytest.param(-(2**31), 0, id="int-min"),
    pytest.param(5, 5, id="positive"),
])
def test_to_positive_clears_the_sign_bit(number, expected):
    assert to_positive(number) == expected


def test_default_partitioner_is_positive_murmur2_modulo():
    # murmur2(b"21") = -973932308 -> & 0x7fffffff = 1173551340 -> % 7 = 1173551340 - 7*167650191 = 3
    assert default_partitioner()("t", "21", 7) == 3
    assert default_partitioner()("t", b"21", 7) == 3


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_default_partition_is_in_range(key, partitions):
    assert 0 <= default_partitioner()("t", key, partitions) < partitions


TOPOLOGY = Topology.of("app", (
    Subtopology.of(0, ("orders",), 4, (StateStore("counts"),)),
    Subtopology.of(1, ("clicks",), 2, (StateStore("sessions", logged=False),)),
))
A, B, C = HostInfo("a", 1), HostInfo("b", 2), HostInfo("c", 3)
ASSIGNMENT = MemberAssignment(
    generation=3,
    active=(TaskId(0, 0), TaskId(0, 1)),
    standby=(TaskId(0, 2),),
    cluster=ClusterMetadata(TOPOLOGY, (
        HostTasks("a", A, active=(TaskId(0, 0), TaskId(0, 1), TaskId(1, 0)), standby=(TaskId(0, 2),)),
        HostTasks("b", B, active=(TaskId(0, 2), TaskId(0, 3), TaskId(1, 1)), standby=(TaskId(0, 0),)),
        HostTasks("c", C, active=(), standby=(TaskId(0, 0), TaskId(0, 3))),
    )),
)


@pytest.mark.parametrize(("store", "partition", "active", "standbys"), [
    pytest.param("counts", 0, A, (B, C), id="active-a-standbys-b-c"),
    pytest.param("counts", 2, B, (A,), id="active-b-standby-a"),
    pytest.param("counts", 1, A, (), id="no-standby"),
    pytest.param("sessions", 1, B, (), id="unlogged-store"),
])
def test_query_metadata_for_partition(store, partition, active, standbys):
    meta = StreamsMetadataState(ASSIGNMENT.cluster).query_metadata_for_partition(store, partition)
    assert (meta.active_host, meta.standby_hosts, meta.partition) == (active, standbys, partition)


def test_query_metadata_for_key_uses_kafka_default_partitioner():
    # murmur2(b"21") & 0x7fffffff = 1173551340, % 4 = 0 -> task 0_0: active A, standbys B and C
    meta = StreamsMetadataState(ASSIGNMENT.cluster).query_metadata_for_key("counts", "21")
    assert (meta.partition, meta.task, meta.active_host, meta.standby_hosts) == (0, TaskId(0, 0), A, (B, C))


def test_query_metadata_for_key_with_a_given_partitioner():
    meta = StreamsMetadataState(ASSIGNMENT.cluster).query_metadata_for_key(
        "counts", 42, partitioner=lambda topic, key, n: key % n)
    assert (meta.partition, meta.active_host) == (2, B)


def test_query_metadata_for_int_key_with_integer_serializer():
    # IntegerSerializer(1) = 00 00 00 01; the partition follows from murmur2 of those bytes
    expected = to_positive(murmur2(b"\x00\x00\x00\x01")) % 4
    meta = StreamsMetadataState(ASSIGNMENT.cluster).query_metadata_for_key("counts", 1, serializer=int32_serializer)
    assert meta.partition == expected


@pytest.mark.parametrize(("kwargs", "field"), [
    pytest.param({"store": "nope", "key": "k"}, "store", id="unknown-store"),
    pytest.param({"store": "counts", "key": 3.5}, "key_serializer", id="no-default-serializer"),
    pytest.param({"store": "counts", "key": "k", "partitioner": lambda t, k, n: n}, "partitioner", id="out-of-range"),
])
def test_bad_queries_name_the_field(kwargs, field):
    with pytest.raises(InvalidInput) as error:
        StreamsMetadataState(ASSIGNMENT.cluster).query_metadata_for_key(**kwargs)
    assert error.value.field == field


def test_metadata_per_host_lists_active_and_standby_partitions_and_stores():
    meta = StreamsMetadataState(ASSIGNMENT.cluster).metadata_for_host(A)
    assert meta.topic_partitions == {("orders", 0), ("orders", 1), ("clicks", 0)}
    assert meta.standby_topic_partitions == {("orders", 2)}
    assert meta.state_store_names == {"counts", "sessions"}
    assert meta.standby_state_store_names == {"counts"}
    c = StreamsMetadataState(ASSIGNMENT.cluster).metadata_for_host(C)
    assert (c.active_tasks, c.state_store_names, c.standby_state_store_names) == (frozenset(), frozenset(), {"counts"})
    assert StreamsMetadataState(ASSIGNMENT.cluster).metadata_for_host(HostInfo("z", 9)) is None


def test_all_metadata_for_store():
    hosts = [m.host for m in StreamsMetadataState(ASSIGNMENT.cluster).all_metadata_for_store("sessions")]
    assert hosts == [A, B]


def test_local_store_partition_lags_keep_only_assigned_partitions():
    store_lags = {"counts": {0: LagInfo(10, 10), 2: LagInfo(5, 25), 3: LagInfo(0, 7)}, "ghost": {0: LagInfo(0, 1)}}
    local = local_store_partition_lags(store_lags, TOPOLOGY, ASSIGNMENT)
    assert local == {"counts": {0: LagInfo(10, 10), 2: LagInfo(5, 25)}}
    assert local["counts"][2].offset_lag == 20
