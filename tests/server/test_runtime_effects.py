"""The runtime carries out the state machine's effects (server.runtime, server.effects): the
assignor runs holding no lock and its result comes back as an event of its own; a restored
group's timers come from the state machine; a Persist carries the group's state as its handler
left it."""

from __future__ import annotations

import asyncio
import json
import threading

import assignor
import server.store
from assignor.model import AssignmentConfig, StateStore, TaskId
from assignor.topology import SourceTopic, Subtopology, Topology
from server.effects import ComputeAssignment, Persist, ScheduleTimer, TimerKind
from server.group import Group, GroupSettings, GroupState, Member
from server.model import (
    ErrorCode,
    GroupSnapshot,
    HeartbeatRequest,
    JoinGroupRequest,
    LagReport,
    LeaveGroupRequest,
    Subscription,
)
from server.runtime import Coordinator
from server.store import GroupStore, snapshot_document
from server.timers import FakeClock

TOPOLOGY = Topology((Subtopology(0, (SourceTopic("in", 4),), (StateStore("counts", logged=True),)),))


def _join(member: str, member_id: str = "") -> JoinGroupRequest:
    subscription = Subscription(2, 2, f"process-{member}", TOPOLOGY, AssignmentConfig())
    return JoinGroupRequest("app", member_id, None, 30_000, 30_000, subscription, new_member_id=member)


class _Gate:
    """An assignor whose first run waits until released."""

    def __init__(self) -> None:
        self.inside, self.release, self.runs = threading.Event(), threading.Event(), 0

    def __call__(self, problem):
        self.runs += 1
        if self.runs == 1:
            self.inside.set()
            assert self.release.wait(10)
        return assignor.solve(problem)


async def test_the_group_answers_while_the_assignor_runs_and_its_result_completes_the_join():
    clock, gate = FakeClock(), _Gate()
    coordinator = Coordinator(GroupSettings(initial_rebalance_delay_ms=0), clock, clock, assign=gate)
    join = asyncio.create_task(coordinator.join(_join("m1")))
    assert await asyncio.to_thread(gate.inside.wait, 10)
    # The assignor holds no lock: a heartbeat of the member is answered meanwhile, as in the
    # barrier (its join is not answered yet: no member knows generation 1).
    beat = await asyncio.wait_for(coordinator.heartbeat(HeartbeatRequest("app", "m1", None, 1)), 5)
    assert beat.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert coordinator.groups["app"].state is GroupState.COMPLETING_REBALANCE
    gate.release.set()
    response = await asyncio.wait_for(join, 10)
    assert (response.error, response.generation_id) == (ErrorCode.NONE, 1)
    assert coordinator.groups["app"].result is not None


async def test_a_result_that_comes_back_after_the_group_moved_on_is_dropped():
    """A member leaves while the assignor computes its generation: the group moves on to the next
    one at once, and the first run's result, back later, is stale and dropped, not applied."""
    clock, gate = FakeClock(), _Gate()
    coordinator = Coordinator(GroupSettings(initial_rebalance_delay_ms=0), clock, clock, assign=gate)
    first = asyncio.create_task(coordinator.join(_join("m1")))
    assert await asyncio.to_thread(gate.inside.wait, 10)  # generation 1 computing, held
    second = asyncio.create_task(coordinator.join(_join("m2")))  # waits for that run
    await asyncio.sleep(0.05)
    left = await asyncio.wait_for(coordinator.leave(LeaveGroupRequest("app", "m1", None)), 5)
    assert left.error is ErrorCode.NONE
    response = await asyncio.wait_for(second, 10)  # generation 2, m2 alone, computed meanwhile
    assert (response.error, response.generation_id) == (ErrorCode.NONE, 2)
    gate.release.set()
    await asyncio.wait_for(first, 10)
    # the held run's result comes back as an event of its own, in the runtime's spawned work
    await asyncio.wait_for(asyncio.gather(*coordinator._finishing, return_exceptions=True), 10)
    group = coordinator.groups["app"]
    assert group.generation == 2 and sorted(group.result.clients) == ["process-m2"]
    assert not group.awaiting_assignment


class _HeldAssignor:
    """An assignor whose every run waits until released, counting its runs."""

    def __init__(self) -> None:
        self.release, self.runs, self.lock = threading.Event(), 0, threading.Lock()

    def __call__(self, problem):
        with self.lock:
            self.runs += 1
        assert self.release.wait(10)
        return assignor.solve(problem)


