"""The asyncio member end to end against a real server on loopback (no mocked stubs)."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from assignor.model import LATEST, HostInfo, InvalidInput, Role, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.lags import CheckpointLagSource, StaticLagSource
from client.member import GroupMember, MemberError, RoutingError, route_query
from client.sidecar import SidecarLagSource
from client.state import StateCleaner, StateCleanupLock, StateDirectory
from remote_leader.v1.group_leader_pb2_grpc import GroupLeaderStub
from tests.client.conftest import HEARTBEAT_MS, SESSION_MS, close_all, member_config, start_leader, topology

ALL = frozenset(topology(6).task_ids())


async def join(leader, group: str, count: int, lags=None, **overrides) -> list[GroupMember]:
    members = [GroupMember(leader.address, member_config(group, i, **overrides), StaticLagSource((lags or {}).get(i)))
               for i in range(count)]
    for member in members:
        await member.start()
    return members


async def converged(members: list[GroupMember], after: int = -1, timeout: float = 10.0) -> int:
    """Wait until every member holds the same generation's assignment (newer than ``after``) and stays there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        generations = {m.assignment.generation for m in members}
        if len(generations) == 1 and all(m.state.value == "stable" for m in members) and min(generations) > after:
            await asyncio.sleep(0.3)
            if {m.assignment.generation for m in members} == generations and all(m.state.value == "stable" for m in members):
                return generations.pop()
        await asyncio.sleep(0.02)
    raise TimeoutError([(m.state, m.assignment.generation) for m in members])


async def test_members_receive_disjoint_complete_assignments(leader):
    members = await join(leader, "g", 3)
    try:
        await converged(members)
        actives = [set(m.assignment.active) for m in members]
        assert set().union(*actives) == ALL
        assert sum(len(a) for a in actives) == len(ALL)  # disjoint
        for m in members:
            assert not set(m.assignment.active) & set(m.assignment.standby)  # KIP-441 constraint
        assert sorted(t for m in members for t in m.assignment.standby) == sorted(ALL)  # one standby each
        # KIP-535: every member sees the same host maps, with every active where it runs
        hosts = {m.config.endpoint: frozenset(m.assignment.active) for m in members}
        for m in members:
            assert m.assignment.cluster.active_by_host() == hosts
    finally:
        await close_all(members)


async def test_a_member_applying_longer_than_its_session_keeps_it(leader):
    """An audit's find: heartbeats began only once the assignment callback returned, so a
    worker that took longer than the session to open its stores (KIP-441's onPartitionsAssigned)
    lost the session every generation and rebalanced the group for good. Heartbeats go on while
    it applies, as Kafka's heartbeat thread does; the cleanup lock stays held until it is done."""
    applied = []

    async def opening_stores(change):
        applied.append(change.current.generation)
        await asyncio.sleep(3 * SESSION_MS / 1000)

    member = GroupMember(leader.address, member_config("slow", 0), StaticLagSource(), on_assignment=opening_stores)
    await member.start()
    try:
        await member.wait_for_assignment(timeout=10)  # STABLE: only once applied
        assert member.lock.holder is None
        await asyncio.sleep(2 * SESSION_MS / 1000)
        assert applied == [member.generation] and member.state.value == "stable" and member.error is None
    finally:
        await member.close()


async def test_a_rebalance_that_starts_while_a_member_applies_is_joined_once_it_is_applied(leader):
    """An audit's find: once a heartbeat said a rebalance had begun, the member stopped
    heartbeating until its callback returned, and the leader expired it (the newcomer got every
    task while the member still ran them, and one more rebalance followed). It keeps its session
    with heartbeats and rejoins once applied, within the rebalance timeout: one rebalance."""
    started = asyncio.Event()

    async def opening_stores(change):
        if change.current.generation == 1:
            started.set()
            await asyncio.sleep(3 * SESSION_MS / 1000)

    slow = GroupMember(leader.address, member_config("late", 0, rebalance_timeout_ms=10 * SESSION_MS),
                       StaticLagSource(), on_assignment=opening_stores)
    await slow.start()
    newcomer = None
    try:
        await asyncio.wait_for(started.wait(), 10)
        newcomer = GroupMember(leader.address, member_config("late", 1, rebalance_timeout_ms=10 * SESSION_MS),
                               StaticLagSource())
        await newcomer.start()
        generation = await converged([slow, newcomer], timeout=20)
        assert generation == 2 and slow.error is None and newcomer.error is None
        assert set(slow.assignment.active) | set(newcomer.assignment.active) == ALL
    finally:
        await close_all([m for m in (slow, newcomer) if m is not None])


