"""The server remembers who ran what: members that report no lags keep their tasks.

KIP-441's subscription always carries the previous active and standby tasks; a member that
reports no lags (cannot read its checkpoints, stateless, not our library) gets the group's last
assignment as its previous tasks, so a rebalance moves only what balance needs.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from types import MappingProxyType

import assignor
from assignor.cluster import AssignorError
from assignor.model import (
    LATEST,
    UNKNOWN,
    AssignmentConfig,
    AssignmentResult,
    ClientAssignment,
    ClientState,
    StateStore,
    TaskId,
    TaskSpec,
)
from assignor.topology import SourceTopic, Subtopology, Topology
from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from server.effects import ComputeAssignment
from server.group import Group, GroupSettings, GroupState
from server.memory import with_remembered_tasks
from server.model import JoinGroupRequest, LeaveGroupRequest, Subscription, SyncGroupRequest
from server.store import snapshot_document, snapshot_from_document
from server.timers import FakeClock
from tests.server.harness import LATEST as REPORTED_LATEST
from tests.server.harness import rebalance, running_server, settle

INITIAL_DELAY_MS = 3_000


def _topology() -> pb.Topology:
    """60 tasks: two stateful subtopologies and a stateless one, 20 partitions each."""
    subtopologies = [
        pb.Subtopology(id=sub, source_topics=[pb.SourceTopic(name=f"topic{sub}", partition_count=20)],
                       state_stores=[pb.StateStore(name=f"store{sub}", logged=True)] if sub < 2 else [])
        for sub in range(3)
    ]
    return pb.Topology(subtopologies=subtopologies)


def _actives(workers) -> dict[str, str]:
    return {task: w.process_id for w in workers for task in w.active()}


def _standbys(workers) -> set[tuple[str, str]]:
    return {(task, w.process_id) for w in workers for task in w.standby()}


async def _formed_group(leader, size: int = 20):
    """A group whose history is not what a fresh assignment would give: worker i ran the
    stateful tasks 0_(i+5) and 1_(i+11) and reported them; from now on nobody reports lags."""
    config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1)
    workers = [leader.worker(process_id=f"00000000-0000-0000-0000-{i:012d}", topo=_topology(), config=config,
                             task_lags={f"0_{(i + 5) % size}": REPORTED_LATEST, f"1_{(i + 11) % size}": REPORTED_LATEST})
               for i in range(size)]
    await rebalance(leader.clock, workers, advance_ms=INITIAL_DELAY_MS)
    assert sorted(len(w.active()) for w in workers) == [3] * size
    for i, w in enumerate(workers):
        assert {f"0_{(i + 5) % size}", f"1_{(i + 11) % size}"} <= set(w.active())
        w.task_lags = {}
    return workers


async def _everyone_rejoins(leader, workers) -> None:
    """A rebalance of the whole group; nobody reports a lag (``task_lags`` stays empty)."""
    first = asyncio.create_task(workers[0].join())
    for _ in range(1000):  # until the rejoin reached the server (it may take a while under load)
        await settle(1)
        if (await workers[1].heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS:
            break
    for w in workers[1:]:
        assert (await w.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    others = [asyncio.create_task(w.join()) for w in workers[1:]]
    responses = await asyncio.wait_for(asyncio.gather(first, *others), 30)
    assert all(r.error_code == epb.ERROR_CODE_NONE for r in responses)
    syncs = await asyncio.gather(*(w.sync() for w in workers))
    assert all(s.error_code == epb.ERROR_CODE_NONE for s in syncs)


async def test_a_rebalance_without_lag_reports_moves_nothing(leader):
    """The issue's example: 20 members, 60 tasks; before, only 7 of 60 actives stayed."""
    workers = await _formed_group(leader)
    before_actives, before_standbys = _actives(workers), _standbys(workers)
    await _everyone_rejoins(leader, workers)
    assert _actives(workers) == before_actives
    assert _standbys(workers) == before_standbys
    assert all(not w.assignment.HasField("next_rebalance_ms") for w in workers)


