"""Kafka Streams' own group-leader test situations, re-expressed over a real server.

Each test takes one situation from Apache Kafka's tests of the Streams group leader
(``StreamsPartitionAssignorTest``, ``StreamsAssignmentScaleTest`` and, in ``assignment/``,
``AssignmentInfoTest``, ``SubscriptionInfoTest``, ``ClientStateTest``; the method is named in
each docstring) and plays it through JoinGroup / SyncGroup / Heartbeat / LeaveGroup against a
real grpc.aio server on 127.0.0.1. Expectations are what docs/protocol.md and the proto promise;
where they are silent, what KIP-441 / KIP-535 and Kafka's test expect. Nothing here computes an
expectation with the server's code.

Situations with no counterpart in this protocol, and why they are left out:

- Consumer-level distribution inside one process (``shouldInterleaveTasksByGroupId``,
  ``shouldInterleaveTasksByGroupIdDuringNewAssignment``, the consumer-level parts of
  ``shouldProduceSticky*``, ``testAssignBasic``'s two consumers of one process): a member is one
  worker process; spreading its tasks over its threads is the worker's business. The
  process-level halves are here (capacity by ``num_threads``, stickiness by member).
- Cooperative revocation (``shouldReturnInterleavedAssignmentWithUnrevokedPartitionsRemovedWhen
  NewConsumerJoins``, the follow-up half of ``shouldTriggerImmediateRebalanceOnTasksRevoked``,
  ``shouldUseEagerRebalancingProtocol``, ``shouldUseCooperativeRebalancingProtocol``): members do
  not report owned partitions and the leader hands a moved task to its new owner in the same
  generation, so no revocation round exists. The stateless half is tested below.
- Internal topics (``testAssignWithInternalTopics``, ``...ThatsSourceIsAnotherInternalTopic``,
  ``shouldGenerateTasksForAllCreatedPartitions``, ``shouldNotFailOnBranchedMultiLevelRepartition
  ConnectedTopology``, ``shouldThrowTimeoutExceptionWhenCreating*TopicsTimesOut``,
  ``shouldSkipListOffsetsRequestForNewlyCreatedChangelogTopics``,
  ``shouldRequestEndOffsetsForPreexistingChangelogs``, ``shouldRequestCommittedOffsetsFor
  PreexistingSourceChangelogs``, ``shouldThrowIllegalStateExceptionIfAny*MissingFromChangelogEnd
  Offsets``): the worker creates topics and reports partition counts and end offsets; the
  leader never talks to Kafka.
- Worker-side encoding and configuration (``testEagerSubscription``, ``testCooperative
  Subscription``, ``shouldDownGradeSubscriptionToVersion*`` as such, ``testClientTags``,
  ``testUniqueFieldOverflow``, ``shouldGetAssignmentConfigs``, ``shouldGetTime``,
  ``testOnAssignment``, ``shouldThrowKafkaExceptionIfReferenceContainer*``, the byte-level
  ``AssignmentInfoTest`` / ``SubscriptionInfoTest`` / ``LegacySubscriptionInfoSerde`` round trips,
  ``AssignmentInfoTest.shouldThrowForUnknownVersion*``): protobuf carries the metadata, and
  ``buf breaking`` guards its evolution. What the versions *mean* to the leader is tested here.
- ``shouldThrowTaskAssignmentExceptionWhenUnableToResolvePartitionCount`` (ASSIGNMENT_ERROR): no
  valid request makes the assignor fail, and the server must not be mocked.
- ``ClientStateTest`` capacity and bookkeeping helpers (``hasMoreAvailableCapacityThan``,
  ``hasUnfulfilledQuota``, the per-consumer maps, the IllegalStateException guards): internal
  to the Java assignor. Its lag rules are tested here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import grpc
import pytest

from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from tests.server.harness import LATEST, UNKNOWN, Worker, rebalance, settle, topology

INITIAL_DELAY_MS = 3_000
PROBE_INTERVAL_MS = 600_000  # the default probing_rebalance_interval_ms


# ---- helpers -------------------------------------------------------------------------------


def _config(standbys: int = 0, **kwargs) -> apb.AssignmentConfig:
    return apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=standbys, **kwargs)


def _topo(*subtopologies: tuple[dict[str, int], tuple[str, ...]], logged: bool = True) -> pb.Topology:
    """Subtopology i reads the topics of ``subtopologies[i][0]`` ({name: partition count}) and
    holds the stores named in ``subtopologies[i][1]``."""
    return pb.Topology(subtopologies=[
        pb.Subtopology(
            id=i,
            source_topics=[pb.SourceTopic(name=name, partition_count=count) for name, count in topics.items()],
            state_stores=[pb.StateStore(name=store, logged=logged) for store in stores],
        )
        for i, (topics, stores) in enumerate(subtopologies)
    ])


def _pid(i: int) -> str:
    return str(uuid.UUID(int=i))


def _task(text: str) -> apb.TaskId:
    sub, part = (int(x) for x in text.split("_"))
    return apb.TaskId(subtopology=sub, partition=part)


@dataclass
class OffsetWorker(Worker):
    """A worker that reports Kafka Streams' own form: task offset sums plus changelog end offsets
    (``SubscriptionInfo`` version 7+), instead of lags."""

    offset_sums: dict[str, int] | None = None
    end_offsets: dict[str, int] | None = None

    def offset_report(self) -> pb.LagReport:
        return pb.LagReport(
            task_offset_sums=[pb.TaskOffsetSum(task=_task(t), offset_sum=s) for t, s in sorted((self.offset_sums or {}).items())],
            changelog_end_offsets=[pb.TaskEndOffsetSum(task=_task(t), end_offset_sum=e)
                                   for t, e in sorted((self.end_offsets or {}).items())],
        )

    def subscription(self) -> pb.Subscription:
        sub = super().subscription()
        if self.offset_sums is not None:
            sub.lags.CopyFrom(self.offset_report())
        return sub


async def _describe(leader) -> pb.GroupDescription:
    return (await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group


async def _lags(leader) -> dict[str, dict[str, int]]:
    """process id -> {task: lag} as the server now knows them."""
    return {m.process_id: {f"{lag.task.subtopology}_{lag.task.partition}": lag.lag for lag in m.lags}
            for m in (await _describe(leader)).members}


async def _joins_a_stable_group(leader, running: list[Worker], newcomer: Worker) -> None:
    """A newcomer (or a member rejoining with new metadata) joins a Stable group: the others
    learn it from their heartbeat and rejoin."""
    joining = asyncio.create_task(newcomer.join())
    await settle()
    for w in running:
        assert (await w.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, running)
    assert (await joining).error_code == epb.ERROR_CODE_NONE
    assert (await newcomer.sync()).error_code == epb.ERROR_CODE_NONE


def _host_map(hosts) -> dict[int, tuple[set[tuple[str, int]], set[tuple[str, int]]]]:
    """HostPartitions -> {port: ({(topic, partition)}, {(store, partition)})}."""
    return {h.host.port: ({(p.topic, p.partition) for p in h.partitions},
                          {(s.store, s.partition) for s in h.store_partitions}) for h in hosts}


def _maps_bytes(assignment: pb.Assignment) -> tuple[bytes, ...]:
    return tuple(h.SerializeToString(deterministic=True)
                 for h in (*assignment.partitions_by_host, *assignment.standby_partitions_by_host))


def _actives(workers) -> list[str]:
    return sorted(t for w in workers for t in w.active())


def _versions(w: Worker) -> tuple[int, int, int]:
    a = w.assignment
    return a.version, a.commonly_supported_version, a.error_code


# ---- metadata versions and version probing ------------------------------------------------------


async def test_mixed_versions_encode_every_assignment_at_the_lowest_version(leader):
    """StreamsPartitionAssignorTest.shouldReturnLowestAssignmentVersionForDifferentSubscriptionVersionsV1V2,
    with AssignmentInfoTest.shouldEncodeAndDecodeVersion1 / ...Version6 (the standby host map
    only from the version that has it) and shouldEncodeAndDecodeNextRebalanceTime.

    I1 (version 2) runs all three stateful tasks; I2 (version 1, no state) joins: both get the
    version-1 encoding, in which I2's warm-ups are plain standbys and there is no standby host
    map, while partitions_by_host still names actives only (KIP-535). Once I2 supports version 2
    too, the same placement comes at version 2: warm-ups marked, standby host map present."""
    config = _config(0, max_warmup_replicas=2)
    i1 = leader.worker(process_id=_pid(1), port=7001, config=config, task_lags={"0_0": LATEST, "0_1": LATEST, "0_2": LATEST})
    i2 = leader.worker(process_id=_pid(2), port=7002, config=config, version=1, latest_supported_version=1)
    await rebalance(leader.clock, [i1, i2], advance_ms=INITIAL_DELAY_MS)
    rebalanced_at = leader.clock.now_ms()

    assert _versions(i1) == (1, 1, epb.ASSIGNOR_ERROR_VERSION_PROBING)  # it spoke 2 > the group's 1
    assert _versions(i2) == (1, 1, epb.ASSIGNOR_ERROR_NONE)
    assert sorted(i1.active()) == ["0_0", "0_1", "0_2"] and i2.active() == []  # KIP-441: no state, no active yet
    assert i2.standby(), "the newcomer warms up"
    for w in (i1, i2):
        assert not any(t.warmup for t in w.assignment.standby_tasks)  # version 1 has no warm-up mark
        assert len(w.assignment.standby_partitions_by_host) == 0  # nor a standby host map
        assert set(_host_map(w.assignment.partitions_by_host)) == {7001}  # warm-ups are not actives
        assert w.assignment.next_rebalance_ms == rebalanced_at + PROBE_INTERVAL_MS
    warming = i2.standby()

    # I2 is bounced onto a build that supports version 2; I1 keeps the version it was told.
    i1.version, i2.latest_supported_version = 1, 2
    i1.runs_as_caught_up()
    i2.task_lags = {t: 5_000 for t in warming}  # still restoring
    await rebalance(leader.clock, [i1, i2])
    for w in (i1, i2):
        assert _versions(w) == (2, 2, epb.ASSIGNOR_ERROR_NONE)
    assert sorted(i1.active()) == ["0_0", "0_1", "0_2"]
    assert sorted(i2.warmups()) == sorted(warming)  # now marked
    partitions, stores = _host_map(i1.assignment.standby_partitions_by_host)[7002]
    assert partitions == {("orders", int(t.split("_")[1])) for t in warming}
    assert stores == {("counts", int(t.split("_")[1])) for t in warming}
    assert set(_host_map(i1.assignment.partitions_by_host)) == {7001}
    assert _maps_bytes(i1.assignment) == _maps_bytes(i2.assignment)


async def test_members_newer_than_the_leader_get_their_tasks_at_the_leaders_version(leader):
    """StreamsPartitionAssignorTest.shouldReturnInterleavedAssignmentForOnlyFutureInstancesDuringVersionProbing.

    Every member speaks version 3, newer than the server's 2. They get a normal assignment (every
    task active once, standbys) encoded at version 2. Kafka's test expects error code 0 here; our
    protocol documents VERSION_PROBING for a member whose version is above the group's ("gets its
    tasks, encoded at the group's version, with VERSION_PROBING, and keeps speaking the group's
    version"). Rejoining at version 2, they keep their tasks and the error clears."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config, version=3, latest_supported_version=3)
    b = leader.worker(process_id=_pid(2), port=7002, config=config, version=3, latest_supported_version=3)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    for w in (a, b):
        assert _versions(w) == (2, 2, epb.ASSIGNOR_ERROR_VERSION_PROBING)
        assert len(w.active()) in (1, 2)
    assert _actives([a, b]) == ["0_0", "0_1", "0_2"]
    assert sorted(a.standby() + b.standby()) == ["0_0", "0_1", "0_2"]
    assert (await _describe(leader)).commonly_supported_version == 2
    before = {w.process_id: sorted(w.active()) for w in (a, b)}

    for w in (a, b):
        w.version = 2
        w.runs_as_caught_up()
    await rebalance(leader.clock, [a, b])
    for w in (a, b):
        assert _versions(w) == (2, 2, epb.ASSIGNOR_ERROR_NONE)
        assert sorted(w.active()) == before[w.process_id]


