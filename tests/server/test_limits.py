"""Bounded work at the edge (docs/security.md, "Limits"): every size a request may have is
checked before any work, and the refusal names the limit and the value; unexpected errors never
reach a client as text."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

import assignor
from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from server.failures import INTERNAL_MESSAGE
from tests.server.harness import rebalance, running_server, topology

pytestmark = pytest.mark.asyncio


async def _refused(call, request) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request)
    return caught.value


async def test_a_partition_count_of_2_31_is_refused_at_once_and_changes_nothing(tmp_path):
    async with running_server(tmp_path) as s:
        attacker = s.worker(group_id="huge", topo=topology(2**31 - 1))
        error = await asyncio.wait_for(_refused(s.stub.JoinGroup, attacker.join_request()), 2)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "partition_count: 2147483647 exceeds max_partitions_per_topic = 10000" in error.details()
        assert "--max-partitions-per-topic" in error.details()
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "JoinGroup", "code": "INVALID_ARGUMENT", "reason": "max_partitions_per_topic"}) == 1.0
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []


async def test_tasks_per_group_count_the_widest_topic_of_each_subtopology(tmp_path):
    wide = pb.Topology(subtopologies=[
        pb.Subtopology(id=i, source_topics=[pb.SourceTopic(name=f"t{i}", partition_count=60)]) for i in range(2)
    ])
    async with running_server(tmp_path, max_tasks_per_group=100) as s:
        error = await _refused(s.stub.JoinGroup, s.worker(topo=wide).join_request())
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "subscription.topology tasks: 120 exceeds max_tasks_per_group = 100" in error.details()
        fits = s.worker(topo=topology(100))
        await rebalance(s.clock, [fits], advance_ms=3_000)


async def test_partitions_per_group_count_every_subtopology_s_topics(tmp_path):
    """SyncGroup's host maps list each task's topic partitions: two subtopologies of a topic of
    60 partitions each are 120 entries, and count as such (checked before the topology itself)."""
    shared = pb.Topology(subtopologies=[
        pb.Subtopology(id=i, source_topics=[pb.SourceTopic(name=f"topic-{i}", partition_count=60)]) for i in range(2)
    ])
    async with running_server(tmp_path, max_partitions_per_group=100) as s:
        error = await _refused(s.stub.JoinGroup, s.worker(topo=shared).join_request())
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("subscription.topology partitions: 120 exceeds max_partitions_per_group = 100"
                " (limit --max-partitions-per-group)") in error.details()
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []


def _stores(names: list[str]) -> list[pb.StateStore]:
    return [pb.StateStore(name=name, logged=True) for name in names]


def _store_heavy(extra_subtopology: bool) -> pb.Topology:
    """100 store partitions: 10 tasks x 4 stores, and 20 tasks (the widest of two topics, not
    their sum) x 3 stores; one more subtopology of one task and one store makes 101."""
    subtopologies = [
        pb.Subtopology(id=0, source_topics=[pb.SourceTopic(name="a", partition_count=10)],
                       state_stores=_stores([f"a{k}" for k in range(4)])),
        pb.Subtopology(id=1, source_topics=[pb.SourceTopic(name="b", partition_count=20),
                                            pb.SourceTopic(name="c", partition_count=5)],
                       state_stores=_stores([f"b{k}" for k in range(3)])),
    ]
    if extra_subtopology:
        subtopologies.append(pb.Subtopology(id=2, source_topics=[pb.SourceTopic(name="d", partition_count=1)],
                                            state_stores=_stores(["d0"])))
    return pb.Topology(subtopologies=subtopologies)


def _long_names(partitions: int, subtopologies: int = 1) -> pb.Topology:
    """Subtopologies each reading a topic of a 200-character name into a logged store of one."""
    return pb.Topology(subtopologies=[pb.Subtopology(
        id=i, source_topics=[pb.SourceTopic(name=f"{i}".ljust(200, "t"), partition_count=partitions)],
        state_stores=[pb.StateStore(name=f"{i}".ljust(200, "s"), logged=True)]) for i in range(subtopologies)])


async def test_host_map_bytes_count_the_names_each_replica_lists(tmp_path):
    """An outsider's find: the limits counted entries, so a few kilobytes of JoinGroup with long
    names made SyncGroup answers of 40 MB. 2,000 tasks x (200 + 8 bytes of topic and as many of
    store) x (active + 1 standby) = 1,664,000 bytes, and the 2 warm-ups of the default
    max_warmup_replicas 832 more; without the standby, about half."""
    async with running_server(tmp_path, max_host_map_bytes=1_000_000) as s:
        heavy = s.worker(topo=_long_names(2_000))
        heavy.config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1)
        error = await asyncio.wait_for(_refused(s.stub.JoinGroup, heavy.join_request()), 5)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == ("subscription.topology: the SyncGroup answers' names, bytes: 1664832 exceeds "
                                   "max_host_map_bytes = 1000000 (limit --max-host-map-bytes)")
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "JoinGroup", "code": "INVALID_ARGUMENT", "reason": "max_host_map_bytes"}) == 1.0
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []
        fits = s.worker(topo=_long_names(2_000))
        await rebalance(s.clock, [fits], advance_ms=3_000)
        assert len(fits.active()) == 2_000


async def test_a_join_that_would_grow_the_group_s_merged_topology_past_a_limit_is_refused(tmp_path):
    """An attack on the limit: a group runs on the merge of its members' topologies (each topic at
    its largest reported partition count), so two joins each within the limit, each widening
    another subtopology, made answers twice the limit. The join that would grow the merge past
    it is refused, and the group goes on as it was: 2 x 1,500 tasks x 416 bytes of names, and 2
    warm-ups' 832, against each join's 624,832 + 416."""
    def widened(wide: int) -> pb.Topology:
        topo = _long_names(1, subtopologies=2)
        topo.subtopologies[wide].source_topics[0].partition_count = 1_500
        return topo

    async with running_server(tmp_path, max_host_map_bytes=1_000_000) as s:
        first = s.worker(topo=widened(0))
        await rebalance(s.clock, [first], advance_ms=3_000)
        error = await asyncio.wait_for(_refused(s.stub.JoinGroup, s.worker(topo=widened(1), port=7002).join_request()), 5)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("subscription.topology (merged with the group's): the SyncGroup answers' "
                                          "names, bytes: 1248832 exceeds max_host_map_bytes = 1000000")
        assert (await first.heartbeat()).error_code == epb.ERROR_CODE_NONE
        assert len(first.active()) == 1_501


async def test_our_channels_take_answers_beyond_grpc_s_default_4_mib(tmp_path):
    """A group within every default limit (12,000 tasks, names of 200 characters) gets SyncGroup
    answers of some 8 MB: the channels the worker library, the sidecar and the CLI open
    (``client.member.open_channel``) accept what the server may send, not gRPC's default 4 MiB."""
    from client.member import open_channel
    from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc

    async with running_server(tmp_path) as s, open_channel(f"127.0.0.1:{s.server.port}") as channel:
        member = s.worker(topo=_long_names(6_000, subtopologies=2), port=7001)
        member.stub = pb_grpc.GroupLeaderStub(channel)
        await rebalance(s.clock, [member], advance_ms=3_000)
        assert len(member.active()) == 12_000
        assert pb.SyncGroupResponse(assignment=member.assignment).ByteSize() > 4 * 1024 * 1024