async def test_a_member_waiting_for_a_cleaner_s_lock_to_rejoin_keeps_its_session(leader):
    """An earlier session's find: a member that had to rejoin waited for the cleanup lock (KIP-441:
    it reads its lags under it) without heartbeating, so a cleaner holding the lock past the
    session timeout got the member expired: it rejoined as a new member, one more rebalance,
    its tasks moved meanwhile. It heartbeats while it waits and keeps its member id."""
    generations = []
    timeouts = dict(rebalance_timeout_ms=10 * SESSION_MS)
    first = GroupMember(leader.address, member_config("held", 0, **timeouts), StaticLagSource(),
                        on_assignment=lambda change: generations.append(change.current.generation))
    await first.start()
    newcomer = None
    try:
        await first.wait_for_assignment(timeout=10)
        member_id = first.member_id
        async with first.lock.hold(StateCleaner.HOLDER):
            newcomer = GroupMember(leader.address, member_config("held", 1, **timeouts), StaticLagSource())
            await newcomer.start()
            await asyncio.sleep(3 * SESSION_MS / 1000)
            group = await leader.describe("held")
            assert member_id in {m.member_id for m in group.members}  # not expired
            assert first.assignment.generation == 1 and generations == [1]  # still waiting to rejoin
        generation = await converged([first, newcomer], timeout=20)
        assert generation == 2 and generations == [1, 2]  # one rebalance, joined with its place
        assert first.member_id == member_id and first.error is None and newcomer.error is None
        assert set(first.assignment.active) | set(newcomer.assignment.active) == ALL
        assert not set(first.assignment.active) & set(newcomer.assignment.active)
        for member in (first, newcomer):  # each task active on one, its standby on the other
            assert set(member.assignment.active) | set(member.assignment.standby) == ALL
    finally:
        await close_all([m for m in (first, newcomer) if m is not None])


async def test_close_is_bounded_when_the_callback_swallows_its_cancellation(leader):
    """A callback that catches CancelledError made close() wait for it forever. close() gives it
    a grace, then leaves it running and releases the cleanup lock: a later member sharing the
    lock joins, and the callback, when it does return, changes nothing of either."""
    applying, swallowed, finish = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def stubborn(change):
        applying.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.set()
        await finish.wait()

    lock = StateCleanupLock()
    member = GroupMember(leader.address, member_config("stubborn", 0), StaticLagSource(), lock=lock,
                         on_assignment=stubborn)
    later = closing = None
    try:
        await member.start()
        await asyncio.wait_for(applying.wait(), 10)
        # not wait_for: on its timeout it cancels close() and waits for that, which hung too
        closing = asyncio.create_task(member.close())
        done, _ = await asyncio.wait({closing}, timeout=10)  # the grace, 5 s, then LeaveGroup
        assert done, "close() waits for a callback that swallowed its cancellation"
        assert swallowed.is_set() and member.state.value == "closed" and not lock.locked()
        later = GroupMember(leader.address, member_config("stubborn", 1), StaticLagSource(), lock=lock)
        await later.start()
        await later.wait_for_assignment(timeout=10)
        async with lock.hold(StateCleaner.HOLDER):
            finish.set()
            await asyncio.sleep(0.1)  # the abandoned callback returns
            assert lock.holder == StateCleaner.HOLDER and member.state.value == "closed"
    finally:
        finish.set()
        if closing is not None and not closing.done():  # still waiting: the callback's cancellation is owed
            closing.cancel()
            await asyncio.gather(closing, return_exceptions=True)
        await close_all([m for m in (member, later) if m is not None])