async def test_a_future_member_beside_an_old_one_probes_and_nobody_gets_an_assignment_error(leader):
    """StreamsPartitionAssignorTest.shouldEncodeAssignmentErrorIfV1SubscriptionAndFutureSubscriptionIsMixed
    (and ...V2...).

    Kafka answers ASSIGNMENT_ERROR because its versions 1 and 2 predate version probing. Every
    version of this protocol supports probing, so the group simply runs at the old member's
    version: the newer member gets VERSION_PROBING and its tasks, the old one a plain
    assignment."""
    config = _config(0)
    old = leader.worker(process_id=_pid(1), port=7001, config=config, version=1, latest_supported_version=1)
    future = leader.worker(process_id=_pid(2), port=7002, config=config, version=3, latest_supported_version=3)
    await rebalance(leader.clock, [old, future], advance_ms=INITIAL_DELAY_MS)
    assert _versions(old) == (1, 1, epb.ASSIGNOR_ERROR_NONE)
    assert _versions(future) == (1, 1, epb.ASSIGNOR_ERROR_VERSION_PROBING)
    assert _actives([old, future]) == ["0_0", "0_1", "0_2"]
    assert old.active() and future.active()


async def test_a_rolling_upgrade_raises_the_commonly_supported_version_once_everyone_supports_it(leader):
    """AssignmentInfoTest.shouldEncodeAndDecodeSmallerCommonlySupportedVersion, as a rolling bounce
    (Kafka Streams' upgrade through version probing, KIP-268).

    Three members support only version 1. One by one they are bounced onto a build that supports
    version 2 but still speaks version 1: the group stays at version 1 until the last one is
    bounced, then the assignment's commonly_supported_version rises to 2; each member rejoins
    once at version 2 and nothing moves."""
    config = _config(1)
    workers = [leader.worker(process_id=_pid(i), port=7000 + i, config=config, version=1, latest_supported_version=1)
               for i in (1, 2, 3)]
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    placement = {w.process_id: (sorted(w.active()), sorted(w.standby())) for w in workers}
    for bounced, w in enumerate(workers, start=1):
        w.latest_supported_version = 2
        for other in workers:
            other.runs_as_caught_up()
        await rebalance(leader.clock, workers)
        expected = 2 if bounced == len(workers) else 1
        for other in workers:
            assert _versions(other) == (expected, expected, epb.ASSIGNOR_ERROR_NONE), (bounced, other.port)
            assert len(other.assignment.standby_partitions_by_host) == (3 if expected == 2 else 0)
    for w in workers:
        w.version = 2
        w.runs_as_caught_up()
    await rebalance(leader.clock, workers)
    for w in workers:
        assert _versions(w) == (2, 2, epb.ASSIGNOR_ERROR_NONE)
        assert (sorted(w.active()), sorted(w.standby())) == placement[w.process_id]


