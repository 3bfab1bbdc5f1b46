"""End to end over a real server: session expiry, LeaveGroup, fencing, static membership,
version probing, disagreeing members and topology changes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from tests.server.harness import SESSION_MS, joined, rebalance, run_for, settle, topology

INITIAL_DELAY_MS = 3_000


async def _pair(leader, **kwargs):
    a, b = leader.worker(port=7001, **kwargs), leader.worker(port=7002, **kwargs)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    return a, b


async def _describe(leader, group_id="app") -> pb.GroupDescription:
    return (await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group_id))).group


async def test_session_expiry_drops_the_silent_member_and_rebalances(leader):
    a, b = await _pair(leader)
    # Only a heartbeats: b's session (10 s) runs out.
    responses = await run_for(leader.clock, [a], SESSION_MS + 1)
    assert responses[0].error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_UNKNOWN_MEMBER_ID
    await rebalance(leader.clock, [a])
    assert sorted(a.active()) == ["0_0", "0_1", "0_2"]
    group = await _describe(leader)
    assert [m.member_id for m in group.members] == [a.member_id]
    assert group.last_rebalance_trigger == "session_expired"


async def test_leave_group_rebalances_the_rest(leader):
    a, b = await _pair(leader)
    assert (await b.leave()).error_code == epb.ERROR_CODE_NONE
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_UNKNOWN_MEMBER_ID
    await rebalance(leader.clock, [a])
    assert sorted(a.active()) == ["0_0", "0_1", "0_2"]
    assert (await _describe(leader)).last_rebalance_trigger == "member_left"


async def test_last_member_leaving_empties_the_group(leader):
    a, b = await _pair(leader)
    await b.leave()
    await a.leave()
    group = await _describe(leader)
    assert group.state == pb.GROUP_STATE_EMPTY and not group.members


@pytest.mark.parametrize(
    "call, field, value, expected",
    [
        pytest.param("heartbeat", "generation", -5, epb.ERROR_CODE_ILLEGAL_GENERATION, id="heartbeat-stale-generation"),
        pytest.param("sync", "generation", -5, epb.ERROR_CODE_ILLEGAL_GENERATION, id="sync-stale-generation"),
        pytest.param("heartbeat", "member_id", "member-nobody", epb.ERROR_CODE_UNKNOWN_MEMBER_ID, id="heartbeat-unknown-member"),
        pytest.param("sync", "member_id", "member-nobody", epb.ERROR_CODE_UNKNOWN_MEMBER_ID, id="sync-unknown-member"),
        pytest.param("leave", "member_id", "member-nobody", epb.ERROR_CODE_UNKNOWN_MEMBER_ID, id="leave-unknown-member"),
        pytest.param("heartbeat", "group_id", "other-app", epb.ERROR_CODE_UNKNOWN_MEMBER_ID, id="heartbeat-unknown-group"),
    ],
)
async def test_fencing_by_generation_and_member_id(leader, call, field, value, expected):
    a, b = await _pair(leader)
    before = await _describe(leader)
    setattr(a, field, value)
    response = await getattr(a, call)()
    assert response.error_code == expected
    after = await _describe(leader)
    assert after.generation_id == before.generation_id and len(after.members) == 2
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_NONE


async def test_a_member_that_never_syncs_is_dropped_at_the_rebalance_timeout(leader):
    """Kafka's pending-sync timeout (a protocol audit's find): b's join was answered but b never
    synced, only heartbeat; the group stayed in CompletingRebalance for good and b's share was
    run by nobody. At the rebalance timeout b is dropped and the group rebalances."""
    a, b = leader.worker(port=7001), leader.worker(port=7002)
    await joined(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    assert (await a.sync()).error_code == epb.ERROR_CODE_NONE
    answers = []
    for _ in range(3):  # 1.5 rebalance timeouts, both heartbeating
        await leader.clock.advance(SESSION_MS // 2)
        answers += [(await a.heartbeat()).error_code, (await b.heartbeat()).error_code]
    assert answers[-1] == epb.ERROR_CODE_UNKNOWN_MEMBER_ID and answers[-2] == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, [a])
    assert sorted(a.active()) == ["0_0", "0_1", "0_2"]
    assert (await _describe(leader)).state == pb.GROUP_STATE_STABLE


async def test_a_static_replacement_that_never_syncs_is_dropped_at_its_rebalance_timeout(leader):
    """An audit of today's changes: a static restart answered at once in a Stable group, that
    heartbeat but never synced, held its predecessor's tasks, run by nobody, for good. It must
    sync within its rebalance timeout, as the members of a completing rebalance."""
    a = leader.worker(instance_id="worker-a", port=7001)
    b = leader.worker(instance_id="worker-b", port=7002)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    restarted = leader.worker(instance_id="worker-a", port=7001, process_id=a.process_id)
    assert (await restarted.join()).error_code == epb.ERROR_CODE_NONE  # no rebalance: its old place
    answers = []
    for _ in range(3):  # 1.5 rebalance timeouts, both heartbeating, the restarted one never syncing
        await leader.clock.advance(SESSION_MS // 2)
        answers += [(await restarted.heartbeat()).error_code, (await b.heartbeat()).error_code]
    assert answers[-2:] == [epb.ERROR_CODE_UNKNOWN_MEMBER_ID, epb.ERROR_CODE_REBALANCE_IN_PROGRESS]
    await rebalance(leader.clock, [b])
    assert sorted(b.active()) == ["0_0", "0_1", "0_2"]


async def test_static_member_restart_takes_its_old_place_without_rebalance(leader):
    a = leader.worker(instance_id="worker-a", port=7001)
    b = leader.worker(instance_id="worker-b", port=7002)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    generation, tasks = a.generation, sorted(a.active())
    # worker-a restarts within its session timeout: same instance id and endpoint, no member id
    # (a new endpoint rebalances: tests/server/test_kafka_protocol_situations.py).
    restarted = leader.worker(instance_id="worker-a", port=7001, process_id=a.process_id)
    response = await restarted.join()
    assert response.error_code == epb.ERROR_CODE_NONE
    assert response.generation_id == generation and response.member_id != a.member_id
    assert (await restarted.sync()).error_code == epb.ERROR_CODE_NONE
    assert sorted(restarted.active()) == tasks
    # No rebalance for the others; the zombie is fenced.
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_NONE
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    group = await _describe(leader)
    assert group.generation_id == generation
    assert sorted(m.member_id for m in group.members) == sorted([restarted.member_id, b.member_id])
    hosts = {h.process_id: h.host.port for h in restarted.assignment.partitions_by_host}
    assert hosts == {a.process_id: 7001, b.process_id: 7002}


async def test_lags_of_tasks_outside_the_topology_are_not_kept(leader):
    """An attack on the DescribeGroup answer: members reporting 50,000 lags each of tasks no
    topology forms made answers of 90 MB, stored and snapshot with the group. The assignor ignores
    them; the group keeps only lags of its topology's tasks (three partitions of subtopology 0)."""
    a = leader.worker(task_lags={"0_0": 5, "0_2": 7, "0_3": 9, "7_0": 11})
    await rebalance(leader.clock, [a], advance_ms=INITIAL_DELAY_MS)
    (member,) = (await _describe(leader)).members
    assert {(lag.task.subtopology, lag.task.partition): lag.lag for lag in member.lags} == {(0, 0): 5, (0, 2): 7}