def _cleaning_callback(applying: asyncio.Event, cleaned: asyncio.Event, clean_s: float = 1.0):
    """A cooperative callback: on cancellation it closes its stores for ``clean_s``, then stops."""
    async def callback(change):
        if change.current.generation < 1:
            return
        applying.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(clean_s)
            cleaned.set()
            raise
    return callback


async def test_close_after_a_fatal_error_gives_the_callback_its_grace_under_the_lock(leader):
    """An audit's find: a member fenced while its callback ran, then closed at once (what the
    sidecar does when the member stops), released the state-cleanup lock at once while the
    callback still closed its stores: a cleaner could delete them under it."""
    applying, cleaned = asyncio.Event(), asyncio.Event()
    lock = StateCleanupLock()
    member = GroupMember(leader.address, member_config("g", 0, group_instance_id="i1"), StaticLagSource(), lock=lock,
                         on_assignment=_cleaning_callback(applying, cleaned))
    fencing = GroupMember(leader.address, member_config("g", 1, group_instance_id="i1"), StaticLagSource())
    try:
        await member.start()
        await asyncio.wait_for(applying.wait(), 15)
        await fencing.start()
        with pytest.raises(MemberError, match="FENCED_INSTANCE_ID"):
            await member.wait_for_assignment(lambda a: False, timeout=15)
        await member.close()
        assert cleaned.is_set() and not lock.locked()
    finally:
        await close_all([member, fencing])


async def test_a_second_or_cancelled_close_neither_frees_the_lock_early_nor_leaks_it(leader):
    """Audits' finds: a second close() during the first's grace released the lock while the
    callback still cleaned up (and the first then failed on the channel the second had closed);
    a close() cancelled during the grace left the lock held and the member in the group."""
    applying, cleaned = asyncio.Event(), asyncio.Event()
    lock = StateCleanupLock()
    member = GroupMember(leader.address, member_config("g", 0), StaticLagSource(), lock=lock,
                         on_assignment=_cleaning_callback(applying, cleaned))
    later = None
    try:
        await member.start()
        await asyncio.wait_for(applying.wait(), 15)
        first = asyncio.create_task(member.close())
        await asyncio.sleep(0.1)
        await member.close()
        assert cleaned.is_set() and not lock.locked()
        await first  # neither raises

        applying, cleaned = asyncio.Event(), asyncio.Event()
        lock = StateCleanupLock()
        member = GroupMember(leader.address, member_config("g", 2), StaticLagSource(), lock=lock,
                             on_assignment=_cleaning_callback(applying, cleaned, clean_s=2.0))
        await member.start()
        await asyncio.wait_for(applying.wait(), 15)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(member.close(), 0.5)  # the caller gives up; the close goes on
        deadline = time.monotonic() + 10
        while member.state.value != "closed" or lock.locked():
            assert time.monotonic() < deadline, (member.state, lock.holder)
            await asyncio.sleep(0.05)
        assert cleaned.is_set()
        later = GroupMember(leader.address, member_config("g", 3), StaticLagSource(), lock=lock)
        await later.start()
        await later.wait_for_assignment(timeout=10)
    finally:
        await close_all([m for m in (member, later) if m is not None])


async def test_two_live_workers_given_one_process_id_end_with_one_fenced_not_a_rebalance_storm(leader):
    """A worker audit's find: the second worker's join superseded the first, which rejoined and
    superseded the second, and so on: 90 generations a second, for good, a third member
    rebalanced with them. The superseded one is fenced now, and stops with an error that names
    the process id; the other keeps the client's tasks."""
    first = GroupMember(leader.address, member_config("dup", 0), StaticLagSource())
    await first.start()
    await first.wait_for_assignment(timeout=10)
    second = GroupMember(leader.address, member_config("dup", 0, endpoint=HostInfo("127.0.0.1", 7100)), StaticLagSource())
    await second.start()
    try:
        await second.wait_for_assignment(timeout=10)
        await asyncio.sleep(3 * SESSION_MS / 1000)
        assert first.state.value == "closed" and isinstance(first.error, MemberError)
        assert first.error.code == "ERROR_CODE_FENCED_INSTANCE_ID" and first.config.process_id in first.error.message
        assert second.state.value == "stable" and set(second.assignment.active) == ALL
        assert second.assignment.generation <= first.assignment.generation + 2
    finally:
        await close_all([first, second])