async def test_an_older_member_downgrades_the_group_and_its_departure_restores_the_version(leader):
    """StreamsPartitionAssignorTest.shouldDownGradeSubscriptionToVersion1 seen from the leader
    (an instance configured with upgrade.from subscribes at an old version), with
    shouldReturnLowestAssignmentVersionForDifferentSubscriptionVersionsV1V2.

    A version-2 group admits a member that supports only version 1: everyone's next assignment is
    encoded at version 1 (the version-2 speakers get VERSION_PROBING and their tasks). When the
    old member leaves, the group's next assignment is at version 2 again."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config)
    b = leader.worker(process_id=_pid(2), port=7002, config=config)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    assert _versions(a) == _versions(b) == (2, 2, epb.ASSIGNOR_ERROR_NONE)

    old = leader.worker(process_id=_pid(3), port=7003, config=config, version=1, latest_supported_version=1)
    for w in (a, b):
        w.runs_as_caught_up()
    await _joins_a_stable_group(leader, [a, b], old)
    assert _versions(old) == (1, 1, epb.ASSIGNOR_ERROR_NONE)
    for w in (a, b):
        assert _versions(w) == (1, 1, epb.ASSIGNOR_ERROR_VERSION_PROBING)
    for w in (a, b, old):
        assert len(w.assignment.standby_partitions_by_host) == 0
        assert not any(t.warmup for t in w.assignment.standby_tasks)
    assert _actives([a, b, old]) == ["0_0", "0_1", "0_2"]

    assert (await old.leave()).error_code == epb.ERROR_CODE_NONE
    for w in (a, b):
        w.version = 1  # they keep speaking the version they were told
        w.runs_as_caught_up()
    await rebalance(leader.clock, [a, b])
    for w in (a, b):
        assert _versions(w) == (2, 2, epb.ASSIGNOR_ERROR_NONE)
        assert len(w.assignment.standby_partitions_by_host) == 2
    assert _actives([a, b]) == ["0_0", "0_1", "0_2"]


async def _static_bounce(leader, old: Worker, others: list[Worker], **changes) -> Worker:
    """``old``'s process restarts within its session timeout under the same group_instance_id
    (KIP-345), reporting what it ran, with ``changes`` (a new build: other versions). Returns the
    restarted worker once it holds its assignment; if the restart began a rebalance, the others
    rejoin first. Either answer is accepted: the caller checks the outcome."""
    new = Worker(leader.stub, process_id=old.process_id, instance_id=old.instance_id, port=old.port, topo=old.topo,
                 config=old.config, threads=old.threads, version=old.version,
                 latest_supported_version=old.latest_supported_version)
    for name, value in changes.items():
        setattr(new, name, value)
    new.task_lags = {**{t: 0 for t in old.standby()}, **{t: LATEST for t in old.active()}}
    joining = asyncio.create_task(new.join())
    for _ in range(500):  # until it is answered, or parked in a rebalance it started
        await asyncio.sleep(0.01)
        if joining.done() or (await _describe(leader)).state == pb.GROUP_STATE_PREPARING_REBALANCE:
            break
    if not joining.done():
        for w in others:
            w.runs_as_caught_up()
        await rebalance(leader.clock, others)
    assert (await joining).error_code == epb.ERROR_CODE_NONE
    assert (await new.sync()).error_code == epb.ERROR_CODE_NONE
    return new


async def _until_stable(leader, workers: list[Worker]) -> None:
    """Heartbeat rounds; whenever the group asks for a rejoin, everyone rejoins."""
    for _ in range(3):
        responses = [await w.heartbeat() for w in workers]
        if all(r.error_code == epb.ERROR_CODE_NONE for r in responses):
            return
        for w in workers:
            if w.assignment is not None and w.assignment.error_code == epb.ASSIGNOR_ERROR_VERSION_PROBING:
                w.version = w.assignment.version  # it keeps speaking the group's version
            w.runs_as_caught_up()
        await rebalance(leader.clock, workers)
    raise AssertionError("the group did not settle")


async def test_a_static_restart_onto_an_older_build_gets_nothing_above_the_version_it_supports(leader):
    """StreamsPartitionAssignorTest.shouldReturnLowestAssignmentVersionForDifferentSubscriptionVersionsV1V2
    and shouldDownGradeSubscriptionToVersion1, for a static member (KIP-345) rolled back onto a
    build that supports only version 1.

    docs/protocol.md: "The group runs at its commonly supported version: the lowest
    latest_supported_version of its members ... Each assignment is encoded at that version." The
    dynamic path does this (test above); a static restart must too, whether the server answers it
    at once or rebalances first: nobody is left holding an assignment above version 1."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config, instance_id="worker-a")
    b = leader.worker(process_id=_pid(2), port=7002, config=config, instance_id="worker-b")
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    assert _versions(a) == _versions(b) == (2, 2, epb.ASSIGNOR_ERROR_NONE)
    older = await _static_bounce(leader, b, [a], version=1, latest_supported_version=1)
    assert older.assignment.version == 1, older.assignment
    assert older.assignment.commonly_supported_version == 1
    assert len(older.assignment.standby_partitions_by_host) == 0
    a.runs_as_caught_up()
    await _until_stable(leader, [a, older])
    assert (await _describe(leader)).commonly_supported_version == 1
    for w in (a, older):
        assert w.assignment.commonly_supported_version == 1 and w.assignment.version == 1, (w.port, w.assignment)


