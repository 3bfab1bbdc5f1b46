"""End to end over a real server: malformed requests, restart persistence, 200 concurrent
members, the stateless Assign RPC, RouteQuery, health, reflection and drain."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from server.timers import FakeClock
from tests.server.harness import (
    LATEST,
    Worker,
    joined,
    lags,
    rebalance,
    run_for,
    running_server,
    settle,
    topology,
)

INITIAL_DELAY_MS = 3_000
FIXTURES = Path(__file__).parent.parent / "fixtures" / "scenarios"


def _join(**changes) -> pb.JoinGroupRequest:
    request = Worker(stub=None).join_request()  # type: ignore[arg-type]
    for path, value in changes.items():
        target = request
        *parents, leaf = path.split("__")
        for name in parents:
            target = getattr(target, name)
        if isinstance(value, list):
            del getattr(target, leaf)[:]
            getattr(target, leaf).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(target, leaf).CopyFrom(value)
        else:
            setattr(target, leaf, value)
    return request


def _without(field: str) -> pb.JoinGroupRequest:
    request = _join()
    *parents, leaf = field.split(".")
    target = request
    for name in parents:
        target = getattr(target, name)
    target.ClearField(leaf)
    return request


def _tagged(key: str, value: str) -> pb.JoinGroupRequest:
    request = _join()
    request.subscription.client_tags[key] = value
    return request


def _racked(*racks: str) -> pb.Topology:
    """Three partitions; partition 1 has replicas on these racks."""
    topo = topology(3)
    topo.subtopologies[0].source_topics[0].partition_racks.add(partition=1, racks=list(racks))
    return topo


_RACKS = "subscription.topology.subtopologies[0].source_topics[0].partition_racks[0].racks"


def _two_subtopologies(second_topic: str, second_store: str) -> pb.Topology:
    """Subtopology 0 reads "orders" into "counts"; subtopology 1 reads and keeps these."""
    topo = topology(3)
    topo.subtopologies.add(id=1, source_topics=[pb.SourceTopic(name=second_topic, partition_count=3)],
                           state_stores=[pb.StateStore(name=second_store, logged=True)])
    return topo


_BAD_TASK_LAG = pb.LagReport(task_lags=[apb.TaskLag(task=apb.TaskId(subtopology=0, partition=1), lag=-7)])
# an outsider's find: a lag without its task read as task 0_0's
_TASKLESS_LAG = pb.LagReport(task_lags=[apb.TaskLag(lag=777)])
_DUP_TASK_LAG = pb.LagReport(task_lags=[apb.TaskLag(task=apb.TaskId(partition=1), lag=3), apb.TaskLag(task=apb.TaskId(partition=1), lag=4)])


@pytest.mark.parametrize(
    "request_, field",
    [
        pytest.param(_join(group_id=""), "group_id", id="empty-group-id"),
        pytest.param(_join(group_id="a\x01b"), "group_id", id="control-character-group-id"),
        # an audit's find: DEL, C1 controls (an 8-bit CSI), a bidi override and a line separator got in
        pytest.param(_join(group_id="a\x7fb"), "group_id", id="delete-group-id"),
        pytest.param(_join(group_id="a\x9b31mb"), "group_id", id="c1-csi-group-id"),
        pytest.param(_join(group_id="app\u202egnp.exe"), "group_id", id="bidi-override-group-id"),
        pytest.param(_tagged("zone", "eu\u20281"), "subscription.client_tags['zone']", id="line-separator-tag-value"),
        pytest.param(_join(session_timeout_ms=0), "session_timeout_ms", id="zero-session-timeout"),
        pytest.param(_join(rebalance_timeout_ms=-1), "rebalance_timeout_ms", id="negative-rebalance-timeout"),
        pytest.param(_without("subscription"), "subscription", id="no-subscription"),
        pytest.param(_join(subscription__version=0), "subscription.version", id="version-zero"),
        pytest.param(_join(subscription__latest_supported_version=1), "subscription.latest_supported_version", id="latest-below-version"),
        pytest.param(_join(subscription__process_id="not-a-uuid"), "subscription.process_id", id="process-id-not-uuid"),
        pytest.param(_join(subscription__num_threads=0), "subscription.num_threads", id="zero-threads"),
        pytest.param(_without("subscription.topology"), "subscription.topology", id="no-topology"),
        pytest.param(_join(subscription__topology=pb.Topology()), "subscription.topology.subtopologies", id="empty-topology"),
        pytest.param(_join(subscription__topology=topology(-1)), "subscription.topology.subtopologies[0].source_topics[0].partition_count", id="negative-partitions"),
        pytest.param(_join(subscription__endpoint=pb.HostInfo(host="h", port=70000)), "subscription.endpoint.port", id="bad-port"),
        # an outsider's find: a topic read by two subtopologies got in (each partition then went
        # to two members); Kafka Streams refuses it, and protocol.md said it was refused
        pytest.param(_join(subscription__topology=_two_subtopologies("orders", "totals")),
                     "subscription.topology.subtopologies[1].source_topics[0].name", id="topic-in-two-subtopologies"),
        pytest.param(_join(subscription__topology=_two_subtopologies("clicks", "counts")),
                     "subscription.topology.subtopologies[1].state_stores[0].name", id="store-in-two-subtopologies"),
        pytest.param(_join(subscription__topology=_racked("rack-a", "")), f"{_RACKS}[1]", id="empty-partition-rack"),
        pytest.param(_join(subscription__topology=_racked("r" * 256)), f"{_RACKS}[0]", id="partition-rack-too-long"),
        pytest.param(_join(subscription__topology=_racked("rack\x00a")), f"{_RACKS}[0]", id="control-character-partition-rack"),
        pytest.param(_tagged("zone", ""), "subscription.client_tags['zone']", id="empty-tag-value"),
        pytest.param(_tagged("zone", "z" * 256), "subscription.client_tags['zone']", id="tag-value-too-long"),
        pytest.param(_tagged("zone", "eu\n1"), "subscription.client_tags['zone']", id="control-character-tag-value"),
        pytest.param(_join(subscription__config=apb.AssignmentConfig(rack_aware_assignment_tags=["zone", "k" * 256])),
                     "subscription.config.rack_aware_assignment_tags[1]", id="tag-key-too-long"),
        pytest.param(_join(subscription__lags=_BAD_TASK_LAG), "subscription.lags.task_lags[0].lag", id="negative-lag"),
        pytest.param(_join(subscription__lags=_DUP_TASK_LAG), "subscription.lags.task_lags[1].task", id="duplicate-lag"),
        pytest.param(_join(subscription__lags=_TASKLESS_LAG), "subscription.lags.task_lags[0].task", id="lag-without-task"),
        pytest.param(_join(subscription__process_id=""), "subscription.process_id", id="empty-process-id"),
        pytest.param(_join(subscription__lags=pb.LagReport(age_ms=-1)), "subscription.lags.age_ms", id="negative-lag-age"),
        pytest.param(_join(subscription__config=apb.AssignmentConfig(max_warmup_replicas=0)), "subscription.config.max_warmup_replicas", id="config-below-minimum"),
        pytest.param(_join(subscription__config=apb.AssignmentConfig(probing_rebalance_interval_ms=5)), "subscription.config.probing_rebalance_interval_ms", id="probe-interval-below-minute"),
        pytest.param(_join(subscription__error_code=epb.ASSIGNOR_ERROR_VERSION_PROBING), "subscription.error_code", id="member-sends-version-probing"),
    ],
)
async def test_malformed_join_is_invalid_argument_naming_the_field_and_changes_nothing(leader, request_, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await leader.stub.JoinGroup(request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"{field}:"), caught.value.details()
    assert (await leader.stub.ListGroups(pb.ListGroupsRequest())).groups == []


@pytest.mark.parametrize(
    "method, request_, field",
    [
        pytest.param("SyncGroup", pb.SyncGroupRequest(group_id="app"), "member_id", id="sync-no-member"),
        pytest.param("Heartbeat", pb.HeartbeatRequest(member_id="m"), "group_id", id="heartbeat-no-group"),
        pytest.param("Heartbeat", pb.HeartbeatRequest(group_id="app", member_id="m", lags=_BAD_TASK_LAG), "lags.task_lags[0].lag", id="heartbeat-bad-lag"),
        pytest.param("Heartbeat", pb.HeartbeatRequest(group_id="app", member_id="m", lags=pb.LagReport(age_ms=-5)), "lags.age_ms", id="heartbeat-negative-lag-age"),
        pytest.param("Heartbeat", pb.HeartbeatRequest(group_id="app", member_id="m", lags=_TASKLESS_LAG), "lags.task_lags[0].task", id="heartbeat-lag-without-task"),
        pytest.param("Assign", pb.AssignRequest(problem=apb.AssignmentProblem(tasks=[apb.TaskSpec(stateful=True)])),
                     "problem.tasks[0].id", id="assign-task-without-id"),
        pytest.param("Assign", pb.AssignRequest(problem=apb.AssignmentProblem(
            tasks=[apb.TaskSpec(id=apb.TaskId(partition=0), stateful=True)],
            clients=[apb.ClientState(id="a", threads=1, lags=[apb.TaskLag(lag=1)])])),
            "problem.clients[0].lags[0].task", id="assign-lag-without-task"),
        pytest.param("LeaveGroup", pb.LeaveGroupRequest(group_id="app", member_id="m", group_instance_id=""), "group_instance_id", id="leave-empty-instance"),
        pytest.param("RouteQuery", pb.RouteQueryRequest(group_id="app", store="s", partition=-1), "partition", id="route-negative-partition"),
        pytest.param("Assign", pb.AssignRequest(problem=apb.AssignmentProblem(clients=[apb.ClientState(id="a", threads=0)])), "problem.clients[0].threads", id="assign-zero-threads"),
        pytest.param("Assign", pb.AssignRequest(problem=apb.AssignmentProblem(
            tasks=[apb.TaskSpec(id=apb.TaskId(partition=0), stateful=True)],
            clients=[apb.ClientState(id="a", threads=1, lags=[apb.TaskLag(task=apb.TaskId(partition=9), lag=1)])])),
            "problem.clients[0].lags.0_9", id="assign-unknown-task"),
    ],
)
async def test_malformed_calls_are_invalid_argument(leader, method, request_, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(leader.stub, method)(request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"{field}:"), caught.value.details()


@pytest.mark.parametrize("length", [256, 15_000, 1_000_000])
async def test_a_long_process_id_is_refused_without_being_echoed(leader, length):
    """An outsider's find: a process id that was no UUID came back whole in the error, so one of
    15,000 characters made the answer's metadata too large for the client (a transport error,
    not INVALID_ARGUMENT) and one of 10,000 a 10 KB message. Its length is checked first."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await leader.stub.JoinGroup(_join(subscription__process_id="p" * length))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "subscription.process_id: longer than 255 characters"