async def test_a_member_killed_without_leaving_hands_its_tasks_to_caught_up_standbys(leader):
    members = await join(leader, "g", 3)
    try:
        await converged(members)
        # every replica is caught up: actives run (LATEST), standbys report lag 0
        for m in members:
            m.lag_source.update({**{t: LATEST for t in m.assignment.active}, **{t: 0 for t in m.assignment.standby}})
        victim, survivors = members[0], members[1:]
        standby_of = {t: m for m in survivors for t in m.assignment.standby}
        orphaned = set(victim.assignment.active)
        before = victim.assignment.generation
        await asyncio.sleep(0.3)  # a heartbeat or two carry the lags
        killed_at = time.monotonic()
        await victim.close(leave=False)  # dies: no LeaveGroup
        await converged(survivors, after=before)
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 * 0.9  # only the session timeout told the leader
        assert survivors[0].assignment.generation > before
        for task in orphaned:
            assert task in standby_of[task].assignment.active, f"{task} should go to its caught-up standby"
        assert set().union(*(set(m.assignment.active) for m in survivors)) == ALL
    finally:
        await close_all(members)


async def test_query_routing_answers_the_active_then_the_standby_once_the_active_is_gone(leader):
    members = await join(leader, "g", 2, partitions=2)
    try:
        await converged(members)
        owner = next(m for m in members if TaskId(0, 0) in m.assignment.active)
        standby = next(m for m in members if TaskId(0, 0) in m.assignment.standby)
        standby.lag_source.update({TaskId(0, 0): 42, **{t: LATEST for t in standby.assignment.active}})
        await asyncio.sleep(0.3)
        routed = await standby.route_query("counts", partition=0)
        assert [(h.host, h.role) for h in routed.hosts] == [(owner.config.endpoint, Role.ACTIVE)]
        # the same through the key: KIP-535 queryMetadataForKey agrees with the leader's answer
        key = next(k for k in (f"k{i}" for i in range(100)) if standby.query_metadata_for_key("counts", k).partition == 0)
        assert standby.query_metadata_for_key("counts", key).active_host == owner.config.endpoint
        assert (await standby.route_query("counts", key=key)).hosts[0].host == owner.config.endpoint

        # hold the survivor's cleanup lock: it cannot rejoin, so the group keeps the last
        # assignment while the dead active's session expires (deterministic window)
        await standby.lock.acquire("test")
        await owner.close(leave=False)
        deadline = time.monotonic() + 5
        while True:
            routed = await standby.route_query("counts", partition=0)
            if routed.hosts and routed.hosts[0].role != Role.ACTIVE:
                break
            assert time.monotonic() < deadline, routed
            await asyncio.sleep(0.05)
        host = routed.hosts[0]
        assert (host.host, host.role, host.lag) == (standby.config.endpoint, Role.STANDBY, 42)
        assert 0 <= host.lag_age_ms < 5_000
        assert (await standby.route_query("counts", partition=0, max_lag=41)).hosts == ()
        standby.lock.release("test")
        await standby.wait_for_assignment(lambda a: TaskId(0, 0) in a.active, timeout=10)
        routed = await standby.route_query("counts", partition=0)
        assert [(h.host, h.role) for h in routed.hosts] == [(standby.config.endpoint, Role.ACTIVE)]
    finally:
        await close_all(members)