async def test_a_rolling_upgrade_of_static_members_raises_the_commonly_supported_version(leader):
    """AssignmentInfoTest.shouldEncodeAndDecodeSmallerCommonlySupportedVersion and
    StreamsPartitionAssignorTest.shouldReturnInterleavedAssignmentForOnlyFutureInstancesDuring
    VersionProbing, as a rolling bounce of static members (KIP-345 with KIP-268's upgrade).

    docs/protocol.md: "When every member supports a newer version, the next assignment's
    commonly_supported_version rises above the version members used; each member then rejoins
    once at the new version." The first bounce is probed (VERSION_PROBING, version 1: the other
    member still supports only 1). After the second, every member supports 2: the next assignment
    (the restarted member's, or that of a rebalance the server starts) must say 2."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config, instance_id="worker-a", version=1, latest_supported_version=1)
    b = leader.worker(process_id=_pid(2), port=7002, config=config, instance_id="worker-b", version=1, latest_supported_version=1)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    b = await _static_bounce(leader, b, [a], version=2, latest_supported_version=2)
    assert _versions(b) == (1, 1, epb.ASSIGNOR_ERROR_VERSION_PROBING)
    b.version = 1  # it keeps speaking the group's version
    a = await _static_bounce(leader, a, [b], version=2, latest_supported_version=2)
    await _until_stable(leader, [a, b])
    assert (await _describe(leader)).commonly_supported_version == 2
    for w in (a, b):
        assert w.assignment.commonly_supported_version == 2, (w.port, w.assignment)


# ---- assignment error codes -----------------------------------------------------------------------


async def test_unknown_source_topic_metadata_assigns_nothing_until_the_topic_is_known(leader):
    """StreamsPartitionAssignorTest.shouldEncodeMissingSourceTopicError, testAssignEmptyMetadata and
    shouldNotLoopInfinitelyOnMissingMetadataAndShouldNotCreateRelatedTasks.

    One of two subtopologies reads a topic whose partition count is unknown (0): every member gets
    INCOMPLETE_SOURCE_TOPIC_METADATA and no tasks, no host maps, no probe. Once a member reports
    the count (it rejoins), the group keeps the larger count and assigns every task."""
    unknown = _topo(({"topic1": 3}, ("store1",)), ({"topic2": 0}, ("store2",)))
    known = _topo(({"topic1": 3}, ("store1",)), ({"topic2": 3}, ("store2",)))
    a = leader.worker(process_id=_pid(1), port=7001, topo=unknown)
    b = leader.worker(process_id=_pid(2), port=7002, topo=unknown)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    for w in (a, b):
        assert w.assignment.error_code == epb.ASSIGNOR_ERROR_INCOMPLETE_SOURCE_TOPIC_METADATA
        assert not w.assignment.active_tasks and not w.assignment.standby_tasks
        assert not w.assignment.partitions_by_host
        assert not w.assignment.HasField("next_rebalance_ms")
    assert (await _describe(leader)).assignment_error == epb.ASSIGNOR_ERROR_INCOMPLETE_SOURCE_TOPIC_METADATA

    a.topo = known  # b still reports 0: the group keeps the largest count per topic
    await rebalance(leader.clock, [a, b])
    for w in (a, b):
        assert w.assignment.error_code == epb.ASSIGNOR_ERROR_NONE
    assert _actives([a, b]) == ["0_0", "0_1", "0_2", "1_0", "1_1", "1_2"]
    group = await _describe(leader)
    assert group.assignment_error == epb.ASSIGNOR_ERROR_NONE
    assert group.last_rebalance_trigger == "topology_changed"


# ---- KIP-535 host maps ---------------------------------------------------------------------------------


async def test_active_and_standby_partitions_by_host_are_separate_and_the_same_for_everyone(leader):
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicas and
    shouldNotAddStandbyTaskPartitionsToPartitionsForHost (KIP-535: standby partitions are not
    mixed into the active partitions of a host).

    Two members with endpoints, one stateful subtopology reading two topics, one standby: each
    host's active partitions are exactly the other host's standby partitions, neither host has
    them all, the two maps cover every partition, and every member sees the same maps."""
    topo = _topo(({"topic1": 3, "topic2": 3}, ("store1",)))
    a = leader.worker(process_id=_pid(1), port=8080, topo=topo, config=_config(1))
    b = leader.worker(process_id=_pid(2), port=9090, topo=topo, config=_config(1))
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    every = {(topic, p) for topic in ("topic1", "topic2") for p in range(3)}
    active, standby = _host_map(a.assignment.partitions_by_host), _host_map(a.assignment.standby_partitions_by_host)
    assert set(active) == set(standby) == {8080, 9090}
    for port in (8080, 9090):
        assert active[port][0] and active[port][0] != every
        assert not active[port][0] & standby[port][0]  # never both on one host
        assert not active[port][1] & standby[port][1]
    assert active[8080] == standby[9090] and active[9090] == standby[8080]
    assert active[8080][0] | active[9090][0] == every
    assert {("store1", p) for p in range(3)} == active[8080][1] | active[9090][1]
    for w, port in ((a, 8080), (b, 9090)):  # each host's entry is that member's own tasks
        assert active[port][0] == {(tp.topic, tp.partition) for t in w.assignment.active_tasks for tp in t.partitions}
        assert standby[port][0] == {(tp.topic, tp.partition) for t in w.assignment.standby_tasks for tp in t.partitions}
    assert _maps_bytes(a.assignment) == _maps_bytes(b.assignment)