async def test_a_large_group_is_described_whole_from_off_the_event_loop(tmp_path):
    """Beyond ``OFF_LOOP_TASKS`` the DescribeGroup answer is built in a worker thread (a group of
    50,000 tasks held health checks 433 ms, docs/benchmarks.md): the answer is the same whole."""
    from server.limits import OFF_LOOP_TASKS

    async with running_server(tmp_path) as s:
        member = s.worker(topo=topology(OFF_LOOP_TASKS + 1), port=7001)
        await rebalance(s.clock, [member], advance_ms=3_000)
        answer = await s.stub.DescribeGroup(pb.DescribeGroupRequest(group_id=member.group_id))
        (described,) = answer.group.members
        assert described.member_id == member.member_id and len(described.active) == OFF_LOOP_TASKS + 1


async def test_store_partitions_count_each_subtopology_s_stores_times_its_tasks(tmp_path):
    async with running_server(tmp_path, max_store_partitions_per_group=100) as s:
        error = await _refused(s.stub.JoinGroup, s.worker(topo=_store_heavy(True)).join_request())
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("subscription.topology store partitions: 101 exceeds max_store_partitions_per_group = 100"
                " (limit --max-store-partitions-per-group)") in error.details()
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "JoinGroup", "code": "INVALID_ARGUMENT", "reason": "max_store_partitions_per_group"}) == 1.0
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []
        fits = s.worker(topo=_store_heavy(False), port=7001)
        await rebalance(s.clock, [fits], advance_ms=3_000)
        # the SyncGroup host map lists exactly the store partitions the limit counted
        assert [len(h.store_partitions) for h in fits.assignment.partitions_by_host] == [100]