async def test_a_member_behind_a_topic_s_growth_partitions_keys_as_the_group_does(leader):
    """A helper's audit: a member configured with 4 partitions of a topic the group knows as 6
    (the group keeps the largest, docs/protocol.md) computed keys' partitions over 4 and refused
    partitions 4 and 5, so it routed queries to other hosts than its peers. The assignment
    carries the group's partition counts, and queries read those."""
    narrow = GroupMember(leader.address, member_config("g", 0, partitions=4), StaticLagSource())
    wide = GroupMember(leader.address, member_config("g", 1, partitions=6), StaticLagSource())
    members = [narrow, wide]
    for member in members:
        await member.start()
    try:
        await converged(members)
        assert narrow.metadata.topology.subtopology(0).partition_count == 6
        assert narrow.config.topology.subtopology(0).partition_count == 4  # its subscription is its own
        keys = [f"k{i}" for i in range(40)]
        assert [narrow.query_metadata_for_key("counts", k).partition for k in keys] == \
            [wide.query_metadata_for_key("counts", k).partition for k in keys]
        assert any(narrow.query_metadata_for_key("counts", k).partition >= 4 for k in keys)
        routed = [(h.host, h.role) for h in (await narrow.route_query("counts", partition=5)).hosts]
        assert routed and routed == [(h.host, h.role) for h in (await wide.route_query("counts", partition=5)).hosts]
    finally:
        await close_all(members)


async def test_a_restarted_leader_hears_the_last_report_again(tmp_path):
    """Heartbeats carry the worker's lags every time, so a leader that restarted (or a new
    owner after a failover), whose snapshot predates the last report, hears it at once: a
    change that sent lags only after a new report was reverted when a regression rerun found
    the early probe never fired after a failover (the new owner never learned the warm-ups
    had caught up)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = tmp_path / "leader"
    server = await start_leader(state, listen=f"127.0.0.1:{port}")
    # a session longer than gRPC's reconnect backoff (about 1 s): heard by a heartbeat, not a
    # rejoin after the session lapsed (which carries the lags too, and let the test pass or
    # fail by the reconnect's timing)
    member = GroupMember(f"127.0.0.1:{port}", member_config("g", 0, partitions=2, session_timeout_ms=5_000),
                         StaticLagSource())
    await member.start()
    try:
        await converged([member])
        member.lag_source.update({task: LATEST for task in member.assignment.active})  # after the last snapshot
        await asyncio.sleep(5 * HEARTBEAT_MS / 1000)
        await server.stop(grace_s=0.5)
        server = await start_leader(state, listen=f"127.0.0.1:{port}")
        restarted = server.coordinator.clock.now_ms()

        def heard() -> bool:
            (view,) = server.coordinator.describe("g").members
            return view.lags_updated_ms >= restarted and view.lags.get(TaskId(0, 0)) == LATEST

        deadline = time.monotonic() + 10
        while not heard() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert heard()
    finally:
        await member.close()
        await server.stop(grace_s=0.5)


async def test_route_query_errors_name_the_problem(leader):
    members = await join(leader, "g", 1, partitions=2)
    try:
        await converged(members)
        stub = GroupLeaderStub(members[0]._channel)  # a router that is not a member
        with pytest.raises(RoutingError, match="UNKNOWN_PARTITION"):
            # the group's topology has 2 partitions; ask as a router that believes in 8
            await route_query(stub, "g", topology(8), "counts", partition=5)
        with pytest.raises(RoutingError, match="GROUP_ID_NOT_FOUND"):
            await route_query(stub, "nope", topology(2), "counts", partition=0)
        # beyond the router's own topology: named at once, as query metadata names it (a worker
        # audit's find: the two answered a partition out of range differently)
        for ask in (lambda: route_query(stub, "g", topology(2), "counts", partition=5),
                    lambda: members[0].metadata.query_metadata_for_partition("counts", 5)):
            with pytest.raises(InvalidInput) as refused:
                result = ask()
                if asyncio.iscoroutine(result):
                    await result
            assert refused.value.field == "partition"
    finally:
        await close_all(members)


class ReportingLags(CheckpointLagSource):
    """The default lag source, announcing each time the member computes the lags it reports."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reported = asyncio.Event()

    def task_lags(self):
        lags = super().task_lags()
        self.reported.set()
        return lags