async def test_a_static_member_may_leave_its_optional_instance_id_out_after_joining(leader):
    """``group_instance_id`` is optional on every call: a static member that names it only when
    it joins is checked by its member id, as Kafka's coordinator does, not fenced by itself; a
    zombie of a static restart is fenced all the same (its member id was replaced). An instance id
    that no member holds answers UNKNOWN_MEMBER_ID, saying so, not "another member holds it"."""
    a = leader.worker(instance_id="worker-a")
    b = leader.worker()
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    a.instance_id = None
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_NONE
    assert (await a.sync()).error_code == epb.ERROR_CODE_NONE
    b.instance_id = "worker-ghost"
    unheld = await b.heartbeat()
    assert unheld.error_code == epb.ERROR_CODE_UNKNOWN_MEMBER_ID
    assert "'worker-ghost' is not held by member" in unheld.error_message
    b.instance_id = None
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_NONE
    restarted = leader.worker(instance_id="worker-a", process_id=a.process_id)
    assert (await restarted.join()).error_code == epb.ERROR_CODE_NONE
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    assert (await a.leave()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    group = await _describe(leader)
    assert sorted(m.member_id for m in group.members) == sorted([restarted.member_id, b.member_id])


async def test_static_restart_while_the_assignor_computes_waits_for_that_generation(leader):
    """A protocol audit's find: a static member restarting while the assignor computed the next
    generation was answered at once, with that generation's number and the previous
    generation's tasks, and its sync made the group Stable; the others' joins were never
    answered while it lived, and the assignment computed was dropped as stale. It waits with
    them now; meanwhile a heartbeat hears REBALANCE_IN_PROGRESS (it held ILLEGAL_GENERATION for
    the generation it had). The assignor is held back (an event) to make "computing" exact."""
    a = leader.worker(instance_id="worker-a", port=7001)
    b = leader.worker(instance_id="worker-b", port=7002)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    release = threading.Event()
    runner = leader.server.coordinator.assign
    solve = runner._assign
    runner._assign = lambda problem: (release.wait(30), solve(problem))[1]
    try:
        c = leader.worker(port=7003)
        joins = [asyncio.create_task(w.join()) for w in (c, a, b)]
        await settle()
        assert (await _describe(leader)).state == pb.GROUP_STATE_COMPLETING_REBALANCE  # computing
        restarted = leader.worker(instance_id="worker-a", port=7001, process_id=a.process_id)
        restart = asyncio.create_task(restarted.join())
        await settle()
        assert not restart.done() and not any(j.done() for j in joins[::2])
        assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS  # at the generation it holds
    finally:
        release.set()
    answers = await asyncio.gather(restart, joins[0], joins[2])
    assert {r.error_code for r in answers} == {epb.ERROR_CODE_NONE}
    assert len({r.generation_id for r in answers}) == 1
    assert (await joins[1]).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID  # the predecessor's parked join
    for w in (restarted, b, c):
        assert (await w.sync()).error_code == epb.ERROR_CODE_NONE
    group = await _describe(leader)
    assert group.state == pb.GROUP_STATE_STABLE and group.generation_id == answers[0].generation_id
    actives = sorted(t for w in (restarted, b, c) for t in w.active())
    assert actives == ["0_0", "0_1", "0_2"]


async def test_a_static_member_named_by_its_instance_id_alone_can_be_removed(leader):
    """KIP-345's admin removal (Kafka's removeMembersFromConsumerGroup): LeaveGroup with the
    instance id and no member id removes that static member, and the group rebalances; an
    instance id nobody holds is an unknown member (a protocol audit's find: refused as an
    empty member id)."""
    a = leader.worker(instance_id="worker-a", port=7001)
    b = leader.worker(instance_id="worker-b", port=7002)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    nobody = await leader.stub.LeaveGroup(pb.LeaveGroupRequest(group_id="app", group_instance_id="worker-z"))
    assert nobody.error_code == epb.ERROR_CODE_UNKNOWN_MEMBER_ID
    left = await leader.stub.LeaveGroup(pb.LeaveGroupRequest(group_id="app", group_instance_id="worker-a"))
    assert left.error_code == epb.ERROR_CODE_NONE
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_UNKNOWN_MEMBER_ID
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, [b])
    assert sorted(b.active()) == ["0_0", "0_1", "0_2"]


