"""The pure group state machine under random call sequences (hypothesis RuleBasedStateMachine).

A tiny synchronous driver plays the runtime's part: it keeps the keyed timers, runs the
assignor when asked, and records replies. The invariants are the protocol's, stated
independently of how the state machine computes them.
"""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import assignor
from assignor.lag import Lag
from assignor.model import AssignmentConfig, StateStore, TaskId
from assignor.topology import SourceTopic, Subtopology, Topology
from server.effects import CancelTimer, ComputeAssignment, Reply, ScheduleTimer, TimerKind
from server.group import Group, GroupSettings, GroupState
from server.model import (
    ErrorCode,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LagReport,
    LeaveGroupRequest,
    Subscription,
    SyncGroupRequest,
)

PARTITIONS = 4
TOPOLOGY = Topology((Subtopology(0, (SourceTopic("in", PARTITIONS),), (StateStore("s", True),)),))
SETTINGS = GroupSettings(min_session_timeout_ms=1, initial_rebalance_delay_ms=100, min_probe_interval_ms=60_000)


class GroupProtocol(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.group = Group("g", SETTINGS)
        self.now = 0
        self.timers: dict[str, tuple[int, object]] = {}
        self.replies: dict[int, JoinGroupResponse] = {}
        self.calls = 0
        self.members: dict[str, tuple[str, str | None]] = {}  # member id -> (process id, instance id)
        self.generations = [0]

    # ---- the driver -----------------------------------------------------------------------------

    def _apply(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, ScheduleTimer):
                self.timers[str(effect.key)] = (effect.deadline_ms, effect.key)
            elif isinstance(effect, CancelTimer):
                self.timers.pop(str(effect.key), None)
            elif isinstance(effect, Reply):
                self.replies[effect.call_id] = effect.response
            elif isinstance(effect, ComputeAssignment):
                problem = effect.inputs.build()
                result = assignor.solve(problem)
                self._apply(self.group.assignment_computed(effect.generation, problem, result, "", 1.0, self.now).effects)

    def _join(self, member_id: str, process_id: str, instance: str | None, lags: dict[TaskId, int]) -> JoinGroupResponse | None:
        self.calls += 1
        request = JoinGroupRequest(
            group_id="g", member_id=member_id, group_instance_id=instance, session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            subscription=Subscription(2, 2, process_id, TOPOLOGY, AssignmentConfig(), lags=LagReport(task_lags={t: Lag.from_wire(v) for t, v in lags.items()})),
            new_member_id=f"m{self.calls}",
        )
        outcome = self.group.join(request, self.calls, self.now)
        self._apply(outcome.effects)
        response = outcome.response or self.replies.get(self.calls)
        if response is not None and response.error == ErrorCode.NONE:
            self.members[response.member_id] = (process_id, instance)
        return response

    # ---- rules ----------------------------------------------------------------------------------

    @rule(instance=st.sampled_from([None, None, "a", "b"]))
    def new_member(self, instance) -> None:
        self._join("", str(uuid.UUID(int=self.calls + 1)), instance, {})

    @precondition(lambda self: self.group.members)
    @rule(data=st.data(), lag=st.sampled_from([-1, 0, 50, 10_000]))
    def rejoin(self, data, lag) -> None:
        member_id = data.draw(st.sampled_from(sorted(self.group.members)))
        member = self.group.members[member_id]
        self._join(member_id, member.process_id, member.group_instance_id, {TaskId(0, 0): lag})

    @precondition(lambda self: self.group.members)
    @rule(data=st.data())
    def sync(self, data) -> None:
        member_id = data.draw(st.sampled_from(sorted(self.group.members)))
        member = self.group.members[member_id]
        outcome = self.group.sync(SyncGroupRequest("g", member_id, member.group_instance_id, self.group.generation), self.now)
        self._apply(outcome.effects)
        if self.group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert outcome.response.error == ErrorCode.NONE

    @precondition(lambda self: self.group.members)
    @rule(data=st.data())
    def heartbeat(self, data) -> None:
        member_id = data.draw(st.sampled_from(sorted(self.group.members)))
        member = self.group.members[member_id]
        outcome = self.group.heartbeat(HeartbeatRequest("g", member_id, member.group_instance_id, self.group.generation), self.now)
        self._apply(outcome.effects)
        expected = ErrorCode.REBALANCE_IN_PROGRESS if self.group.state is GroupState.PREPARING_REBALANCE else ErrorCode.NONE
        assert outcome.response.error == expected

    @precondition(lambda self: self.group.members)
    @rule(data=st.data())
    def leave(self, data) -> None:
        member_id = data.draw(st.sampled_from(sorted(self.group.members)))
        member = self.group.members[member_id]
        outcome = self.group.leave(LeaveGroupRequest("g", member_id, member.group_instance_id), self.now)
        self._apply(outcome.effects)
        assert outcome.response.error == ErrorCode.NONE
        assert member_id not in self.group.members

    @rule(ms=st.sampled_from([1, 100, 5_000, 11_000, 700_000]))
    def tick(self, ms) -> None:
        target = self.now + ms
        while True:
            due = sorted((deadline, key) for key, (deadline, _) in self.timers.items() if deadline <= target)
            if not due:
                break
            deadline, key = due[0]
            _, timer = self.timers.pop(key)
            self.now = max(self.now, deadline)
            if timer.kind is TimerKind.SESSION:
                outcome = self.group.session_expired(timer.member_id, self.now)
            elif timer.kind is TimerKind.JOIN:
                outcome = self.group.join_deadline(self.now)
            else:
                outcome = self.group.probe_due(self.now)
            self._apply(outcome.effects)
        self.now = target

    # ---- invariants -----------------------------------------------------------------------------

    @invariant()
    def parked_count_matches_parked_members(self) -> None:
        assert self.group.parked == sum(m.join_call is not None for m in self.group.members.values())

    @invariant()
    def nobody_parked_outside_a_rebalance(self) -> None:
        if self.group.state is not GroupState.PREPARING_REBALANCE:
            assert self.group.parked == 0

    @invariant()
    def generation_never_goes_back(self) -> None:
        assert self.group.generation >= self.generations[-1]
        self.generations.append(self.group.generation)

    @invariant()
    def instance_ids_point_at_their_members(self) -> None:
        for instance, member_id in self.group.instances.items():
            assert self.group.members[member_id].group_instance_id == instance
        statics = [m for m in self.group.members.values() if m.group_instance_id]
        assert len(statics) == len(self.group.instances)

    @invariant()
    def a_settled_generation_runs_every_task_once_on_current_members(self) -> None:
        if self.group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) or self.group.result is None:
            return
        pids = {m.process_id for m in self.group.members.values()}
        actives = [(pid, t) for pid, a in self.group.result.clients.items() for t in a.active]
        assert sorted(t for _, t in actives) == [TaskId(0, p) for p in range(PARTITIONS)]
        assert {pid for pid, _ in actives} <= pids

    @invariant()
    def empty_means_no_members(self) -> None:
        assert (self.group.state is GroupState.EMPTY) == (not self.group.members)


GroupProtocol.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestGroupProtocol = GroupProtocol.TestCase