async def _warming_pair(running) -> tuple[Worker, Worker, pb.GroupDescription]:
    """a runs three tasks, b has joined with no state and warms up: (a, b, the description)."""
    config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1)
    a = running.worker(port=7001, config=config, task_lags={"0_0": LATEST, "0_1": LATEST, "0_2": LATEST})
    b = running.worker(port=7002, config=config)
    await rebalance(running.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    described = (await running.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group
    assert described.HasField("next_probe_ms")  # b is warming up
    return a, b, described


async def test_restart_keeps_generation_members_assignment_and_probe(tmp_path):
    state = tmp_path / "state"
    clock = FakeClock()
    async with running_server(state, clock=clock) as first:
        a, b, before = await _warming_pair(first)
        assignments = {a.member_id: sorted(a.active()), b.member_id: sorted(b.active())}
        warming = sum(len(m.warmup) for m in before.members)
    # A new server process on the same state directory, a little later.
    await clock.advance(2_000)
    async with running_server(state, clock=clock) as second:
        # the per-group gauges are there at once (an audit's find: only after the next rebalance)
        gauge = second.server.metrics.registry.get_sample_value
        assert gauge("remote_leader_group_members", {"group": "app"}) == 2
        assert gauge("remote_leader_group_generation", {"group": "app"}) == before.generation_id
        assert gauge("remote_leader_warmups_in_flight", {"group": "app"}) == warming
        for w in (a, b):
            w.stub = second.stub
            hb = await w.heartbeat()
            assert hb.error_code == epb.ERROR_CODE_NONE, hb
            assert hb.next_rebalance_ms == before.next_probe_ms
            assert (await w.sync()).error_code == epb.ERROR_CODE_NONE
            assert sorted(w.active()) == assignments[w.member_id]
        after = (await second.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group
        assert after.generation_id == before.generation_id
        assert after.state == pb.GROUP_STATE_STABLE
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert after.next_probe_ms == before.next_probe_ms and after.next_probe_reason == "probing_rebalance"
        # The restored probe still fires.
        responses = await run_for(clock, [a, b], before.next_probe_ms - clock.now_ms())
        assert responses[0].error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
        for w in (a, b):  # everyone gone: nothing restores any more (the gauge kept its last value)
            assert (await w.leave()).error_code == epb.ERROR_CODE_NONE
        assert gauge("remote_leader_group_members", {"group": "app"}) == 0
        assert gauge("remote_leader_warmups_in_flight", {"group": "app"}) == 0


async def test_restart_with_a_probe_time_stored_beyond_int64_answers(tmp_path):
    """A follow-up time that an earlier server stored past int64 (now + an interval near
    2^63 - 1 overflowed it) is read back as the largest the wire carries, so the group
    answers again after the restart (it failed every call with INTERNAL, restart or not)."""
    state = tmp_path / "state"
    clock = FakeClock()
    async with running_server(state, clock=clock) as first:
        a, _b, _ = await _warming_pair(first)
    beyond = 2**63 + 1_000
    with sqlite3.connect(state / "state.db") as db:
        (document,) = db.execute("SELECT snapshot FROM groups WHERE group_id = 'app'").fetchone()
        stored = json.loads(document)
        stored["next_probe_ms"] = beyond
        db.execute("UPDATE groups SET snapshot = ? WHERE group_id = 'app'", (json.dumps(stored),))
    async with running_server(state, clock=clock) as second:
        described = (await second.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group
        assert described.next_probe_ms == 2**63 - 1
        a.stub = second.stub
        hb = await a.heartbeat()
        assert hb.error_code == epb.ERROR_CODE_NONE and hb.next_rebalance_ms == 2**63 - 1


async def test_restart_mid_rebalance_lets_members_rejoin(tmp_path):
    state = tmp_path / "state"
    clock = FakeClock()
    async with running_server(state, clock=clock) as first:
        a, b = first.worker(), first.worker()
        await rebalance(clock, [a, b], advance_ms=INITIAL_DELAY_MS)
        assert (await b.leave()).error_code == epb.ERROR_CODE_NONE  # durable before the answer
    async with running_server(state, clock=clock) as second:
        a.stub = second.stub
        assert (await a.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
        await rebalance(clock, [a])
        assert sorted(a.active()) == ["0_0", "0_1", "0_2"]


async def test_a_restart_mid_sync_rebalances(tmp_path):
    """A helper's audit over a failover: b's join was answered, a synced, then the server went
    down before b synced. The group came back Stable (who had synced is not durable) and b,
    heartbeating but never syncing, kept its tasks, run by nobody, past its rebalance timeout
    for good. Restored mid-sync, the group rebalances: everyone rejoins."""
    state = tmp_path / "state"
    clock = FakeClock()
    async with running_server(state, clock=clock) as first:
        a, b = first.worker(port=7001), first.worker(port=7002)
        await joined(clock, [a, b], advance_ms=INITIAL_DELAY_MS)
        assert (await a.sync()).error_code == epb.ERROR_CODE_NONE
    async with running_server(state, clock=clock) as second:
        for w in (a, b):
            w.stub = second.stub
            assert (await w.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
        await rebalance(clock, [a, b])
        assert sorted(a.active() + b.active()) == ["0_0", "0_1", "0_2"]
        described = (await second.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group
        assert described.state == pb.GROUP_STATE_STABLE and described.last_rebalance_trigger == "restored_mid_sync"
    async with running_server(state, clock=clock) as third:  # every sync in: Stable was written
        for w in (a, b):
            w.stub = third.stub
            assert (await w.heartbeat()).error_code == epb.ERROR_CODE_NONE


async def test_a_snapshot_of_an_older_server_mid_sync_comes_back_stable(tmp_path):
    """Servers before the syncs were stored never wrote Stable: their CompletingRebalance is any
    settled group, which an upgrade must not rebalance."""
    state = tmp_path / "state"
    clock = FakeClock()
    async with running_server(state, clock=clock) as first:
        a, b = first.worker(), first.worker()
        await rebalance(clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    with sqlite3.connect(state / "state.db") as db:
        (document,) = db.execute("SELECT snapshot FROM groups WHERE group_id = 'app'").fetchone()
        stored = json.loads(document)
        assert stored["state"] == "Stable" and stored["unsynced"] == []
        stored["state"] = "CompletingRebalance"
        del stored["unsynced"]
        db.execute("UPDATE groups SET snapshot = ? WHERE group_id = 'app'", (json.dumps(stored),))
    async with running_server(state, clock=clock) as second:
        for w in (a, b):
            w.stub = second.stub
            assert (await w.heartbeat()).error_code == epb.ERROR_CODE_NONE


async def test_the_last_sync_does_not_fail_with_the_stable_write(tmp_path):
    """A review of the change above: the last member's sync answered INTERNAL when the Stable
    write failed (the worker library stops on INTERNAL), though nothing depends on it: lost, a
    restart rebalances. It still waits for it, so that Stable is durable once the syncs are
    answered (not waiting, a takeover right after the last sync rebalanced now and then)."""
    async with running_server(tmp_path / "state") as leader:
        a, b = leader.worker(port=7001), leader.worker(port=7002)
        await joined(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
        assert (await a.sync()).error_code == epb.ERROR_CODE_NONE
        store = leader.server.coordinator.store
        put = store._put

        async def locked(group_id, text):
            store._put = put
            raise sqlite3.OperationalError("database is locked")

        store._put = locked
        assert (await b.sync()).error_code == epb.ERROR_CODE_NONE
        await settle()
        assert store._put is put  # the write was tried, and failed
        assert leader.server.coordinator.groups["app"].state.value == "Stable"


async def test_a_static_replacement_owes_its_sync_across_a_restart(tmp_path):
    """The same audit: a static member restarting in a Stable group is answered at once and must
    sync within its rebalance timeout (test_membership); over a restart that deadline was lost
    and it kept its predecessor's tasks, never syncing, for good."""
    state = tmp_path / "state"
    clock = FakeClock()
    async with running_server(state, clock=clock) as first:
        a = first.worker(instance_id="worker-a", port=7001)
        b = first.worker(instance_id="worker-b", port=7002)
        await rebalance(clock, [a, b], advance_ms=INITIAL_DELAY_MS)
        restarted = first.worker(instance_id="worker-a", port=7001, process_id=a.process_id)
        assert (await restarted.join()).error_code == epb.ERROR_CODE_NONE
    async with running_server(state, clock=clock) as second:
        restarted.stub = b.stub = second.stub
        answers = []
        for _ in range(3):  # 1.5 rebalance timeouts from the restart, both heartbeating
            await clock.advance(5_000)
            answers += [(await restarted.heartbeat()).error_code, (await b.heartbeat()).error_code]
        assert answers[-2:] == [epb.ERROR_CODE_UNKNOWN_MEMBER_ID, epb.ERROR_CODE_REBALANCE_IN_PROGRESS]


async def test_drain_answers_parked_joins_and_refuses_new_calls(tmp_path):
    async with running_server(tmp_path / "state") as running:
        a = running.worker()
        parked = asyncio.create_task(a.join())
        await settle()
        await running.server.coordinator.drain()
        response = await parked
        assert response.error_code == epb.ERROR_CODE_COORDINATOR_NOT_AVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await running.stub.ListGroups(pb.ListGroupsRequest())
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_200_concurrent_members_get_one_consistent_assignment(tmp_path):
    async with running_server(tmp_path / "state") as running:
        workers = [running.worker(topo=topology(400), port=10_000 + i) for i in range(200)]
        await rebalance(running.clock, workers, advance_ms=INITIAL_DELAY_MS)
        assert len({w.generation for w in workers}) == 1
        actives = [t for w in workers for t in w.active()]
        assert sorted(actives) == sorted(f"0_{p}" for p in range(400))  # every task active exactly once
        assert all(len(w.active()) == 2 for w in workers)  # 400 tasks over 200 equal members
        maps = {tuple(h.SerializeToString(deterministic=True) for h in w.assignment.partitions_by_host) for w in workers}
        assert len(maps) == 1  # everyone sees the same cluster metadata
        by_host = {h.host.port: sorted(p.partition for p in h.partitions) for h in workers[0].assignment.partitions_by_host}
        for w in workers:
            assert by_host[w.port] == sorted(int(t.split("_")[1]) for t in w.active())


async def test_assign_rpc_solves_kip441_scale_out_statelessly(leader):
    scenario = json.loads((FIXTURES / "kip441_scale_out.json").read_text())["scenario"]
    problem = apb.AssignmentProblem(
        config=apb.AssignmentConfig(acceptable_recovery_lag=10_000, max_warmup_replicas=2, num_standby_replicas=1),
        tasks=[apb.TaskSpec(id=apb.TaskId(partition=p), stateful=True, changelog_offsets=1_000_000) for p in range(3)],
        clients=[
            apb.ClientState(
                id=c["id"], threads=c["threads"],
                prev_active=[apb.TaskId(partition=int(t[2:])) for t in c["prev_active"]],
                prev_standby=[apb.TaskId(partition=int(t[2:])) for t in c["prev_standby"]],
                lags=[apb.TaskLag(task=apb.TaskId(partition=int(t[2:])), lag=LATEST if v == "latest" else v) for t, v in c["lags"].items()],
            )
            for c in scenario["clients"]
        ],
    )
    response = await leader.stub.Assign(pb.AssignRequest(problem=problem))
    result = response.result
    clients = {c.client_id: c for c in result.clients}
    assert sorted(clients) == ["I1", "I2", "I3"]
    assert list(clients["I3"].active) == []  # the KIP: I3 gets no active task yet
    assert 1 <= len(clients["I3"].warmup) <= 2
    assert result.probing_rebalance_needed and result.followup_rebalance_ms == 600_000
    assert any(r.code == "warming_up" for r in result.reasons)
    assert (await leader.stub.ListGroups(pb.ListGroupsRequest())).groups == []  # stateless


async def test_route_query_prefers_the_live_active_then_caught_up_standbys(leader):
    config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=2)
    ids = [str(uuid.UUID(int=i)) for i in (1, 2, 3)]
    a = leader.worker(process_id=ids[0], port=7001, config=config, task_lags={"0_0": LATEST, "0_1": 0, "0_2": 0})
    b = leader.worker(process_id=ids[1], port=7002, config=config, task_lags={"0_1": LATEST, "0_0": 40, "0_2": 0})
    c = leader.worker(process_id=ids[2], port=7003, config=config, task_lags={"0_2": LATEST, "0_0": 400, "0_1": 0})
    await rebalance(leader.clock, [a, b, c], advance_ms=INITIAL_DELAY_MS)
    assert a.active() == ["0_0"]
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=0, max_lag=100))
    assert [(h.host.port, h.role) for h in route.hosts] == [(7001, apb.ROLE_ACTIVE)]
    await leader.clock.advance(500)
    await b.heartbeat({"0_1": LATEST, "0_0": 30, "0_2": 0})
    await a.leave()  # the active is gone; until the rebalance completes, standbys serve
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=0, max_lag=100))
    assert [(h.host.port, h.role, h.lag) for h in route.hosts] == [(7002, apb.ROLE_STANDBY, 30)]
    assert route.hosts[0].lag_age_ms == 0
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=0))
    assert [(h.host.port, h.lag) for h in route.hosts] == [(7002, 30), (7003, 400)]
    await leader.clock.advance(250)
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=0))
    # b reported 250 ms ago; c's lags date from its JoinGroup: initial delay + 500 + 250 ms.
    assert [h.lag_age_ms for h in route.hosts] == [250, INITIAL_DELAY_MS + 750]
    # a lag measured before it was sent (a sidecar re-sending its worker's last report) is as
    # old as the measurement, not as the heartbeat that carried it
    report = lags({"0_1": LATEST, "0_0": 30, "0_2": 0})
    report.age_ms = 4_000
    await b.stub.Heartbeat(pb.HeartbeatRequest(group_id="app", member_id=b.member_id, generation_id=b.generation, lags=report))
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=0))
    assert [(h.host.port, h.lag_age_ms) for h in route.hosts] == [(7002, 4_000), (7003, INITIAL_DELAY_MS + 750)]
    report.age_ms = 2**63 - 1  # older than the clock: dated its first millisecond, never 0 ("never reported")
    await b.stub.Heartbeat(pb.HeartbeatRequest(group_id="app", member_id=b.member_id, generation_id=b.generation, lags=report))
    described = await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))
    assert [m.lags_updated_ms for m in described.group.members if m.process_id == ids[1]] == [1]
    unknown = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="nope", partition=0))
    assert unknown.error_code == epb.ERROR_CODE_UNKNOWN_STATE_STORE
    missing = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="nope", store="counts", partition=0))
    assert missing.error_code == epb.ERROR_CODE_GROUP_ID_NOT_FOUND