async def test_a_member_leaving_moves_only_its_own_tasks(leader):
    workers = await _formed_group(leader)
    before = _actives(workers)
    gone = workers.pop(7)
    assert (await gone.leave()).error_code == epb.ERROR_CODE_NONE
    for w in workers:
        assert (await w.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, workers)
    after = _actives(workers)
    moved = sorted(task for task, owner in after.items() if before[task] != owner)
    assert moved == sorted(gone.active())
    # the leaver's stateful tasks go to the members holding its standbys (state of unknown size
    # beats none, KIP-441 property 1); nobody else gives up anything it ran
    assert all(set(w.active()) >= {t for t, owner in before.items() if owner == w.process_id} for w in workers)


# ---- a generation without an assignment forgets nothing ------------------------------------


async def _the_assignor_fails(leader, workers) -> None:
    """Everyone rejoins and the assignor fails (its worker process died twice, say): every
    member gets ASSIGNMENT_ERROR and no tasks."""
    coordinator = leader.server.coordinator
    solve = coordinator.assign

    async def failing(problem):
        raise RuntimeError("the assignor's worker process died")

    coordinator.assign = failing
    try:
        await _everyone_rejoins(leader, workers)
    finally:
        coordinator.assign = solve
    for w in workers:
        assert w.assignment.error_code == epb.ASSIGNOR_ERROR_ASSIGNMENT_ERROR and not w.active() and not w.standby()


async def test_a_generation_the_assignor_failed_does_not_forget_who_ran_what(leader):
    """A helper's find: the memory was the current generation's assignment, which a failed
    assignor leaves empty, so the next rebalance had no previous owner for anyone who reports no
    lags: 20 of 60 actives stayed. The memory is the last assignment computed; the failed
    generation's own answer stays empty (no stale KIP-535 routes: its members were given no
    tasks)."""
    workers = await _formed_group(leader)
    before_actives, before_standbys = _actives(workers), _standbys(workers)
    await _the_assignor_fails(leader, workers)
    route = await leader.stub.RouteQuery(pb.RouteQueryRequest(group_id="app", store="store0", partition=0))
    assert route.error_code == epb.ERROR_CODE_UNKNOWN_PARTITION
    assert route.error_message.endswith("now: the group is rebalancing (or its assignor failed); retry")
    described = (await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))).group
    assert described.assignment_error == epb.ASSIGNOR_ERROR_ASSIGNMENT_ERROR
    assert not any(m.active or m.standby or m.warmup for m in described.members)
    await _everyone_rejoins(leader, workers)
    assert _actives(workers) == before_actives
    assert _standbys(workers) == before_standbys


async def test_the_memory_outlives_a_failed_generation_across_a_restart(tmp_path):
    """The same over a restart (or a failover): the snapshot of the failed generation holds the
    memory beside its empty assignment."""
    state, clock = tmp_path / "state", FakeClock()
    async with running_server(state, clock=clock) as first:
        workers = await _formed_group(first)
        before_actives, before_standbys = _actives(workers), _standbys(workers)
        await _the_assignor_fails(first, workers)
    async with running_server(state, clock=clock) as second:
        for w in workers:
            w.stub = second.stub
        await _everyone_rejoins(second, workers)
        assert _actives(workers) == before_actives
        assert _standbys(workers) == before_standbys
    with sqlite3.connect(state / "state.db") as db:  # a computed assignment is the memory: stored once
        (document,) = db.execute("SELECT snapshot FROM groups WHERE group_id = 'app'").fetchone()
    assert json.loads(document)["result"] and "last_assignment" not in json.loads(document)


TOPOLOGY = Topology((Subtopology(0, (SourceTopic("in", 4),), (StateStore("counts", logged=True),)),))


def _join(member_id: str = "", error: AssignorError = AssignorError.NONE) -> JoinGroupRequest:
    subscription = Subscription(2, 2, "process-m1", TOPOLOGY, AssignmentConfig(), error_code=error)
    return JoinGroupRequest("app", member_id, None, 30_000, 30_000, subscription, new_member_id="m1")