async def test_cleanup_race_cannot_delete_state_reported_and_then_received(leader, tmp_path):
    """KIP-441 "Race between assignment and state cleanup", end to end. The member has old,
    unassigned state for 0_1 and reports its lag in JoinGroup; the cleaner wakes up while the
    rebalance is under way; the leader gives 0_1 to the member (the only one with state). The
    cleaner must run only after the assignment is applied, and keep 0_1."""
    topo = topology(2)
    state = StateDirectory(tmp_path / "worker")
    state.write_checkpoint(TaskId(0, 1), {("app-counts-changelog", 1): 990})
    state.create(TaskId(9, 0))  # state of a task no topology has: the cleaner's to delete
    old = time.time() - 3600
    for task in (TaskId(0, 1), TaskId(9, 0)):
        os.utime(state.task_dir(task), (old, old))
    lags = ReportingLags(topo, state, {("app-counts-changelog", 0): 1000, ("app-counts-changelog", 1): 1000})
    applied_before_cleaning: list[frozenset[TaskId]] = []
    member = GroupMember(leader.address, member_config("g", 0, partitions=2, standbys=0), lags,
                         on_assignment=lambda change: applied_before_cleaning.append(change.current.all_tasks()))
    cleaner = StateCleaner(state, member.lock, member.assigned_tasks, state_cleanup_delay_ms=60_000)
    try:
        await member.start()
        await lags.reported.wait()  # the member has computed (and is sending) 0_1's lag of 10
        cleaning = asyncio.create_task(cleaner.clean_once())
        for _ in range(10):
            await asyncio.sleep(0)
        assert not cleaning.done()  # blocked by the member's lock, mid-rebalance
        assignment = await member.wait_for_assignment(timeout=10)
        result = await cleaning
        assert TaskId(0, 1) in assignment.all_tasks()
        assert applied_before_cleaning and TaskId(0, 1) in applied_before_cleaning[0]
        assert result.deleted == (TaskId(9, 0),)
        assert TaskId(0, 1) in result.kept_assigned
        assert state.read_checkpoint(TaskId(0, 1)) == {("app-counts-changelog", 1): 990}
    finally:
        await member.close()


async def test_heartbeats_carry_fresh_lags_of_restoring_tasks(leader):
    members = await join(leader, "g", 2, partitions=2)
    try:
        await converged(members)
        m = members[0]
        standby_task = m.assignment.standby[0]
        for lag in (5_000, 1_234):
            m.lag_source.update({standby_task: lag, **{t: LATEST for t in m.assignment.active}})
            deadline = time.monotonic() + 3
            while True:
                group = await leader.describe("g")
                me = next(d for d in group.members if d.process_id == m.config.process_id)
                reported = {TaskId(e.task.subtopology, e.task.partition): e.lag for e in me.lags}
                if reported.get(standby_task) == lag:
                    break
                assert time.monotonic() < deadline, reported
                await asyncio.sleep(0.05)
    finally:
        await close_all(members)


async def test_a_worker_silent_behind_its_sidecar_shows_lags_as_old_as_its_last_report(leader):
    """The sidecar re-sends its worker's last report with every heartbeat (so that a new owner
    of the group hears it at once): the leader must date those lags from the report, not from
    the heartbeat, or a worker that died behind a live sidecar is offered to KIP-535 callers
    with lags that look a heartbeat old (an audit's find)."""
    source = SidecarLagSource(topology(2))
    member = GroupMember(leader.address, member_config("g", 0, partitions=2), source)
    await member.start()
    try:
        await converged([member])
        source.update({task: LATEST for task in member.assignment.active}, {}, {}, frozenset())
        silent_s = 10 * HEARTBEAT_MS / 1000
        await asyncio.sleep(silent_s)  # ten heartbeats, no new report
        (host,) = (await member.route_query("counts", partition=0)).hosts
        assert host.role == Role.ACTIVE and host.lag_age_ms >= silent_s * 1000 * 0.9
        source.update({task: LATEST for task in member.assignment.active}, {}, {}, frozenset())
        deadline = time.monotonic() + 3
        while (await member.route_query("counts", partition=0)).hosts[0].lag_age_ms >= 5 * HEARTBEAT_MS:
            assert time.monotonic() < deadline, "the new report's age never reached the leader"
            await asyncio.sleep(0.02)
    finally:
        await member.close()