async def test_route_query_skips_a_member_without_an_endpoint(leader):
    """A helper's audit: an active whose member gave no endpoint was answered as the host, with
    no host to query, and no standby offered. Such a member serves no queries (KIP-535)."""
    config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1)
    ids = [str(uuid.UUID(int=i)) for i in (1, 2)]
    silent = leader.worker(process_id=ids[0], config=config, task_lags={"0_0": LATEST, "0_1": 0, "0_2": LATEST})
    serving = leader.worker(process_id=ids[1], port=7002, config=config, task_lags={"0_1": LATEST, "0_0": 20, "0_2": 10})
    await rebalance(leader.clock, [silent, serving], advance_ms=INITIAL_DELAY_MS)
    assert "0_0" in silent.active() and "0_0" in serving.standby()
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="counts", partition=0))
    assert [(h.host.port, h.role, h.lag) for h in route.hosts] == [(7002, apb.ROLE_STANDBY, 20)]


async def test_health_and_reflection(leader):
    health = health_pb2_grpc.HealthStub(leader.channel)
    for service in ("", "remote_leader.v1.GroupLeader"):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(leader.channel)
    responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = set()
    async for response in responses:
        names |= {s.name for s in response.list_services_response.service}
        break
    assert "remote_leader.v1.GroupLeader" in names