async def test_static_member_with_a_new_process_id_keeps_its_tasks(leader):
    a = leader.worker(instance_id="worker-a")
    b = leader.worker(instance_id="worker-b")
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    tasks = sorted(a.active())
    restarted = leader.worker(instance_id="worker-a")  # a fresh process id
    assert (await restarted.join()).generation_id == a.generation
    await restarted.sync()
    assert sorted(restarted.active()) == tasks


def _actives_by_member(group: pb.GroupDescription) -> dict[str, list[str]]:
    return {m.member_id: sorted(f"{t.subtopology}_{t.partition}" for t in m.active) for m in group.members}


async def test_rejoin_claiming_another_members_process_id_supersedes_it(leader):
    """One process id, one client: a member that rejoins as another live member's process
    supersedes it, so no task ends up active on two workers. The superseded member is fenced,
    not told to rejoin: alive, its rejoin would supersede the other in turn, for good."""
    a, b = await _pair(leader)
    b.process_id = a.process_id
    await rebalance(leader.clock, [b])
    fenced = await a.heartbeat()
    assert fenced.error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    assert fenced.error_message.startswith(f"fenced: a newer member joined with process_id {a.process_id!r}")
    assert (await a.leave()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID
    assert sorted(b.active()) == ["0_0", "0_1", "0_2"]
    group = await _describe(leader)
    assert _actives_by_member(group) == {b.member_id: ["0_0", "0_1", "0_2"]}


async def test_static_restart_claiming_another_members_process_id_rebalances(leader):
    """A static restart may take its predecessor's place without a rebalance, but not another
    live member's process id: that member is superseded and the group rebalances, so every
    task keeps exactly one active."""
    a = leader.worker(instance_id="worker-a")
    b = leader.worker(instance_id="worker-b")
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    generation = a.generation
    restarted = leader.worker(instance_id="worker-a", process_id=b.process_id)
    await rebalance(leader.clock, [restarted])
    assert restarted.generation > generation
    assert sorted(restarted.active()) == ["0_0", "0_1", "0_2"]
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID  # its process id taken
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_FENCED_INSTANCE_ID  # its instance id taken
    group = await _describe(leader)
    assert _actives_by_member(group) == {restarted.member_id: ["0_0", "0_1", "0_2"]}


async def test_version_probing_runs_the_group_at_the_lowest_version(leader):
    config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1)
    new = leader.worker(version=2, latest_supported_version=2, port=7001, config=config)
    old = leader.worker(version=1, latest_supported_version=1, port=7002, config=config)
    await rebalance(leader.clock, [new, old], advance_ms=INITIAL_DELAY_MS)
    for w in (new, old):
        assert w.assignment.version == 1 and w.assignment.commonly_supported_version == 1
        assert len(w.assignment.standby_partitions_by_host) == 0  # a version-2 field
        assert not any(t.warmup for t in w.assignment.standby_tasks)
    assert new.assignment.error_code == epb.ASSIGNOR_ERROR_VERSION_PROBING
    assert old.assignment.error_code == epb.ASSIGNOR_ERROR_NONE
    # The old member is upgraded (rolling bounce): it now supports 2 but still speaks 1.
    old.latest_supported_version = 2
    assert (await new.heartbeat()).error_code == epb.ERROR_CODE_NONE
    joining = asyncio.create_task(old.join())
    await settle()
    assert (await new.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    new.version = 1  # it was told to speak the group's version
    response = await new.join()
    assert response.commonly_supported_version == 2
    await joining
    await new.sync()
    await old.sync()
    # Everyone supports 2: assignments now come at version 2 with standby hosts.
    for w in (new, old):
        assert w.assignment.version == 2 and w.assignment.error_code == epb.ASSIGNOR_ERROR_NONE
        assert len(w.assignment.standby_partitions_by_host) == 2


@pytest.mark.parametrize(
    "change, message",
    [
        pytest.param(dict(topo=topology(3, stores=(("other-store", True),))), "topology", id="different-stores"),
        pytest.param(dict(topo=topology(3, topic="clicks")), "source topics", id="different-source-topic"),
        pytest.param(dict(config=apb.AssignmentConfig(acceptable_recovery_lag=5, num_standby_replicas=0)),
                     "config.acceptable_recovery_lag", id="different-config"),
    ],
)
async def test_disagreeing_newcomer_is_refused_and_nothing_changes(leader, change, message):
    a, b = await _pair(leader)
    before = await _describe(leader)
    newcomer = leader.worker(**change)
    response = await newcomer.join()
    assert response.error_code == epb.ERROR_CODE_INCONSISTENT_GROUP_PROTOCOL
    assert message in response.error_message
    after = await _describe(leader)
    assert after.generation_id == before.generation_id and after.state == pb.GROUP_STATE_STABLE
    assert len(after.members) == 2
    assert (await a.heartbeat()).error_code == epb.ERROR_CODE_NONE


async def test_more_partitions_trigger_a_topology_rebalance(leader):
    a, b = await _pair(leader)
    a.topo = topology(6)
    joining = asyncio.create_task(a.join())
    await settle()
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, [b])
    await joining
    await a.sync()
    assert sorted(a.active() + b.active()) == [f"0_{p}" for p in range(6)]
    assert (await _describe(leader)).last_rebalance_trigger == "topology_changed"