async def test_rack_names_and_tag_values_of_255_characters_join(tmp_path):
    """The longest identifier is accepted; one character more is refused (test_service.py)."""
    topo = topology(3)
    topo.subtopologies[0].source_topics[0].partition_racks.add(partition=2, racks=["r" * 255, "rack-b"])
    async with running_server(tmp_path) as s:
        request = s.worker(topo=topo).join_request()
        request.subscription.client_tags["zone"] = "z" * 255
        request.subscription.client_tags["city"] = "Zürich-東京"  # letters of any script are no control characters
        joined = asyncio.ensure_future(s.stub.JoinGroup(request))
        members = []
        for _ in range(500):  # the join waits at the group's first barrier, already in the group
            await asyncio.sleep(0.01)
            members = (await s.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group.members
            if members:
                break
        assert [dict(m.client_tags) for m in members] == [{"zone": "z" * 255, "city": "Zürich-東京"}]
        await s.clock.advance(3_000)
        assert (await asyncio.wait_for(joined, 10)).error_code == epb.ERROR_CODE_NONE


async def test_a_static_member_of_the_longest_instance_id_gets_a_member_id_it_can_use(tmp_path):
    """A protocol audit's find: the member id was the instance id and a uuid, so an instance id
    of 219 characters or more (255 are allowed) made a member id that every later call refused
    (INVALID_ARGUMENT: longer than 255 characters), and the group waited on it."""
    async with running_server(tmp_path) as s:
        worker = s.worker(instance_id="i" * 255)
        await rebalance(s.clock, [worker], advance_ms=3_000)
        assert len(worker.member_id) <= 255 and worker.member_id.startswith("i" * 200)
        assert sorted(worker.active()) == ["0_0", "0_1", "0_2"]
        assert (await worker.heartbeat()).error_code == epb.ERROR_CODE_NONE


async def test_rebalance_timeout_has_an_upper_bound(tmp_path):
    async with running_server(tmp_path) as s:
        request = s.worker().join_request()
        request.rebalance_timeout_ms = 2**31 - 1
        error = await _refused(s.stub.JoinGroup, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("rebalance_timeout_ms: 2147483647 exceeds max_rebalance_timeout_ms = 1800000")


async def test_a_full_group_refuses_newcomers_but_not_its_members(tmp_path):
    async with running_server(tmp_path, max_members_per_group=2) as s:
        members = [s.worker(), s.worker()]
        await rebalance(s.clock, members, advance_ms=3_000)
        error = await _refused(s.stub.JoinGroup, s.worker().join_request())
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "members of group 'app': 3 exceeds max_members_per_group = 2" in error.details()
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "JoinGroup", "code": "RESOURCE_EXHAUSTED", "reason": "max_members_per_group"}) == 1.0
        await rebalance(s.clock, members)  # the members rejoin: no newcomer, no refusal
        assert all(m.generation == 2 for m in members)