async def test_an_endpoint_maps_to_its_partitions_and_a_member_without_one_is_left_out(leader):
    """StreamsPartitionAssignorTest.shouldMapUserEndPointToTopicPartitions and
    shouldAddUserDefinedEndPointToSubscription.

    A single member with an endpoint is mapped to every partition; a second member that serves no
    queries (no endpoint) gets tasks but appears in neither host map (the proto: "of every member
    with an endpoint")."""
    topo = topology(3, stores=())
    a = leader.worker(process_id=_pid(1), port=8080, topo=topo)
    await rebalance(leader.clock, [a], advance_ms=INITIAL_DELAY_MS)
    assert _host_map(a.assignment.partitions_by_host) == {8080: ({("orders", p) for p in range(3)}, set())}
    assert [h.process_id for h in a.assignment.partitions_by_host] == [a.process_id]

    silent = leader.worker(process_id=_pid(2), topo=topo)  # port 0: no endpoint
    await _joins_a_stable_group(leader, [a], silent)
    assert silent.active(), "a member without an endpoint still works"
    for w in (a, silent):
        assert set(_host_map(w.assignment.partitions_by_host)) == {8080}
        assert _host_map(w.assignment.partitions_by_host)[8080][0] == {("orders", int(t.split("_")[1])) for t in a.active()}
        assert [h.process_id for h in w.assignment.partitions_by_host] == [a.process_id]


@pytest.mark.parametrize(
    "host, port, field",
    [
        pytest.param("", 8080, "subscription.endpoint.host", id="no-host"),
        pytest.param("localhost", 0, "subscription.endpoint.port", id="no-port"),
        pytest.param("localhost", -1, "subscription.endpoint.port", id="negative-port"),
    ],
)
async def test_an_endpoint_must_be_a_host_and_a_port(leader, host, port, field):
    """StreamsPartitionAssignorTest.shouldThrowExceptionIfApplicationServerConfigIsNotHostPortPair and
    shouldThrowExceptionIfApplicationServerConfigPortIsNotAnInteger: a malformed endpoint is a
    contract fault (INVALID_ARGUMENT naming the field) and changes nothing."""
    request = leader.worker().join_request()
    request.subscription.endpoint.CopyFrom(pb.HostInfo(host=host, port=port))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await leader.stub.JoinGroup(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"{field}:"), caught.value.details()
    assert (await leader.stub.ListGroups(pb.ListGroupsRequest())).groups == []


async def test_a_member_rejoining_on_a_new_endpoint_rebalances_and_everyone_learns_it(leader):
    """StreamsPartitionAssignorTest.shouldTriggerImmediateRebalanceOnHostInfoChange and
    shouldUpdateClusterMetadataAndHostInfoOnAssignment.

    A member's endpoint changes (it rejoins with its member id and a new port): the group
    rebalances and every member's active and standby host maps name the new endpoint, never the
    old one."""
    config = _config(1)
    workers = [leader.worker(process_id=_pid(i), port=7000 + i, config=config) for i in (1, 2, 3)]
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    moved, others = workers[0], workers[1:]
    generation = moved.generation
    for w in workers:
        w.runs_as_caught_up()
    moved.port = 7011
    await _joins_a_stable_group(leader, others, moved)
    assert moved.generation > generation
    for w in workers:
        for hosts in (w.assignment.partitions_by_host, w.assignment.standby_partitions_by_host):
            ports = {h.process_id: h.host.port for h in hosts}
            assert ports[moved.process_id] == 7011
            assert 7001 not in ports.values()
    assert {m.process_id: m.endpoint.port for m in (await _describe(leader)).members}[moved.process_id] == 7011


async def test_a_static_member_restarting_on_a_new_endpoint_keeps_its_place_and_everyone_learns_it(leader):
    """StreamsPartitionAssignorTest.shouldTriggerImmediateRebalanceOnHostInfoChange, for a static
    member (KIP-345) that restarts on a new port within its session timeout.

    docs/protocol.md: a static replacement whose endpoint differs from its predecessor's
    rebalances, since every member's KIP-535 host maps name the old one. So: the zombie is
    fenced, the others are asked to rejoin, the restarted member keeps its tasks (it reports
    them), and in the next generation every member's maps and RouteQuery name the new port."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config, instance_id="worker-a")
    b = leader.worker(process_id=_pid(2), port=7002, config=config, instance_id="worker-b")
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    generation = a.generation
    restarted = leader.worker(process_id=a.process_id, port=7011, config=config, instance_id="worker-a")
    restarted.task_lags = {**{t: 0 for t in a.standby()}, **{t: LATEST for t in a.active()}}
    join = asyncio.create_task(restarted.join())
    await settle()
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    b.task_lags = {**{t: 0 for t in b.standby()}, **{t: LATEST for t in b.active()}}
    b_active = sorted(b.active())
    b_join = asyncio.create_task(b.join())
    responses = await asyncio.wait_for(asyncio.gather(join, b_join), 30)
    assert [r.error_code for r in responses] == [epb.ERROR_CODE_NONE] * 2
    assert responses[0].generation_id == generation + 1
    for worker in (restarted, b):
        assert (await worker.sync()).error_code == epb.ERROR_CODE_NONE
    assert sorted(restarted.active()) == sorted(a.active()) and sorted(b.active()) == b_active  # nothing moved
    for worker in (restarted, b):
        for hosts in (worker.assignment.partitions_by_host, worker.assignment.standby_partitions_by_host):
            assert {h.process_id: h.host.port for h in hosts} == {a.process_id: 7011, b.process_id: 7002}
    partition = int(restarted.active()[0].split("_")[1])
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=partition))
    assert [(h.host.port, h.role) for h in route.hosts] == [(7011, apb.ROLE_ACTIVE)]


async def test_a_static_member_restarting_on_the_same_endpoint_needs_no_rebalance(leader):
    """KIP-345 as docs/protocol.md keeps it: same endpoint, same versions, a Stable group: the
    replacement takes its predecessor's place in the same generation, the others are not
    disturbed, the zombie is fenced."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config, instance_id="worker-a")
    b = leader.worker(process_id=_pid(2), port=7002, config=config, instance_id="worker-b")
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    restarted = leader.worker(process_id=a.process_id, port=7001, config=config, instance_id="worker-a")
    restarted.task_lags = {**{t: 0 for t in a.standby()}, **{t: LATEST for t in a.active()}}
    response = await restarted.join()
    assert response.error_code == epb.ERROR_CODE_NONE and response.generation_id == a.generation
    assert (await restarted.sync()).error_code == epb.ERROR_CODE_NONE
    assert sorted(restarted.active()) == sorted(a.active())
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_NONE
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID


# ---- what the assignment carries ---------------------------------------------------------------------