async def test_shutdown_request_reaches_every_member(leader):
    a, b = await _pair(leader)
    joining = asyncio.ensure_future(a.stub.JoinGroup(_with_shutdown(a)))
    await settle()
    assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, [b])
    a.generation = (await joining).generation_id
    await a.sync()
    for w in (a, b):
        assert w.assignment.error_code == epb.ASSIGNOR_ERROR_SHUTDOWN_REQUESTED
        assert not w.assignment.active_tasks


def _with_shutdown(worker) -> pb.JoinGroupRequest:
    request = worker.join_request()
    request.subscription.error_code = epb.ASSIGNOR_ERROR_SHUTDOWN_REQUESTED
    return request


async def test_unknown_partition_count_gives_incomplete_metadata(leader):
    a = leader.worker(topo=topology(0))
    await rebalance(leader.clock, [a], advance_ms=INITIAL_DELAY_MS)
    assert a.assignment.error_code == epb.ASSIGNOR_ERROR_INCOMPLETE_SOURCE_TOPIC_METADATA


async def test_session_timeout_outside_bounds_is_refused(leader):
    a = leader.worker()
    request = a.join_request()
    request.session_timeout_ms = 10
    response = await leader.stub.JoinGroup(request)
    assert response.error_code == epb.ERROR_CODE_INVALID_SESSION_TIMEOUT
    groups = await leader.stub.ListGroups(pb.ListGroupsRequest())
    assert all(g.member_count == 0 for g in groups.groups)