def _compute(effects) -> ComputeAssignment:
    (compute,) = [e for e in effects if isinstance(e, ComputeAssignment)]
    return compute


def test_a_requested_shutdown_keeps_the_memory_in_the_snapshot_and_an_empty_group_forgets():
    """SHUTDOWN_REQUESTED ends a generation without the assignor, as incomplete metadata does:
    the next problem is still built from the last computed assignment, from a restored snapshot
    too (written beside the empty result; one of an older server, without it, remembers
    nothing). A group gone Empty forgets: nobody runs anything, and the next member may bring
    another application."""
    group = Group("app", GroupSettings(initial_rebalance_delay_ms=0))
    problem = _compute(group.join(_join(), 1, 0).effects).inputs.build()
    computed = assignor.solve(problem)
    group.assignment_computed(1, problem, computed, "", 1.0, 10)
    group.sync(SyncGroupRequest("app", "m1", None, 1), 20)
    group.join(_join("m1", AssignorError.SHUTDOWN_REQUESTED), 2, 30)
    assert (group.generation, group.assignment_error, group.result) == (2, AssignorError.SHUTDOWN_REQUESTED, None)
    document = json.loads(json.dumps(snapshot_document(group.snapshot())))
    assert document["result"] is None and document["last_assignment"]["clients"]["process-m1"]["active"]
    for saved, remembered in ((document, computed.clients), ({k: v for k, v in document.items() if k != "last_assignment"}, None)):
        restored = Group.from_snapshot(snapshot_from_document(saved), GroupSettings(initial_rebalance_delay_ms=0))
        assert restored.state is GroupState.COMPLETING_REBALANCE and restored.result is None
        restored.restored(40)
        last = _compute(restored.join(_join("m1"), 3, 50).effects).inputs.last
        assert (last.clients if last else None) == remembered
    group.sync(SyncGroupRequest("app", "m1", None, 2), 40)
    group.leave(LeaveGroupRequest("app", "m1", None), 50)
    assert group.state is GroupState.EMPTY
    assert _compute(group.join(_join(), 3, 60).effects).inputs.last is None


# ---- which source wins (docs/protocol.md, "Previous tasks") -----------------------------------

T0, T1, S0 = TaskId(0, 0), TaskId(0, 1), TaskId(1, 0)
TASKS = (TaskSpec(T0, True, 1_000_000), TaskSpec(T1, True, 1_000_000), TaskSpec(S0, False))
LAST = AssignmentResult(
    clients={"a": ClientAssignment(active=(T0, S0), standby=(T1,)), "b": ClientAssignment(active=(T1,), standby=(T0,))},
    probing_rebalance_needed=False, followup_rebalance_ms=None,
)


def test_a_silent_member_gets_its_last_tasks_with_state_of_unknown_size():
    a, b = with_remembered_tasks([ClientState("a"), ClientState("b")], TASKS, LAST)
    assert a.prev_active == {T0, S0} and a.prev_standby == {T1}
    assert dict(a.lags) == {T0: UNKNOWN, T1: UNKNOWN}
    assert b.prev_active == {T1} and b.prev_standby == {T0}


def test_a_reporting_member_is_believed_about_its_stateful_tasks_and_keeps_its_stateless_ones():
    reported = ClientState("a", prev_active=frozenset({T1}), lags=MappingProxyType({T1: LATEST}))
    a, b = with_remembered_tasks([reported, ClientState("b")], TASKS, LAST)
    assert a.prev_active == {T1, S0} and dict(a.lags) == {T1: LATEST}  # T0 is not on its disk any more
    # b ran T1 as active, but a's running claim wins; b keeps state of unknown size for it
    assert b.prev_active == frozenset() and b.prev_standby == {T0, T1}
    assert dict(b.lags) == {T0: UNKNOWN, T1: UNKNOWN}


def test_without_a_last_assignment_the_reports_are_all_there_is():
    clients = (ClientState("a"), ClientState("b"))
    assert with_remembered_tasks(clients, TASKS, None) == clients