async def test_a_lag_source_whose_age_fails_still_reports_its_lags(leader):
    """An audit's find: an age the source could not tell (NaN here; a raise alike) threw the
    valid lags away with it, and the member reported no state at all."""
    class NoAge(StaticLagSource):
        def lags_age_ms(self):
            return float("nan")

    member = GroupMember(leader.address, member_config("g", 0, partitions=2), NoAge({TaskId(0, 1): 7}))
    await member.start()
    try:
        await converged([member])
        (view,) = (await leader.describe("g")).members
        assert {TaskId(e.task.subtopology, e.task.partition): e.lag for e in view.lags}.get(TaskId(0, 1)) == 7
    finally:
        await member.close()


async def test_stale_task_directories_outside_the_topology_do_not_get_the_join_refused(tmp_path):
    """An audit's find: a worker's lags for tasks its topology does not have (stale task
    directories of an older topology) counted against the leader's --max-tasks-per-group and
    got its JoinGroup refused: the member stopped. The leader ignores such tasks; the member
    no longer sends them."""
    server = await start_leader(tmp_path / "leader", max_tasks_per_group=8)
    stale = {TaskId(s, p): 0 for s, p in [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (0, 9), (3, 1)]}
    member = GroupMember(f"127.0.0.1:{server.port}", member_config("g", 0, partitions=4), StaticLagSource(stale))
    await member.start()
    try:
        await member.wait_for_assignment(timeout=10)
        assert member.error is None and len(member.assignment.active) == 4
        (view,) = server.coordinator.describe("g").members
        assert sorted(view.lags) == [TaskId(0, 0), TaskId(0, 1)]
    finally:
        await member.close()
        await server.stop(grace_s=0.5)


async def test_a_lag_source_failing_for_a_while_keeps_its_last_lags_at_the_leader_growing_older(leader):
    """An audit's find: while the source failed, every heartbeat sent an empty report measured
    "now": the leader forgot the member's state at once, and a rebalance in that window took
    its actives away. The last good measurement goes on instead, its age growing; a value that
    is no lag (a plain int beyond an int64) is a failure alike, not a crash."""
    class Flaky(StaticLagSource):
        broken: object = None

        def task_lags(self):
            if self.broken is not None:
                if isinstance(self.broken, Exception):
                    raise self.broken
                return {TaskId(0, 0): self.broken}
            return super().task_lags()

    source = Flaky({TaskId(0, 1): 5})
    member = GroupMember(leader.address, member_config("g", 0, partitions=2), source)
    await member.start()
    try:
        await converged([member])
        source.update({TaskId(0, 0): LATEST, TaskId(0, 1): LATEST})
        await asyncio.sleep(3 * HEARTBEAT_MS / 1000)
        for broken in (OSError("disk gone"), 2**64):
            source.broken = broken
            await asyncio.sleep(8 * HEARTBEAT_MS / 1000)
            (view,) = (await leader.describe("g")).members
            assert {TaskId(e.task.subtopology, e.task.partition): e.lag for e in view.lags} == {TaskId(0, 0): -1, TaskId(0, 1): -1}
            assert member.state.value == "stable" and member.error is None
            (host,) = (await member.route_query("counts", partition=0)).hosts
            assert host.lag_age_ms >= 6 * HEARTBEAT_MS  # the last good measurement, growing older
            source.broken = None
            await asyncio.sleep(3 * HEARTBEAT_MS / 1000)
        (host,) = (await member.route_query("counts", partition=0)).hosts
        assert host.lag_age_ms < 5 * HEARTBEAT_MS  # measured again: fresh
    finally:
        await member.close()


async def test_static_member_that_will_come_back_keeps_its_place(leader):
    members = await join(leader, "g", 2, partitions=2)
    static = GroupMember(leader.address, member_config("g", 5, partitions=2, group_instance_id="worker-5"),
                         StaticLagSource())
    try:
        await static.start()
        generation = await converged([*members, static])
        tasks = static.assignment.all_tasks()
        await static.close(will_come_back=True)  # no LeaveGroup
        again = GroupMember(leader.address, member_config("g", 5, partitions=2, group_instance_id="worker-5"),
                            StaticLagSource())
        await again.start()
        assignment = await again.wait_for_assignment(timeout=5)
        assert (assignment.generation, assignment.all_tasks()) == (generation, tasks)  # no rebalance
        await asyncio.sleep(0.3)
        assert {m.assignment.generation for m in members} == {generation}
        await again.close()  # a real leave: the others rebalance at once
        left_at = time.monotonic()
        await converged(members, after=generation)
        assert members[0].assignment.generation > generation
        assert time.monotonic() - left_at < SESSION_MS / 1000 + 0.5
    finally:
        await close_all(members)