async def test_every_task_is_active_once_with_the_partitions_of_all_its_source_topics(leader):
    """StreamsPartitionAssignorTest.testAssignBasic and testAssignWithNewTasks.

    One subtopology reads three topics of 3, 3 and 4 partitions: its tasks are 0_0 .. 0_3 (the
    largest count), task 0_3 reads only the 4-partition topic. Three members: every task is active
    exactly once, each carrying its partition of every topic that has one, and the active host
    map agrees with each member's tasks."""
    topo = _topo(({"topic1": 3, "topic2": 3, "topic3": 4}, ()))
    workers = [leader.worker(process_id=_pid(i), port=7000 + i, topo=topo) for i in (1, 2, 3)]
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    assert _actives(workers) == ["0_0", "0_1", "0_2", "0_3"]
    assert sorted(len(w.active()) for w in workers) == [1, 1, 2]
    every: set[tuple[str, int]] = set()
    hosts = _host_map(workers[0].assignment.partitions_by_host)
    for w in workers:
        mine = set()
        for task in w.assignment.active_tasks:
            p = task.task.partition
            expected = {("topic3", p)} if p == 3 else {("topic1", p), ("topic2", p), ("topic3", p)}
            assert {(tp.topic, tp.partition) for tp in task.partitions} == expected
            mine |= expected
        assert hosts[w.port][0] == mine
        every |= mine
    assert len(every) == 10


async def test_store_partitions_follow_the_subtopology_that_owns_each_store(leader):
    """StreamsPartitionAssignorTest.testAssignWithStates.

    store1 belongs to subtopology 0, store2 and store3 to subtopology 1 (three partitions each):
    three members get two tasks each, and the host map lists store1's partitions for the tasks of
    subtopology 0 and store2's and store3's for those of subtopology 1."""
    topo = _topo(({"topic1": 3}, ("store1",)), ({"topic2": 3}, ("store2", "store3")))
    workers = [leader.worker(process_id=_pid(i), port=7000 + i, topo=topo) for i in (1, 2, 3)]
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    assert _actives(workers) == ["0_0", "0_1", "0_2", "1_0", "1_1", "1_2"]
    assert [len(w.active()) for w in workers] == [2, 2, 2]
    hosts = _host_map(workers[0].assignment.partitions_by_host)
    stores_of = {0: ("store1",), 1: ("store2", "store3")}
    for w in workers:
        expected = {(store, int(t[2:])) for t in w.active() for store in stores_of[int(t[0])]}
        assert hosts[w.port][1] == expected


async def test_stateless_tasks_get_no_standbys_and_move_to_a_newcomer_at_once(leader):
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicasAndStatelessTasks,
    shouldTriggerImmediateRebalanceOnTasksRevoked ("stateless revoked tasks would not be assigned
    as standbys") and shouldNotAssignTemporaryStandbyTask.

    A stateless topology with num_standby_replicas 1: nobody gets a standby, even a newcomer that
    reports the tasks as if it held standbys for them. The newcomer takes its share of actives in
    the same generation (there is no revocation round, hence no follow-up rebalance either)."""
    topo = topology(3, stores=())
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, topo=topo, config=config, task_lags={"0_0": LATEST, "0_1": LATEST, "0_2": LATEST})
    await rebalance(leader.clock, [a], advance_ms=INITIAL_DELAY_MS)
    assert sorted(a.active()) == ["0_0", "0_1", "0_2"] and a.standby() == []
    b = leader.worker(process_id=_pid(2), port=7002, topo=topo, config=config, task_lags={"0_0": 0, "0_1": 0, "0_2": 0})
    await _joins_a_stable_group(leader, [a], b)
    assert _actives([a, b]) == ["0_0", "0_1", "0_2"]
    assert a.active() and b.active()
    assert set(a.active()) < {"0_0", "0_1", "0_2"}  # a gave up what b took, nothing else
    for w in (a, b):
        assert w.standby() == []
        assert len(w.assignment.standby_partitions_by_host) == 0
        assert not w.assignment.HasField("next_rebalance_ms")


async def test_tasks_whose_stores_are_all_unlogged_get_no_standbys(leader):
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicasAndLoggingDisabled.

    A standby replica keeps a store up to date by reading its changelog; a store with logging
    disabled has none, so Kafka creates standbys only for tasks with changelog topics
    (ChangelogTopics.statefulTaskIds) and its test expects no standby at all here, with
    num_standby_replicas 1. KIP-441 "State with logging disabled": such state has nothing to
    restore, every instance is an equal candidate. Consequently no standby host map either, and
    once the active is gone there is no host to route a query of that store to."""
    topo = topology(3, stores=(("sessions", False),))
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, topo=topo, config=config)
    b = leader.worker(process_id=_pid(2), port=7002, topo=topo, config=config)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    assert _actives([a, b]) == ["0_0", "0_1", "0_2"]
    for w in (a, b):
        assert w.standby() == [], (w.port, w.standby())
        assert len(w.assignment.standby_partitions_by_host) == 0
    partition = int(a.active()[0].split("_")[1])
    await b.heartbeat({**{t: 0 for t in b.standby()}, **{t: LATEST for t in b.active()}})
    assert (await a.leave()).error_code == epb.ERROR_CODE_NONE
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="sessions", partition=partition, max_lag=0))
    assert list(route.hosts) == []