async def test_describe_of_an_unknown_group_says_so_in_a_line_beside_its_json(leader):
    """A new user's find: ``describe`` of a group that does not exist printed only the JSON error
    document (for scripts) and exited 1; people get the reason on stderr too."""
    import subprocess
    import sys

    server = f"127.0.0.1:{leader.server.port}"
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "remote_leader.cli", "describe", "nosuch", "--server", server],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error_code"] == "ERROR_CODE_GROUP_ID_NOT_FOUND"
    assert proc.stderr.strip() == f"remote-leader: {server}: ERROR_CODE_GROUP_ID_NOT_FOUND: group 'nosuch' not found"


async def test_the_cli_skips_a_replica_that_does_not_answer(leader, capsys):
    """An audit's find: ``groups`` / ``describe --server a,b`` failed outright when one listed
    replica was down, exactly when an operator looks. The dead one is skipped with a line on
    stderr; the command fails only when no replica answers. Zero values are printed: task 0_0,
    a lag of 0, an Empty group's 0 members."""
    from server.cli import _print_message, _query

    a = leader.worker(port=7001, task_lags={"0_0": 0})
    await rebalance(leader.clock, [a], advance_ms=INITIAL_DELAY_MS)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    live = f"127.0.0.1:{leader.server.port}"
    for servers in (f"{dead},{live}", f"{live},{dead}"):
        listed = await _query(servers, "ListGroups", pb.ListGroupsRequest())
        assert [g.group_id for g in listed.groups] == ["app"]
        described = await _query(servers, "DescribeGroup", pb.DescribeGroupRequest(group_id="app"))
        assert described.error_code == epb.ERROR_CODE_NONE and len(described.group.members) == 1
    assert capsys.readouterr().err.count(f"{dead}: UNAVAILABLE: skipped") == 3  # live first: describe needs no other
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _query(dead, "ListGroups", pb.ListGroupsRequest())
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "skipped" not in capsys.readouterr().err  # one address: its failure is the command's error
    _print_message(described)
    printed = json.loads(capsys.readouterr().out)
    member = printed["group"]["members"][0]
    assert {"subtopology": 0, "partition": 0} in member["active"]  # was {}: both zeros dropped
    assert {"task": {"subtopology": 0, "partition": 0}, "lag": "0"} in member["lags"]  # was no "lag" key