async def test_a_full_server_refuses_new_groups(tmp_path):
    async with running_server(tmp_path, max_groups=1) as s:
        await rebalance(s.clock, [s.worker(group_id="first")], advance_ms=3_000)
        error = await _refused(s.stub.JoinGroup, s.worker(group_id="second").join_request())
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "groups on this server: 2 exceeds max_groups = 1" in error.details()


async def test_lag_reports_are_bounded_in_heartbeats_too(tmp_path):
    async with running_server(tmp_path, max_tasks_per_group=10) as s:
        member = s.worker(topo=topology(3))
        await rebalance(s.clock, [member], advance_ms=3_000)
        request = pb.HeartbeatRequest(group_id="app", member_id=member.member_id, generation_id=member.generation)
        for p in range(11):
            request.lags.task_lags.add(task=apb.TaskId(subtopology=0, partition=p), lag=5)
        error = await _refused(s.stub.Heartbeat, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "lags.task_lags: 11 exceeds max_tasks_per_group = 10" in error.details()
        assert (await member.heartbeat()).error_code == epb.ERROR_CODE_NONE


def _problem(tasks: int, clients: int) -> apb.AssignmentProblem:
    problem = apb.AssignmentProblem()
    for p in range(tasks):
        problem.tasks.add(id=apb.TaskId(subtopology=0, partition=p))
    for c in range(clients):
        problem.clients.add(id=f"c{c}", threads=1)
    return problem


async def test_assign_sizes_are_bounded(tmp_path):
    async with running_server(tmp_path, max_tasks_per_assign=10, max_clients_per_assign=2) as s:
        error = await _refused(s.stub.Assign, pb.AssignRequest(problem=_problem(11, 1)))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "problem.tasks: 11 exceeds max_tasks_per_assign = 10" in error.details()
        error = await _refused(s.stub.Assign, pb.AssignRequest(problem=_problem(1, 3)))
        assert "problem.clients: 3 exceeds max_clients_per_assign = 2" in error.details()
        answer = await s.stub.Assign(pb.AssignRequest(problem=_problem(10, 2)))
        assert sum(len(c.active) for c in answer.result.clients) == 10


async def test_client_tags_and_assignment_tag_keys_are_bounded_in_number(tmp_path):
    """An audit's find: tags were bounded in length only, so six joins of 120,000 tags each (14
    MB, within the message limit) grew the server by 0.44 GB, and 2,000 tag keys per member made
    one rebalance's standby search take minutes. At the limit a member joins; one more tag, in
    a subscription, a config or an Assign client, is refused naming the field and the flag."""
    async with running_server(tmp_path, max_client_tags=3) as s:
        request = s.worker().join_request()
        for k in range(4):
            request.subscription.client_tags[f"key{k}"] = "v"
        error = await _refused(s.stub.JoinGroup, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == ("subscription.client_tags: 4 exceeds max_client_tags = 3 "
                                   "(limit --max-client-tags)")
        request = s.worker().join_request()
        request.subscription.config.rack_aware_assignment_tags.extend(["a", "b", "c", "d"])
        error = await _refused(s.stub.JoinGroup, request)
        assert "subscription.config.rack_aware_assignment_tags: 4 exceeds max_client_tags = 3" in error.details()
        problem = _problem(4, 2)
        for k in range(4):
            problem.clients[1].tags[f"key{k}"] = "v"
        error = await _refused(s.stub.Assign, pb.AssignRequest(problem=problem))
        assert "problem.clients[1].tags: 4 exceeds max_client_tags = 3" in error.details()
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "JoinGroup", "code": "INVALID_ARGUMENT", "reason": "max_client_tags"}) == 2.0
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []
        del problem.clients[1].tags["key3"]
        problem.config.rack_aware_assignment_tags.extend(["key0", "key1", "key2"])
        answer = await s.stub.Assign(pb.AssignRequest(problem=problem))
        assert sum(len(c.active) for c in answer.result.clients) == 4
        member = s.worker()
        request = member.join_request()
        request.subscription.client_tags.update({"key0": "a", "key1": "b", "key2": "c"})
        request.subscription.config.rack_aware_assignment_tags.extend(["key0", "key1", "key2"])
        joined = asyncio.ensure_future(s.stub.JoinGroup(request))
        await asyncio.sleep(0.2)
        await s.clock.advance(3_000)
        assert (await asyncio.wait_for(joined, 10)).error_code == epb.ERROR_CODE_NONE