@pytest.mark.parametrize(
    "threads, stateless_partitions",
    [
        pytest.param((1, 1), 0, id="dense"),  # testAssignWithStandbyReplicasBalanceDense
        pytest.param((4, 3), 0, id="sparse"),  # testAssignWithStandbyReplicasBalanceSparse
        pytest.param((2, 2), 3, id="with-stateless"),  # testAssignWithStandbyReplicasBalanceWithStatelessTasks
    ],
)
async def test_standbys_are_spread_and_never_beside_their_active(leader, threads, stateless_partitions):
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicasBalanceDense, ...BalanceSparse and
    ...BalanceWithStatelessTasks, at the level of processes (a member's threads are its capacity).

    Three stateful tasks with one standby each, over two processes: each process holds one replica
    of every stateful task (never the active and a standby of the same task), no process runs all
    the actives, and with three stateless tasks beside them the actives split 3 and 3."""
    subs: list[tuple[dict[str, int], tuple[str, ...]]] = [({"topic1": 3}, ("store1",))]
    if stateless_partitions:
        subs.append(({"topic2": stateless_partitions}, ()))
    topo = _topo(*subs)
    a = leader.worker(process_id=_pid(1), port=7001, topo=topo, config=_config(1), threads=threads[0])
    b = leader.worker(process_id=_pid(2), port=7002, topo=topo, config=_config(1), threads=threads[1])
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    stateful = {"0_0", "0_1", "0_2"}
    for w in (a, b):
        assert not set(w.active()) & set(w.standby())
        assert {t for t in w.active() if t in stateful} | set(w.standby()) == stateful
        assert set(w.standby()) <= stateful
        assert {t for t in w.active() if t in stateful} != stateful
        assert len(w.active()) + len(w.standby()) <= 3 * w.threads
    if stateless_partitions:
        assert [len(a.active()), len(b.active())] == [3, 3]


async def test_capacity_follows_the_number_of_threads(leader):
    """StreamsPartitionAssignorTest.shouldAssignEvenlyAcrossConsumersOneClientMultipleThreads, at the
    level of processes: a process with two threads runs twice the tasks of one with one thread."""
    topo = _topo(({"topic1": 3}, ()), ({"topic2": 3}, ()))
    a = leader.worker(process_id=_pid(1), port=7001, topo=topo, threads=2)
    b = leader.worker(process_id=_pid(2), port=7002, topo=topo, threads=1)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    assert (len(a.active()), len(b.active())) == (4, 2)
    assert _actives([a, b]) == ["0_0", "0_1", "0_2", "1_0", "1_1", "1_2"]


# ---- stickiness: members rejoin, join and leave ---------------------------------------------------

_EIGHT_STATELESS = _topo(({"topic1": 4}, ()), ({"topic2": 4}, ()))


async def _three_running_eight(leader) -> list[Worker]:
    workers = [leader.worker(process_id=_pid(i), port=7000 + i, topo=_EIGHT_STATELESS) for i in (1, 2, 3)]
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    assert sorted(len(w.active()) for w in workers) == [2, 3, 3]
    return workers


async def test_nothing_moves_when_nothing_changes(leader):
    """StreamsPartitionAssignorTest.shouldProduceStickyAndBalancedAssignmentWhenNothingChanges: the
    same members rejoin (reporting nothing: stateless tasks have no lag) and keep their tasks."""
    workers = await _three_running_eight(leader)
    before = {w.process_id: sorted(w.active()) for w in workers}
    await rebalance(leader.clock, workers)
    assert {w.process_id: sorted(w.active()) for w in workers} == before


async def test_a_newcomer_takes_tasks_only_from_the_most_loaded(leader):
    """StreamsPartitionAssignorTest.shouldProduceStickyEnoughAssignmentWhenNewMemberJoins: eight tasks
    on three members (3, 3, 2); a fourth joins. Everyone ends with two; the members with three
    give up one each and keep the rest; the one with two keeps both."""
    workers = await _three_running_eight(leader)
    before = {w.process_id: set(w.active()) for w in workers}
    newcomer = leader.worker(process_id=_pid(4), port=7004, topo=_EIGHT_STATELESS)
    await _joins_a_stable_group(leader, workers, newcomer)
    assert [len(w.active()) for w in (*workers, newcomer)] == [2, 2, 2, 2]
    for w in workers:
        assert set(w.active()) <= before[w.process_id]
    assert _actives([*workers, newcomer]) == sorted(f"{s}_{p}" for s in (0, 1) for p in range(4))


async def test_a_leavers_tasks_spread_over_the_rest_who_keep_theirs(leader):
    """StreamsPartitionAssignorTest.shouldProduceMaximallyStickyAssignmentWhenMemberLeaves: one of
    three members leaves; the other two keep all their tasks and take the leaver's, four each."""
    workers = await _three_running_eight(leader)
    leaver = next(w for w in workers if len(w.active()) == 3)
    rest = [w for w in workers if w is not leaver]
    before = {w.process_id: set(w.active()) for w in rest}
    assert (await leaver.leave()).error_code == epb.ERROR_CODE_NONE
    await rebalance(leader.clock, rest)
    for w in rest:
        assert set(w.active()) >= before[w.process_id]
        assert len(w.active()) == 4
    assert (await _describe(leader)).last_rebalance_trigger == "member_left"


async def test_a_caught_up_standby_takes_over_the_active_of_a_member_that_left(leader):
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicas (previous standby tasks in the
    subscription) with shouldProduceMaximallyStickyAssignmentWhenMemberLeaves.

    Three members each run one task and keep a caught-up standby of another's. The first leaves:
    its task goes to the member holding its standby, at once (no warm-up, no probe), and the
    others keep their own tasks."""
    config = _config(1)
    a = leader.worker(process_id=_pid(1), port=7001, config=config, task_lags={"0_0": LATEST, "0_1": 0})
    b = leader.worker(process_id=_pid(2), port=7002, config=config, task_lags={"0_1": LATEST, "0_2": 0})
    c = leader.worker(process_id=_pid(3), port=7003, config=config, task_lags={"0_2": LATEST, "0_0": 0})
    await rebalance(leader.clock, [a, b, c], advance_ms=INITIAL_DELAY_MS)
    assert (a.active(), b.active(), c.active()) == (["0_0"], ["0_1"], ["0_2"])
    assert (a.standby(), b.standby(), c.standby()) == (["0_1"], ["0_2"], ["0_0"])
    for w in (b, c):
        w.runs_as_caught_up()
    assert (await a.leave()).error_code == epb.ERROR_CODE_NONE
    await rebalance(leader.clock, [b, c])
    assert b.active() == ["0_1"]
    assert sorted(c.active()) == ["0_0", "0_2"]
    for w in (b, c):
        assert w.warmups() == []
        assert not w.assignment.HasField("next_rebalance_ms")


# ---- lags from task offset sums (ClientState, SubscriptionInfo) -----------------------------------


async def test_offset_sums_become_lags_previous_actives_and_previous_standbys(leader):
    """ClientStateTest.shouldComputeTaskLags, shouldReturnLatestOffsetForLagOfPreviousActiveRunningTask,
    shouldReturnUnknownOffsetSumForLagOfTaskWithUnknownOffset, shouldAddTasksWithLatestOffsetTo
    PrevActiveTasks, shouldAddTasksInOffsetSumsMapToPrevStandbyTasks;
    SubscriptionInfoTest.shouldConvertTaskOffsetSumMapToTaskSets.

    A reports Kafka's form: 0_0 running (offset sum LATEST), 0_1 at 0 of 500, 0_2 at 100 of 100.
    The server's lags are LATEST, 500 and 0; A keeps 0_0 active and, being the only caught-up
    holder of 0_2, a replica of it. B reports state of unknown size for 0_3. When B later reports
    a larger end offset for 0_2, A's lag on it grows (the server keeps the largest end offset)."""
    config = _config(1)
    a = OffsetWorker(leader.stub, process_id=_pid(1), port=7001, config=config, topo=topology(4),
                     offset_sums={"0_0": -1, "0_1": 0, "0_2": 100}, end_offsets={"0_0": 1_000, "0_1": 500, "0_2": 100})
    b = leader.worker(process_id=_pid(2), port=7002, config=config, topo=topology(4), task_lags={"0_3": UNKNOWN})
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    lags = await _lags(leader)
    assert lags[a.process_id] == {"0_0": LATEST, "0_1": 500, "0_2": 0}
    assert lags[b.process_id] == {"0_3": UNKNOWN}
    assert "0_0" in a.active()
    assert "0_2" in a.active() + a.standby()

    request = pb.HeartbeatRequest(group_id="app", member_id=b.member_id, generation_id=b.generation,
                                  lags=OffsetWorker(leader.stub, offset_sums={}, end_offsets={"0_2": 400}).offset_report())
    assert (await leader.stub.Heartbeat(request)).error_code == epb.ERROR_CODE_NONE
    assert (await _lags(leader))[a.process_id]["0_2"] == 300


async def test_an_offset_sum_beyond_the_changelog_end_counts_as_state_to_rebuild(leader):
    """ClientStateTest.shouldReturnEndOffsetSumIfOffsetSumIsGreaterThanEndOffsetSum, with
    HighAvailabilityTaskAssignorTest.shouldAssignToMostCaughtUpIfActiveTasksWasNotOnCaughtUpClient.

    Kafka: a task whose local offset sum is beyond its changelog's end holds state the changelog
    does not (it is corrupted and will be wiped), so its lag is the whole end offset sum. Here B's
    offset sum is 5,000 against an end of 1,000, while A is a genuine 400 behind: B's lag must be
    1,000, and the one task's active goes to the most caught-up member, A (KIP-441 property 1)."""
    config = _config(0)
    a = OffsetWorker(leader.stub, process_id=_pid(1), port=7001, config=config, topo=topology(1),
                     offset_sums={"0_0": 600}, end_offsets={"0_0": 1_000})
    b = OffsetWorker(leader.stub, process_id=_pid(2), port=7002, config=config, topo=topology(1),
                     offset_sums={"0_0": 5_000}, end_offsets={"0_0": 1_000})
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    lags = await _lags(leader)
    assert lags[a.process_id] == {"0_0": 400}
    assert lags[b.process_id] == {"0_0": 1_000}, lags[b.process_id]
    assert (a.active(), b.active()) == (["0_0"], [])


# ---- membership: rejoin and one member per process -------------------------------------------------


async def test_a_rejoin_with_an_unchanged_subscription_still_rebalances(leader):
    """StreamsPartitionAssignorTest.testUniqueField: Kafka Streams varies a byte of every
    subscription so that the coordinator never skips a rebalance a member asked for (a probing
    rebalance, say) because its metadata is unchanged. Here a known member's JoinGroup always
    starts a rebalance, identical subscription or not."""
    a = leader.worker(process_id=_pid(1), port=7001)
    b = leader.worker(process_id=_pid(2), port=7002)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    generation = a.generation
    joining = asyncio.create_task(a.join())  # the very same request as before
    await settle()
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, [b])
    assert (await joining).error_code == epb.ERROR_CODE_NONE
    assert a.generation == b.generation == generation + 1
    assert (await _describe(leader)).last_rebalance_trigger == "member_rejoined"