async def test_joins_while_the_assignor_runs_wait_for_it_and_start_one_rebalance_together():
    """An audit's find: every join that arrived while the assignor ran started the rebalance
    over, and the assignor's runs cannot be stopped: a flood of 3,000 joins into one group ran
    some 700 assignments in a row, none of them used, until gRPC cancelled the waiting calls.
    Now the joins wait for the run out, whose result is then superseded, and one more run
    takes them all: two runs for six members, every join answered with the same generation."""
    clock, held = FakeClock(), _HeldAssignor()
    coordinator = Coordinator(GroupSettings(initial_rebalance_delay_ms=0), clock, clock, assign=held)
    first = asyncio.create_task(coordinator.join(_join("m1")))
    for _ in range(500):
        if held.runs:
            break
        await asyncio.sleep(0.01)
    group = coordinator.groups["app"]
    assert (group.state, group.generation, group.awaiting_assignment) == (GroupState.COMPLETING_REBALANCE, 1, True)
    later = [asyncio.create_task(coordinator.join(_join(f"m{n}"))) for n in range(2, 7)]
    await asyncio.sleep(0.2)
    assert (held.runs, group.generation, group.state) == (1, 1, GroupState.COMPLETING_REBALANCE)
    assert not any(call.done() for call in [first, *later])
    held.release.set()
    responses = await asyncio.wait_for(asyncio.gather(first, *later), 10)
    assert [(r.error, r.generation_id) for r in responses] == [(ErrorCode.NONE, 2)] * 6
    assert held.runs == 2
    assert group.generation == 2 and sorted(group.result.clients) == [f"process-m{n}" for n in range(1, 7)]
    assert group.pending_trigger == "member_joined" and not group.awaiting_assignment


def test_a_restored_group_gets_its_timers_from_the_state_machine():
    group = Group("app", GroupSettings(), state=GroupState.PREPARING_REBALANCE, generation=3, next_probe_ms=90_000)
    group.members["m1"] = Member("m1", None, "p1", 10_000, 40_000, 2, 2, 1, None, None, {}, LagReport(), 0)
    effects = group.restored(now_ms=5_000).effects
    timers = {(e.key.kind, e.key.member_id): e.deadline_ms for e in effects if isinstance(e, ScheduleTimer)}
    assert timers == {(TimerKind.SESSION, "m1"): 15_000, (TimerKind.PROBE, ""): 90_000, (TimerKind.JOIN, ""): 45_000}
    assert group.join_ready_ms == 5_000


class _Store:
    """Records what the runtime hands the store."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict]] = []

    def request(self, group_id: str, snapshot: GroupSnapshot) -> asyncio.Future:
        self.requests.append((group_id, snapshot_document(snapshot)))
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


async def test_persist_hands_the_store_the_snapshot_of_the_finished_handler():
    clock = FakeClock()
    store = _Store()
    coordinator = Coordinator(GroupSettings(initial_rebalance_delay_ms=0), clock, clock, store=store)
    response = await coordinator.join(_join("m1"))
    assert response.error is ErrorCode.NONE
    group_id, document = store.requests[-1]
    assert group_id == "app" and document["generation"] == 1 and document["state"] == "CompletingRebalance"
    assert document["result"]["clients"]["process-m1"]["active"] == [str(TaskId(0, p)) for p in range(4)]


def test_a_persist_carries_the_state_its_handler_left_and_later_changes_do_not_reach_it():
    group = Group("app", GroupSettings(initial_rebalance_delay_ms=0))
    compute = next(e for e in group.join(_join("m1"), 1, 0).effects if isinstance(e, ComputeAssignment))
    problem = compute.inputs.build()
    done = group.assignment_computed(1, problem, assignor.solve(problem), "", 1.0, 10)
    (persist,) = [e for e in done.effects if isinstance(e, Persist)]
    assert (persist.group_id, persist.snapshot.generation, persist.snapshot.state) == ("app", 1, "CompletingRebalance")
    emitted = snapshot_document(persist.snapshot)
    # The group moves on: a report raises an end offset, then the only member leaves.
    report = LagReport(end_offsets={TaskId(0, 0): 500})
    group.heartbeat(HeartbeatRequest("app", "m1", None, 1, report), 20)
    left = group.leave(LeaveGroupRequest("app", "m1", None), 30)
    assert group.end_offsets == {TaskId(0, 0): 500} and not group.members
    assert snapshot_document(persist.snapshot) == emitted
    assert [m.member_id for m in persist.snapshot.members] == ["m1"] and dict(persist.snapshot.end_offsets) == {}
    (later,) = [e for e in left.effects if isinstance(e, Persist)]
    assert (later.snapshot.generation, later.snapshot.state, later.snapshot.members) == (2, "Empty", ())
    assert dict(later.snapshot.end_offsets) == {TaskId(0, 0): 500}


async def test_the_store_encodes_only_the_latest_of_a_groups_coalesced_snapshots(tmp_path, monkeypatch):
    """Three snapshots of one group requested before its writer runs: one write, of the last,
    encoded once (off the event loop), and every request resolves with it."""
    encoded = []

    def counting(snapshot):
        encoded.append(snapshot.generation)
        return encode(snapshot)

    encode = server.store.encode_snapshot
    monkeypatch.setattr(server.store, "encode_snapshot", counting)
    group = Group("app", GroupSettings(initial_rebalance_delay_ms=0))
    snapshots = [group.snapshot()]
    for now, member in ((1, "m1"), (2, "m2")):
        group.join(_join(member), now, 0)
        snapshots.append(group.snapshot())
    assert [len(snapshot_document(snapshot)["members"]) for snapshot in snapshots] == [0, 1, 2]
    store = GroupStore(tmp_path / "state.db")
    await store.open()
    store.start()
    try:
        waits = [store.request("app", snapshot) for snapshot in snapshots]
        await asyncio.wait_for(asyncio.gather(*waits), 10)
        assert encoded == [snapshots[-1].generation]
        (document,) = await store.load_all()
        assert document == json.loads(json.dumps(snapshot_document(snapshots[-1])))
    finally:
        await store.close()