async def test_a_newcomer_with_another_topology_is_refused_with_a_clear_error(leader):
    members = await join(leader, "g", 1, partitions=2)
    other = Topology.of("app", (Subtopology.of(0, ("orders",), 2, (StateStore("other-store"),)),))
    stranger = GroupMember(leader.address, member_config("g", 3, topology=other), StaticLagSource())
    try:
        await converged(members)
        await stranger.start()
        with pytest.raises(MemberError) as error:
            await stranger.wait_for_assignment(timeout=5)
        assert error.value.code == "ERROR_CODE_INCONSISTENT_GROUP_PROTOCOL"
    finally:
        await stranger.close()
        await close_all(members)


async def test_member_rides_through_a_server_restart(tmp_path):
    """Transient UNAVAILABLE: the retry policy and the member's backoff carry it across a restart
    on the same port and state; it keeps (or rejoins to) a complete assignment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = await start_leader(tmp_path / "leader", listen=f"127.0.0.1:{port}")
    members = [GroupMember(f"127.0.0.1:{port}", member_config("g", i, partitions=2), StaticLagSource()) for i in range(2)]
    try:
        for m in members:
            await m.start()
        await converged(members)
        await server.stop(grace_s=0.2)
        await asyncio.sleep(0.5)  # heartbeats fail meanwhile
        server = await start_leader(tmp_path / "leader", listen=f"127.0.0.1:{port}")
        await asyncio.sleep(1.0)
        await converged(members)
        assert all(m.error is None for m in members)
        assert set().union(*(set(m.assignment.active) for m in members)) == frozenset(topology(2).task_ids())
    finally:
        await close_all(members)
        await server.stop(grace_s=0.2)


def test_member_config_names_bad_fields():
    from assignor.model import InvalidInput

    with pytest.raises(InvalidInput, match="process_id"):
        member_config("g", 0, process_id="worker-1")
    with pytest.raises(InvalidInput, match="heartbeat_interval_ms"):
        member_config("g", 0, heartbeat_interval_ms=SESSION_MS)
    with pytest.raises(InvalidInput, match="group_id"):
        member_config("", 0)
    with pytest.raises(InvalidInput, match="endpoint"):
        member_config("g", 0, endpoint=HostInfo.parse("nohost"))
    # a worker audit's find: accepted, then the member stopped with a traceback naming nothing
    for field, value in [("endpoint", "h:1"), ("endpoint", HostInfo("h", "70")), ("endpoint", HostInfo("h", 0)),
                         ("topology", None), ("rack", 3), ("client_tags", {"zone": 1}), ("assignment_config", {})]:
        with pytest.raises(InvalidInput) as refused:
            member_config("g", 0, **{field: value})
        assert refused.value.field == field


async def test_a_member_waits_for_an_assignment_slower_than_its_join_deadline_used_to_be(leader):
    """A large group's assignment takes seconds after the join barrier: a member that gave its
    JoinGroup only the rebalance timeout and 5 s (6 s here) retried, and the retry, a rejoin,
    started the rebalance over, for good while every run was as slow (a 50,000-task group never
    formed). The first run here takes 7 s; the member waits for it: one generation."""
    solve = leader.server.coordinator.assign
    runs = []

    async def slow_first(problem):
        runs.append(problem)
        if len(runs) == 1:
            await asyncio.sleep(7)
        return await solve(problem)

    leader.server.coordinator.assign = slow_first
    (member,) = await join(leader, "slow", 1)
    try:
        assert await converged([member], timeout=20) == 1
        assert len(runs) == 1
    finally:
        leader.server.coordinator.assign = solve
        await close_all([member])