async def test_standbys_count_as_replicas_however_large_num_standby_replicas_is(tmp_path):
    """An audit's find: num_standby_replicas of 2^31 - 1 (any int is valid) gave every task a
    standby on every other client; 52 KB of Assign took 81 CPU seconds and a gigabyte. Replicas
    are counted before any work: every task's active, each stateful task's standbys (in an
    Assign at most one per other client)."""
    async with running_server(tmp_path, max_replicas_per_assign=100, max_replicas_per_group=100) as s:
        problem = _problem(20, 10)
        for task in problem.tasks:
            task.stateful = True
        problem.config.num_standby_replicas = 2**31 - 1
        error = await _refused(s.stub.Assign, pb.AssignRequest(problem=problem))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == ("problem.config.num_standby_replicas: 20 tasks and 20 stateful tasks x 9 standbys "
                                   "make 200 replicas, exceeds max_replicas_per_assign = 100 (limit --max-replicas-per-assign)")
        problem.config.num_standby_replicas = 4  # 20 + 20 x 4 = 100
        answer = await s.stub.Assign(pb.AssignRequest(problem=problem))
        assert sum(len(c.standby) for c in answer.result.clients) == 80
        for task in problem.tasks[10:]:
            task.stateful = False  # stateless tasks get no standbys: 20 + 10 x 8 = 100
        problem.config.num_standby_replicas = 8
        assert (await s.stub.Assign(pb.AssignRequest(problem=problem))).result.clients

        config = apb.AssignmentConfig(num_standby_replicas=2**31 - 1)
        error = await _refused(s.stub.JoinGroup, s.worker(topo=topology(3), config=config).join_request())
        assert error.details().startswith("subscription.config.num_standby_replicas: 3 tasks and 3 stateful tasks x "
                                          "2147483647 standbys make 6442450944 replicas, exceeds max_replicas_per_group")
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "JoinGroup", "code": "INVALID_ARGUMENT", "reason": "max_replicas_per_group"}) == 1.0
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []
        unlogged = s.worker(topo=topology(3, stores=(("cache", False),)), config=config, port=7001)
        await rebalance(s.clock, [unlogged], advance_ms=3_000)  # stateless: no standby to count
        assert sorted(unlogged.active()) == ["0_0", "0_1", "0_2"]


async def test_topics_of_unknown_size_still_count_their_listing_and_stores(tmp_path):
    """An audit's find: a topic of partition_count 0 (unknown: INCOMPLETE_SOURCE_TOPIC_METADATA)
    counted nothing, so a 13 MB join of a million state stores got in and kept 200 MB. It counts
    as one partition now, its subtopology's stores with it."""
    async with running_server(tmp_path, max_store_partitions_per_group=100, max_partitions_per_group=50) as s:
        stores = pb.Topology(subtopologies=[pb.Subtopology(
            id=0, source_topics=[pb.SourceTopic(name="unknown", partition_count=0)],
            state_stores=[pb.StateStore(name=f"s{i}", logged=True) for i in range(101)])])
        error = await _refused(s.stub.JoinGroup, s.worker(topo=stores).join_request())
        assert "subscription.topology store partitions: 101 exceeds max_store_partitions_per_group = 100" in error.details()
        topics = pb.Topology(subtopologies=[pb.Subtopology(
            id=0, source_topics=[pb.SourceTopic(name=f"t{i}", partition_count=0) for i in range(51)])])
        error = await _refused(s.stub.JoinGroup, s.worker(topo=topics).join_request())
        assert "subscription.topology partitions: 51 exceeds max_partitions_per_group = 50" in error.details()
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []


async def test_assign_calls_are_bounded_apart_from_the_groups_and_a_cancelled_one_counts_until_its_work_ends(tmp_path):
    """An audit's find: Assign calls ran where the groups' rebalances run, first come first
    served, so twelve calls at once held a group's rebalance (5,000 tasks) back from 0.8 s to
    25 s. They have a runner of their own now, and at most --max-concurrent-assigns at once;
    one more is refused at once. A client that gives up frees nothing until the work it
    started ends (it cannot be stopped): else sending and cancelling in a loop would pile up
    work without bound. The assignor's work is held back here (an event) to make "in progress"
    exact; everything else is the real server."""
    release = threading.Event()

    def held_back(problem):
        release.wait(30)
        return assignor.solve(problem)

    async with running_server(tmp_path, max_concurrent_assigns=1) as s:
        s.server._assign_runner._assign = held_back  # the Assign calls' runner only
        request = pb.AssignRequest(problem=_problem(4, 2))
        error = await _refused(lambda r: s.stub.Assign(r, timeout=0.5), request)
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # the caller gave up; the work goes on
        error = await _refused(s.stub.Assign, request)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.details() == ("1 Assign calls in progress, max_concurrent_assigns = 1; retry later "
                                   "(limit --max-concurrent-assigns)")
        assert s.server.metrics.registry.get_sample_value("remote_leader_requests_refused_total", {
            "method": "Assign", "code": "RESOURCE_EXHAUSTED", "reason": "max_concurrent_assigns"}) == 1.0

        worker = s.worker(topo=topology(4))  # meanwhile a group rebalances, unhindered
        await rebalance(s.clock, [worker], advance_ms=3_000)
        assert sorted(worker.active()) == ["0_0", "0_1", "0_2", "0_3"]

        release.set()
        for _ in range(100):  # the held-back work ends, and frees its slot
            try:
                answer = await s.stub.Assign(request)
                break
            except grpc.aio.AioRpcError as refused:
                assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                await asyncio.sleep(0.05)
        assert sum(len(c.active) for c in answer.result.clients) == 4


async def test_assign_with_tasks_but_no_clients_names_the_field(tmp_path):
    async with running_server(tmp_path) as s:
        error = await _refused(s.stub.Assign, pb.AssignRequest(problem=_problem(3, 0)))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("problem.clients: must not be empty")


async def test_a_message_over_the_size_limit_is_refused_by_grpc(tmp_path):
    async with running_server(tmp_path, max_message_bytes=1024) as s:
        request = s.worker().join_request()
        request.subscription.client_tags["padding"] = "x" * 2048
        error = await _refused(s.stub.JoinGroup, request)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_large_join_is_converted_off_the_loop_and_still_validated(tmp_path):
    async with running_server(tmp_path) as s:
        member = s.worker(topo=topology(10_000))
        member.task_lags = {f"0_{p}": 7 for p in range(10_000)}
        assert member.join_request().ByteSize() > 64 * 1024
        await rebalance(s.clock, [member], advance_ms=3_000)
        assert len(member.active()) == 10_000
        bad = s.worker(topo=topology(10_000))
        bad.task_lags = {f"0_{p}": -7 for p in range(10_000)}
        error = await _refused(s.stub.JoinGroup, bad.join_request())
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("subscription.lags.task_lags[0].lag: must be >= -2")


async def test_an_unexpected_error_answers_internal_without_its_text(tmp_path, monkeypatch):
    async with running_server(tmp_path) as s:
        def broken(group_id):
            raise KeyError("/secret/path/of/the/server")

        monkeypatch.setattr(s.server.coordinator, "describe", broken)
        error = await _refused(s.stub.DescribeGroup, pb.DescribeGroupRequest(group_id="app"))
        assert error.code() == grpc.StatusCode.INTERNAL
        assert error.details() == INTERNAL_MESSAGE
        assert s.server.metrics.registry.get_sample_value(
            "remote_leader_rpc_internal_errors_total", {"method": "DescribeGroup"}) == 1.0
        assert (await s.stub.ListGroups(pb.ListGroupsRequest())).groups == []