def _racked_topology(racks_of) -> pb.Topology:
    """Six partitions of one stateless subtopology, each partition's replica racks as given."""
    topo = topology(6, stores=())
    for partition in range(6):
        topo.subtopologies[0].source_topics[0].partition_racks.add(partition=partition, racks=racks_of(partition))
    return topo


async def _joined_in_order(leader, group_id: str, workers) -> None:
    """One rebalance that ``workers`` join in this order (each join reaches the server before
    the next is sent), then all sync."""
    joins = []
    for count, worker in enumerate(workers, start=1):
        worker.group_id = group_id
        joins.append(asyncio.create_task(worker.join()))
        for _ in range(500):
            if len((await _describe(leader, group_id)).members) == count:
                break
            await asyncio.sleep(0.01)
    await leader.clock.advance(INITIAL_DELAY_MS)
    assert all(r.error_code == epb.ERROR_CODE_NONE for r in await asyncio.gather(*joins))
    assert all(s.error_code == epb.ERROR_CODE_NONE for s in await asyncio.gather(*(w.sync() for w in workers)))


async def test_members_reporting_different_partition_racks_get_one_assignment_whatever_the_join_order(leader):
    """Determinism: two members whose metadata disagree on where partitions' replicas live (one
    saw a reassignment the other did not) join in either order: the group's racks are every
    rack either names per partition, and so the same, as are the rack-aware actives. (The last
    report's racks won: A then B and B then A gave different actives.)"""
    config = apb.AssignmentConfig(rack_aware_strategy=apb.RACK_AWARE_STRATEGY_MIN_TRAFFIC)
    ids = ["00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"]

    def pair():
        a = leader.worker(process_id=ids[0], rack="rA", config=config,
                          topo=_racked_topology(lambda p: ["rA"] if p < 3 else ["rB"]))
        b = leader.worker(process_id=ids[1], rack="rB", config=config,
                          topo=_racked_topology(lambda p: ["rA"] if p % 2 else ["rB"]))
        return a, b

    a1, b1 = pair()
    await _joined_in_order(leader, "a-then-b", [a1, b1])
    a2, b2 = pair()
    await _joined_in_order(leader, "b-then-a", [b2, a2])
    racks = []
    for group_id in ("a-then-b", "b-then-a"):
        topic = (await _describe(leader, group_id)).topology.subtopologies[0].source_topics[0]
        racks.append({pr.partition: sorted(pr.racks) for pr in topic.partition_racks})
    assert racks[0] == racks[1] == {0: ["rA", "rB"], 1: ["rA"], 2: ["rA", "rB"], 3: ["rA", "rB"], 4: ["rB"], 5: ["rA", "rB"]}
    assert (sorted(a1.active()), sorted(b1.active())) == (sorted(a2.active()), sorted(b2.active()))
    # rack-local where a partition lives in one rack only: 1 on rA, 4 on rB
    assert "0_1" in a1.active() and "0_4" in b1.active()