async def test_a_new_member_claiming_a_live_members_process_id_replaces_it(leader):
    """StreamsPartitionAssignorTest.testAssignBasic: consumers that share a process id are one
    client. Here a member is a whole process, so a new member (no member id) that claims the
    process id of a live member is that process restarted: the old member is superseded
    (fenced: FENCED_INSTANCE_ID) and the new one gets that client's tasks; no task is active twice."""
    a = leader.worker(process_id=_pid(1), port=7001, task_lags={"0_0": LATEST, "0_1": LATEST})
    b = leader.worker(process_id=_pid(2), port=7002, task_lags={"0_2": LATEST})
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    assert (sorted(a.active()), b.active()) == (["0_0", "0_1"], ["0_2"])
    again = leader.worker(process_id=a.process_id, port=7011, task_lags={"0_0": LATEST, "0_1": LATEST})
    joining = asyncio.create_task(again.join())
    await settle()
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    b.runs_as_caught_up()
    await rebalance(leader.clock, [b])
    assert (await joining).error_code == epb.ERROR_CODE_NONE
    assert (await again.sync()).error_code == epb.ERROR_CODE_NONE
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    assert (sorted(again.active()), b.active()) == (["0_0", "0_1"], ["0_2"])
    group = await _describe(leader)
    assert sorted(m.member_id for m in group.members) == sorted([again.member_id, b.member_id])
    assert [h.host.port for h in again.assignment.partitions_by_host if h.process_id == a.process_id] == [7011]


# ---- scale (StreamsAssignmentScaleTest) --------------------------------------------------------------

MAX_ASSIGNMENT_S = 60  # StreamsAssignmentScaleTest.MAX_ASSIGNMENT_DURATION


@pytest.mark.parametrize(
    "partitions, clients, threads, standbys",
    [
        pytest.param(6_000, 2, 1, 1, id="LargePartitionCount"),
        pytest.param(1_000, 1_000, 1, 1, id="LargeNumConsumers"),
        pytest.param(1_000, 100, 1, 50, id="ManyStandbys"),
        pytest.param(1_000, 10, 1_000, 1, id="ManyThreadsPerClient"),
    ],
)
async def test_large_assignments_complete_twice_in_time(leader, partitions, clients, threads, standbys):
    """StreamsAssignmentScaleTest.testHighAvailabilityTaskAssignorLargePartitionCount,
    ...LargeNumConsumers, ...ManyStandbys and ...ManyThreadsPerClient.

    A first assignment from nothing, then a second in which every member reports what it runs:
    each completes (JoinGroup to the last SyncGroup) within Kafka's bound, every task is active
    exactly once with its configured standbys elsewhere, and the second moves nothing."""
    topo = topology(partitions)
    config = _config(standbys)
    workers = [leader.worker(process_id=_pid(i + 1), topo=topo, config=config, threads=threads) for i in range(clients)]
    started = time.monotonic()
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    assert time.monotonic() - started < MAX_ASSIGNMENT_S
    first = {w.process_id: (sorted(w.active()), sorted(w.standby())) for w in workers}
    actives = [t for w in workers for t in w.active()]
    assert len(actives) == len(set(actives)) == partitions
    standby_count: dict[str, int] = {}
    for w in workers:
        assert w.assignment.error_code == epb.ASSIGNOR_ERROR_NONE
        assert not set(w.active()) & set(w.standby())
        for t in w.standby():
            standby_count[t] = standby_count.get(t, 0) + 1
    assert set(standby_count.values()) == {standbys} and len(standby_count) == partitions

    for w in workers:
        w.runs_as_caught_up()
    started = time.monotonic()
    await rebalance(leader.clock, workers)
    assert time.monotonic() - started < MAX_ASSIGNMENT_S
    assert {w.process_id: (sorted(w.active()), sorted(w.standby())) for w in workers} == first
    assert not any(w.assignment.HasField("next_rebalance_ms") for w in workers)
