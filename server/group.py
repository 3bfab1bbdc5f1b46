"""The group state machine: Kafka's classic group protocol with the server as the leader.

Pure and synchronous. Each handler takes a domain request and ``now_ms``, mutates this group's
in-memory state (owned by the runtime, which serialises calls per group) and returns an
``Outcome``: the response, or None for a parked JoinGroup, plus effects (timers, replies to
parked calls, persistence, the assignor run, the rebalance log, events). No clock, no I/O, no
asyncio here; the same calls with the same times give the same effects.

Rules and their sources:
- The states and their transitions are Kafka's ``ClassicGroupState``; JoinGroup long-polls
  until every known member has rejoined or the rebalance timeout passes (members that miss it
  are dropped); the server computes the assignment once per generation.
- Static membership (KIP-345): a restart with the same group_instance_id takes its old place
  with no rebalance; the old member id is fenced (FENCED_INSTANCE_ID).
- Probing rebalances (KIP-441 "Probing Rebalances"): when one is due, and when the lag-driven
  early probe may fire, is the probing policy's decision (``assignor.probing``, shared with the
  simulator); here a scheduled probe is replaced by any natural rebalance.
- Lags: a member's report becomes ``Lag`` values once, when it arrives (``_take_report``).
- Version probing: the group runs at the lowest version any member speaks (group_leader.proto).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter
from types import MappingProxyType

from assignor.cluster import AssignorError, ClusterMetadata, HostTasks, MemberAssignment
from assignor.lag import UNKNOWN, Lag
from assignor.model import (
    AssignmentConfig,
    AssignmentProblem,
    AssignmentResult,
    ClientAssignment,
    HostInfo,
    Role,
    TaskId,
)
from assignor.probing import Probe, ProbingSettings, early_probe, followup_probe
from assignor.topology import Topology
from server.effects import (
    AppendRebalanceLog,
    CancelTimer,
    ComputeAssignment,
    Event,
    Outcome,
    Persist,
    Reply,
    ScheduleTimer,
    TimerKey,
    TimerKind,
)
from server.model import (
    LATEST_SUPPORTED_VERSION,
    ErrorCode,
    GroupOverview,
    GroupSnapshot,
    GroupView,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LagReport,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberSnapshot,
    MemberView,
    QueryHost,
    RouteAnswer,
    Subscription,
    SyncGroupRequest,
    SyncGroupResponse,
    Trigger,
)
from server.problem import ClientReport, ProblemInputs


class GroupState(enum.Enum):
    EMPTY = "Empty"
    """No members. Left when a member joins (to PreparingRebalance)."""
    PREPARING_REBALANCE = "PreparingRebalance"
    """A rebalance has begun: JoinGroup calls are parked until every known member has rejoined
    (after the initial delay for a new group) or the rebalance timeout passes. Heartbeats answer
    REBALANCE_IN_PROGRESS. Left for CompletingRebalance (the barrier released) or Empty."""
    COMPLETING_REBALANCE = "CompletingRebalance"
    """The server has computed the generation's assignment; members fetch it with SyncGroup.
    Left for Stable once every member has synced, or PreparingRebalance."""
    STABLE = "Stable"
    """Everyone has its assignment. Left for PreparingRebalance (membership, topology, probe)."""
    DEAD = "Dead"
    """The group is being unloaded (server drain): every call answers COORDINATOR_NOT_AVAILABLE."""


_ALLOWED_PREVIOUS: Mapping[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.STABLE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE}
    ),
}


class IllegalTransition(RuntimeError):
    """A bug, not a protocol error (house style, "Group lifecycle")."""


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The server-wide settings that shape every group (docs/interfaces.md)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    min_probe_interval_ms: int = 60_000
    early_probe: bool = True

    @property
    def probing(self) -> ProbingSettings:
        return ProbingSettings(self.early_probe, self.min_probe_interval_ms)


@dataclass(slots=True)
class Member:
    """One worker process in the group. Mutable, owned by its group."""

    member_id: str
    group_instance_id: str | None
    process_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    version: int
    latest_supported_version: int
    num_threads: int
    endpoint: HostInfo | None
    rack: str | None
    client_tags: Mapping[str, str]
    report: LagReport  # as the member sent it
    lags_updated_ms: int
    #: ``report`` as lags against the group's end offsets: set by ``Group._take_report`` when a
    #: report arrives (and again when another member's report raises an end offset it uses).
    lags: Mapping[TaskId, Lag] = field(default_factory=lambda: MappingProxyType({}))
    shutdown_requested: bool = False
    join_call: int | None = None  # the parked JoinGroup, if any
    session_deadline_ms: int = 0
    session_armed: bool = False  # a session timer is set (at or before the deadline)
    principal: str = ""  # who created it: only they may use its ids (server/auth.py)

    @classmethod
    def from_join(cls, request: JoinGroupRequest, member_id: str, now_ms: int) -> Member:
        member = cls(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            process_id="",
            session_timeout_ms=0,
            rebalance_timeout_ms=0,
            version=0,
            latest_supported_version=0,
            num_threads=1,
            endpoint=None,
            rack=None,
            client_tags=MappingProxyType({}),
            report=LagReport(),
            lags_updated_ms=now_ms,
            principal=request.principal,
        )
        member.update(request, now_ms)
        return member

    def update(self, request: JoinGroupRequest, now_ms: int) -> None:
        sub = request.subscription
        self.process_id = sub.process_id
        self.session_timeout_ms = request.session_timeout_ms
        self.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
        self.version = sub.version
        self.latest_supported_version = min(sub.latest_supported_version, LATEST_SUPPORTED_VERSION)
        self.num_threads = sub.num_threads
        self.endpoint = sub.endpoint
        self.rack = sub.rack
        self.client_tags = sub.client_tags
        self.shutdown_requested = sub.error_code == AssignorError.SHUTDOWN_REQUESTED

    def snapshot(self) -> MemberSnapshot:
        return MemberSnapshot(*_durable(self))

    @classmethod
    def from_snapshot(cls, snapshot: MemberSnapshot) -> Member:
        """A restored member: no session yet (whether it owes a sync is the group's ``unsynced``)."""
        return cls(**dict(zip(_DURABLE_FIELDS, _durable(snapshot), strict=True)))


# A member's durable fields are MemberSnapshot's, named once there; read in one C call (a
# large group's Persist snapshots every member on the event loop).
_DURABLE_FIELDS = tuple(f.name for f in fields(MemberSnapshot))
_durable = attrgetter(*_DURABLE_FIELDS)


def _warmups(result: AssignmentResult | None) -> int:
    """Warm-up replicas an assignment has in flight (the gauge and the rebalance event)."""
    return sum(len(a.warmup) for a in result.clients.values()) if result else 0


@dataclass(slots=True)
class Group:
    """One group's state. Every public method is a handler: request + now_ms -> Outcome."""

    group_id: str
    settings: GroupSettings = GroupSettings()
    state: GroupState = GroupState.EMPTY
    #: The principal whose join created the group ("" with authentication off), for the quota of
    #: groups per principal (server.limits.check_group_capacity): kept while the group lives,
    #: members or not, so abandoned groups count against whoever left them.
    creator: str = ""
    generation: int = 0
    protocol_version: int = LATEST_SUPPORTED_VERSION
    topology: Topology | None = None
    config: AssignmentConfig | None = None
    members: dict[str, Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    end_offsets: dict[TaskId, int] = field(default_factory=dict)
    #: This generation's assignment: None when it ended without one (``assignment_error``).
    result: AssignmentResult | None = None
    #: The last assignment the assignor computed: the group's memory of who ran what, the next
    #: problem's previous tasks where reports leave them out (``server.memory``). A generation
    #: without one (the assignor failed, a shutdown requested) keeps it: forgotten there, the
    #: next rebalance saw every member that reports no lags as new, and moved its tasks.
    last_assignment: AssignmentResult | None = None
    assignment_error: AssignorError = AssignorError.NONE
    cluster: ClusterMetadata | None = None
    last_rebalance_ms: int = 0
    last_trigger: str = ""
    pending_trigger: str = ""
    #: When the rebalance in progress began (PreparingRebalance entered): the log's rebalance_ms.
    rebalance_started_ms: int = 0
    join_ready_ms: int = 0
    join_deadline_ms: int = 0
    next_probe_ms: int | None = None
    next_probe_reason: str = ""
    parked: int = 0  # members with a parked JoinGroup: the barrier check is O(1) per join
    #: A ComputeAssignment of this generation is out (the assignor runs outside the group's
    #: lock); ``assignment_computed`` brings its result back.
    awaiting_assignment: bool = False
    #: Why the group rebalances again once the assignment out returns: joins that arrive while
    #: the assignor runs wait for it, parked, and then start one rebalance together (not
    #: durable: their calls die with the process, and a restored group prepares a rebalance).
    rejoined_while_computing: str = ""
    #: Members whose join was answered and who have not synced (a completing generation's, or a
    #: static replacement in a Stable group): the one record of who owes a sync (O(1) per sync).
    unsynced: set[str] = field(default_factory=set)
    #: Member ids a newer member of the same process superseded (``_supersede_process``), the
    #: latest ``FENCED_MEMBERS_KEPT``, with the answer their next call gets (not durable: after a
    #: restart such a member rejoins once, and the other is fenced then).
    fenced: dict[str, str] = field(default_factory=dict)

    # ---- durable state -------------------------------------------------------------------------

    def snapshot(self) -> GroupSnapshot:
        """The durable state as of now, for a ``Persist`` effect. Cheap enough for the event
        loop: the topology, config, result and lag reports are immutable and shared; only the
        end offsets (a dict the next report changes) and the members' fields are copied."""
        state = self.state
        if self.awaiting_assignment:
            # The assignor is still running (outside the group's lock): a restored group prepares
            # the rebalance again rather than serve the previous generation's assignment.
            state = GroupState.PREPARING_REBALANCE
        return GroupSnapshot(
            group_id=self.group_id,
            state=state.value,
            generation=self.generation,
            protocol_version=self.protocol_version,
            topology=self.topology,
            config=self.config,
            end_offsets=MappingProxyType(dict(self.end_offsets)),
            result=self.result,
            last_assignment=self.last_assignment,
            assignment_error=self.assignment_error,
            last_rebalance_ms=self.last_rebalance_ms,
            last_trigger=self.last_trigger,
            pending_trigger=self.pending_trigger,
            next_probe_ms=self.next_probe_ms,
            next_probe_reason=self.next_probe_reason,
            members=tuple(m.snapshot() for m in sorted(self.members.values(), key=lambda m: m.member_id)),
            creator=self.creator,
            unsynced=tuple(sorted(self.unsynced)),
        )

    def _persist(self) -> Persist:
        return Persist(self.snapshot())

    @classmethod
    def from_snapshot(cls, snapshot: GroupSnapshot, settings: GroupSettings) -> Group:
        """Rebuild a group from its durable state. One caught preparing a rebalance comes back
        preparing it, with no parked calls; one caught mid-sync comes back CompletingRebalance,
        which ``restored`` turns into a rebalance (it arms the timers). A snapshot of a server
        that did not store who had synced (``unsynced`` None) never recorded Stable either: it
        comes back Stable (its assignment is fixed; members that had not synced still can)."""
        state = GroupState(snapshot.state)
        if state is GroupState.COMPLETING_REBALANCE and snapshot.unsynced is None:
            state = GroupState.STABLE
        if state is GroupState.DEAD:
            state = GroupState.EMPTY
        group = cls(
            group_id=snapshot.group_id,
            settings=settings,
            state=state,
            generation=snapshot.generation,
            protocol_version=snapshot.protocol_version,
            topology=snapshot.topology,
            config=snapshot.config,
            end_offsets=dict(snapshot.end_offsets),
            result=snapshot.result,
            last_assignment=snapshot.last_assignment,
            assignment_error=snapshot.assignment_error,
            last_rebalance_ms=snapshot.last_rebalance_ms,
            last_trigger=snapshot.last_trigger,
            pending_trigger=snapshot.pending_trigger,
            next_probe_ms=snapshot.next_probe_ms,
            next_probe_reason=snapshot.next_probe_reason,
            creator=snapshot.creator,
        )
        for saved in snapshot.members:
            member = Member.from_snapshot(saved)
            member.lags = MappingProxyType(member.report.lags(group.end_offsets))
            group.members[member.member_id] = member
            if member.group_instance_id:
                group.instances[member.group_instance_id] = member.member_id
        group.unsynced = set(snapshot.unsynced or ()) & set(group.members)
        group._rebuild_cluster()
        return group

    # ---- state transitions -------------------------------------------------------------------

    def _transition(self, target: GroupState) -> None:
        if self.state not in _ALLOWED_PREVIOUS[target]:
            raise IllegalTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target

    def _key(self, kind: TimerKind, member_id: str = "") -> TimerKey:
        return TimerKey(kind, self.group_id, member_id)

    def _park_call(self, member: Member, call_id: int) -> None:
        if member.join_call is None:
            self.parked += 1
        member.join_call = call_id

    def _unpark(self, member: Member) -> int | None:
        call, member.join_call = member.join_call, None
        if call is not None:
            self.parked -= 1
        return call

    def _check_alive(self) -> ErrorCode | None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE if self.state is GroupState.DEAD else None

    # ---- JoinGroup ---------------------------------------------------------------------------

    def join(self, request: JoinGroupRequest, call_id: int, now_ms: int) -> Outcome:
        if self._check_alive():
            return Outcome(JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the server is draining"))
        timeout = request.session_timeout_ms
        if not self.settings.min_session_timeout_ms <= timeout <= self.settings.max_session_timeout_ms:
            return Outcome(
                JoinGroupResponse(
                    ErrorCode.INVALID_SESSION_TIMEOUT,
                    f"session_timeout_ms {timeout} is outside [{self.settings.min_session_timeout_ms}, "
                    f"{self.settings.max_session_timeout_ms}]",
                )
            )
        if request.member_id:
            return self._join_known(request, call_id, now_ms)
        return self._join_new(request, call_id, now_ms)

    def _inconsistency(self, sub: Subscription) -> str | None:
        """Why this subscription disagrees with the group, or None. An Empty group takes the
        newcomer's topology and config: there is nobody left to disagree with."""
        if self.state is GroupState.EMPTY or self.topology is None or self.config is None:
            return None
        # The edge hands out one object per distinct topology and config: a member that sends
        # the group's own skips the comparison (one per join: O(members) per rebalance).
        difference = None if sub.topology is self.topology else self.topology.structure_difference(sub.topology)
        if difference:
            return f"topology: {difference}"
        if sub.config is not self.config and sub.config != self.config:
            for name in AssignmentConfig.__dataclass_fields__:
                if getattr(sub.config, name) != getattr(self.config, name):
                    return (
                        f"config.{name}: {getattr(sub.config, name)!r} differs from the group's "
                        f"{getattr(self.config, name)!r}"
                    )
        return None

    def _adopt_topology(self, sub: Subscription) -> str | None:
        """Take the newcomer's metadata into the group; returns the trigger it implies, if any."""
        if self.state is GroupState.EMPTY:
            trigger = None
            if self.topology is not None and self.topology != sub.topology:
                trigger = Trigger.TOPOLOGY_CHANGED
            elif self.config is not None and self.config != sub.config:
                trigger = Trigger.CONFIG_CHANGED
            self.topology, self.config = sub.topology, sub.config
            return trigger
        assert_topology = self.topology
        if assert_topology is None:  # pragma: no cover - guarded by _inconsistency
            raise IllegalTransition("group without topology")
        if sub.topology is assert_topology:
            return None
        merged = assert_topology.merged(sub.topology)
        if merged != assert_topology:
            self.topology = merged
            return Trigger.TOPOLOGY_CHANGED
        return None

    def _take_report(self, member: Member, report: LagReport, now_ms: int) -> None:
        """A member's lag report arrived: its lags are computed here, once. The group's end
        offsets are the largest any member reported; when this report raises one, members whose
        offset sums are measured against it get their lags recomputed too. The lags date from
        when they were measured (``LagReport.age_ms``), which KIP-535 callers read as their age."""
        member.report = report
        # never before the clock's first millisecond: 0 reads as "never reported"
        member.lags_updated_ms = max(now_ms - report.age_ms, min(now_ms, 1))
        raised = set()
        for task, offset in report.end_offsets.items():
            if offset > self.end_offsets.get(task, -1):
                self.end_offsets[task] = offset
                raised.add(task)
        member.lags = self._lags_of(report)
        if raised:
            for other in self.members.values():
                if other is not member and not raised.isdisjoint(other.report.offset_sums):
                    other.lags = self._lags_of(other.report)

    def _lags_of(self, report: LagReport) -> Mapping[TaskId, Lag]:
        """A report's lags of the tasks the group's topology forms: those of other tasks mean
        nothing to the assignor, and kept, a member's 50,000 lags of tasks of no topology were
        each group's to store, snapshot and describe (120 such members made a DescribeGroup answer
        of 90 MB, beyond what the server sends)."""
        lags = report.lags(self.end_offsets)
        return MappingProxyType(lags if self.topology is None else self.topology.its_tasks(lags))

    def _join_new(self, request: JoinGroupRequest, call_id: int, now_ms: int) -> Outcome:
        sub = request.subscription
        difference = self._inconsistency(sub)
        if difference:
            return Outcome(JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, difference))
        instance = request.group_instance_id
        if instance and instance in self.instances:
            return self._replace_static(request, call_id, now_ms)
        outcome = Outcome()
        if self.generation == 0 and not self.members and not self.creator:
            self.creator = request.principal
        outcome.effects += self._supersede_process(sub.process_id, None)
        topology_trigger = self._adopt_topology(sub)
        member = Member.from_join(request, request.new_member_id, now_ms)
        self.members[member.member_id] = member
        self._take_report(member, sub.lags, now_ms)
        if instance:
            self.instances[instance] = member.member_id
        outcome.effects.append(Event("group.member.joined", {"member_id": member.member_id, "process_id": member.process_id}))
        return self._park(member, call_id, topology_trigger or Trigger.MEMBER_JOINED, now_ms, outcome)

    def _replace_static(self, request: JoinGroupRequest, call_id: int, now_ms: int) -> Outcome:
        """KIP-345: the restarted instance takes its predecessor's place; the predecessor is fenced."""
        instance = request.group_instance_id or ""
        old = self.members.pop(self.instances[instance])
        self.unsynced.discard(old.member_id)
        self._fence(old.member_id, f"fenced: a newer member joined with group_instance_id {instance!r}")
        outcome = Outcome()
        outcome.effects.append(CancelTimer(self._key(TimerKind.SESSION, old.member_id)))
        old_call = self._unpark(old)
        if old_call is not None:
            outcome.effects.append(Reply(old_call, JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, "fenced by a newer member with the same group_instance_id")))
        superseded = self._supersede_process(request.subscription.process_id, None)
        outcome.effects += superseded
        topology_trigger = self._adopt_topology(request.subscription)
        member = Member.from_join(request, request.new_member_id, now_ms)
        self.members[member.member_id] = member
        self._take_report(member, request.subscription.lags, now_ms)
        self.instances[instance] = member.member_id
        outcome.effects.append(
            Event("group.member.replaced", {"member_id": member.member_id, "old_member_id": old.member_id, "group_instance_id": instance})
        )
        if old.process_id != member.process_id:
            self._rekey_process(old.process_id, member.process_id)
        quiet = topology_trigger is None and not superseded and not self._generation_outdated_by(old, member)
        if self.awaiting_assignment and quiet and old.process_id == member.process_id:
            # The assignor is computing this generation from the predecessor's report: the
            # replacement waits for it with the other parked joins. Answered at once with the
            # previous generation's assignment, it made the group Stable before the others'
            # joins were answered, and they never were while it lived (an audit's find).
            member.session_armed = False
            outcome.effects.append(CancelTimer(self._key(TimerKind.SESSION, member.member_id)))
            self._park_call(member, call_id)
            outcome.effects.append(self._persist())
            return outcome
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and quiet and not self.awaiting_assignment:
            self.unsynced.add(member.member_id)
            self._rebuild_cluster()
            # it must sync within its rebalance timeout, as the members of a completing rebalance
            # (``_drop_unsynced``): one that heartbeat but never synced held its predecessor's
            # tasks, run by nobody, for good (an audit's find)
            self.join_deadline_ms = max(self.join_deadline_ms, now_ms + member.rebalance_timeout_ms)
            outcome.effects.append(ScheduleTimer(self._key(TimerKind.JOIN), self.join_deadline_ms))
            outcome.effects += self._touch_session(member, now_ms)
            outcome.effects.append(self._persist())
            outcome.response = JoinGroupResponse(ErrorCode.NONE, "", self.generation, member.member_id, self.protocol_version)
            return outcome
        return self._park(member, call_id, topology_trigger or Trigger.MEMBER_REJOINED, now_ms, outcome)

    def _generation_outdated_by(self, old: Member, new: Member) -> bool:
        """Whether a static replacement changes what every member of this generation was told:
        the group's commonly supported version (a restart onto an older build cannot read this
        generation's encoding; the last member of a rolling upgrade lets it rise) or the
        replacement's endpoint (everyone's KIP-535 host maps name the old one; Kafka Streams
        rebalances on a host info change too)."""
        return self._common_version() != self.protocol_version or new.endpoint != old.endpoint

    def _common_version(self) -> int:
        """The group's commonly supported version: its members' lowest latest_supported_version."""
        return min(m.latest_supported_version for m in self.members.values())

    def _supersede_process(self, process_id: str, claimant: str | None) -> list:
        """A process id names one live member (the assignor's client): a join that claims the
        id of another live member means that worker process restarted, so every other member
        holding it (all but ``claimant``) is gone for good. Without this, two members would
        share one client's tasks, or a static restart would take over another's assignment."""
        effects: list = []
        for other in sorted(self.members.values(), key=lambda m: m.member_id):
            if other.process_id == process_id and other.member_id != claimant:
                # Fenced, not told to rejoin: were it alive (two workers given one process id, a
                # copied state directory), its rejoin would supersede the newer one in turn, and
                # the two would rebalance the group for good (90 generations a second, measured).
                message = (f"fenced: a newer member joined with process_id {process_id!r}; two live workers "
                           "must not share a process id (a fixed --process-id, a copied state directory)")
                self._fence(other.member_id, message)
                effects += self._remove_member(other, ErrorCode.FENCED_INSTANCE_ID, message)
        return effects

    def _fence(self, member_id: str, message: str) -> None:
        """Remember a member id replaced for good, so that its next call hears why, whatever
        instance id it sends (the last ``FENCED_MEMBERS_KEPT``)."""
        self.fenced[member_id] = message
        while len(self.fenced) > FENCED_MEMBERS_KEPT:
            del self.fenced[next(iter(self.fenced))]

    def _rekey_process(self, old_pid: str, new_pid: str) -> None:
        """A static replacement under a new process id takes its predecessor's tasks: in this
        generation's assignment and in the memory the next problem is built from (one object
        while the generation has an assignment, and kept one: the snapshot stores it once)."""
        memory = self.last_assignment
        self.last_assignment = _rekeyed(memory, old_pid, new_pid)
        self.result = self.last_assignment if self.result is memory else _rekeyed(self.result, old_pid, new_pid)

    def _join_known(self, request: JoinGroupRequest, call_id: int, now_ms: int) -> Outcome:
        member, error, message = self._lookup(request.member_id, request.group_instance_id)
        if member is None:
            return Outcome(JoinGroupResponse(error, message))
        difference = self._inconsistency(request.subscription)
        if difference:
            return Outcome(JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, difference))
        outcome = Outcome()
        previous = self._unpark(member)
        if previous is not None:
            outcome.effects.append(Reply(previous, JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup of the same member")))
        if request.subscription.process_id != member.process_id:  # else no other member can hold it
            outcome.effects += self._supersede_process(request.subscription.process_id, member.member_id)
        topology_trigger = self._adopt_topology(request.subscription)
        member.update(request, now_ms)
        self._take_report(member, request.subscription.lags, now_ms)
        return self._park(member, call_id, topology_trigger or Trigger.MEMBER_REJOINED, now_ms, outcome)

    def _park(self, member: Member, call_id: int, trigger: str, now_ms: int, outcome: Outcome) -> Outcome:
        self._park_call(member, call_id)
        member.session_armed = False
        outcome.effects.append(CancelTimer(self._key(TimerKind.SESSION, member.member_id)))
        if self.awaiting_assignment:
            # The assignor runs and cannot be stopped: restarted at every join, a flood of 3,000
            # joins into one group ran some 700 assignments in a row, none of them used, and
            # calls waited until gRPC cancelled them (an audit's find). The joins wait for it and
            # start the next rebalance together (``assignment_computed``).
            if not self.rejoined_while_computing or trigger == Trigger.TOPOLOGY_CHANGED:
                self.rejoined_while_computing = trigger
            return outcome
        if self.state is not GroupState.PREPARING_REBALANCE:
            outcome.effects += self._prepare_rebalance(trigger, now_ms)
        elif trigger == Trigger.TOPOLOGY_CHANGED:
            self.pending_trigger = trigger
        outcome.effects += self._maybe_complete_join(now_ms)
        return outcome

    # ---- rebalance ---------------------------------------------------------------------------

    def _prepare_rebalance(self, trigger: str, now_ms: int) -> list:
        was_empty = self.state is GroupState.EMPTY
        self._transition(GroupState.PREPARING_REBALANCE)
        self.awaiting_assignment = False  # a result still out is stale now
        self.rejoined_while_computing = ""  # this rebalance takes those joins
        self.pending_trigger = trigger
        self.rebalance_started_ms = now_ms
        effects: list = [Event("group.rebalance.started", {"trigger": str(trigger)})]
        effects += self._cancel_probe()
        self.join_deadline_ms = now_ms + self._longest_rebalance_timeout()
        self.join_ready_ms = now_ms + (self.settings.initial_rebalance_delay_ms if was_empty else 0)
        return effects

    def _longest_rebalance_timeout(self) -> int:
        """How long the barrier, and then the syncs, wait: the members' largest rebalance timeout."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _maybe_complete_join(self, now_ms: int) -> list:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return []
        if not self.members:
            return self._complete_join(now_ms)
        all_joined = self.parked == len(self.members)
        if all_joined and now_ms >= self.join_ready_ms:
            return self._complete_join(now_ms)
        if now_ms >= self.join_deadline_ms:
            effects: list = []
            for member in sorted(self.members.values(), key=lambda m: m.member_id):
                if member.join_call is None:
                    effects += self._remove_member(member, None, "")
                    effects.append(Event("group.member.dropped", {"member_id": member.member_id, "reason": "missed the rebalance timeout"}))
            return effects + self._complete_join(now_ms)
        wake = self.join_ready_ms if all_joined else self.join_deadline_ms
        return [ScheduleTimer(self._key(TimerKind.JOIN), wake)]

    def _complete_join(self, now_ms: int) -> list:
        effects: list = [CancelTimer(self._key(TimerKind.JOIN))]
        self.generation += 1
        if not self.members:
            self._transition(GroupState.EMPTY)
            # Nobody runs anything now, and the next member may bring another application
            # (an Empty group adopts a new topology): nothing is remembered.
            self.result, self.last_assignment, self.cluster, self.assignment_error = None, None, None, AssignorError.NONE
            effects += self._cancel_probe()
            effects += [self._persist(), Event("group.empty", {"generation": self.generation})]
            return effects
        self._transition(GroupState.COMPLETING_REBALANCE)
        self.protocol_version = self._common_version()
        topology = self.topology
        if any(m.shutdown_requested for m in self.members.values()):
            return effects + self._finish_without_assignor(AssignorError.SHUTDOWN_REQUESTED, now_ms)
        if topology is None or not topology.metadata_complete:
            return effects + self._finish_without_assignor(AssignorError.INCOMPLETE_SOURCE_TOPIC_METADATA, now_ms)
        effects.append(ComputeAssignment(self.group_id, self.generation, self.problem_inputs()))
        self.awaiting_assignment = True
        return effects

    def problem_inputs(self) -> ProblemInputs:
        """The assignor's input as of now, captured for building off the event loop
        (``server.problem``): references to immutable values and a copy of the end offsets."""
        if self.topology is None or self.config is None:
            raise IllegalTransition(f"group {self.group_id} has no topology")
        members = sorted(self.members.values(), key=lambda m: m.process_id)
        reports = tuple(ClientReport(m.process_id, m.lags, m.num_threads, m.rack, m.client_tags) for m in members)
        return ProblemInputs(self.topology, self.config, dict(self.end_offsets), reports, self.last_assignment)

    def _finish_without_assignor(self, error: AssignorError, now_ms: int) -> list:
        self.result = None
        self.assignment_error = error
        return self._release_joins(now_ms, [Event("group.rebalance.completed", {"generation": self.generation, "assignment_error": error.name})])

    def assignment_computed(
        self, generation: int, problem: AssignmentProblem | None, result: AssignmentResult | None, error: str, compute_ms: float, now_ms: int
    ) -> Outcome:
        """The runtime's answer to ``ComputeAssignment``: release the join barrier."""
        if generation != self.generation or self.state is not GroupState.COMPLETING_REBALANCE:
            return Outcome(effects=[Event("group.assignment.stale", {"generation": generation})])
        if self.rejoined_while_computing:
            effects = [Event("group.assignment.superseded", {"generation": generation,
                                                             "trigger": self.rejoined_while_computing})]
            effects += self._prepare_rebalance(self.rejoined_while_computing, now_ms)
            return Outcome(effects=effects + self._maybe_complete_join(now_ms))
        self.awaiting_assignment = False
        effects: list = []
        if result is None:
            self.result = None
            self.assignment_error = AssignorError.ASSIGNMENT_ERROR
            effects.append(Event("group.assignment.failed", {"generation": generation, "error": error}))
        else:
            self.result = self.last_assignment = result
            self.assignment_error = AssignorError.NONE
            effects += self._schedule_followup(result, now_ms)
            effects.append(
                AppendRebalanceLog(
                    {
                        "schema": 1,
                        "group_id": self.group_id,
                        "generation": generation,
                        "time_ms": now_ms,
                        "compute_ms": round(compute_ms, 3),
                        # from PreparingRebalance to the assignment (0 when the start is not known,
                        # e.g. a rebalance begun before a restart)
                        "rebalance_ms": now_ms - self.rebalance_started_ms if self.rebalance_started_ms else 0,
                        "trigger": str(self.pending_trigger),
                    },
                    problem,
                    result,
                )
            )
        warmups = _warmups(result)
        effects.append(
            Event(
                "group.rebalance.completed",
                {
                    "generation": generation,
                    "trigger": str(self.pending_trigger),
                    "members": len(self.members),
                    "compute_ms": round(compute_ms, 3),
                    "warmups": warmups,
                    "probing_rebalance_needed": bool(result and result.probing_rebalance_needed),
                },
            )
        )
        return Outcome(effects=self._release_joins(now_ms, effects))

    def _release_joins(self, now_ms: int, effects: list) -> list:
        self.last_rebalance_ms = now_ms
        self.last_trigger = self.pending_trigger
        self._rebuild_cluster()
        replies = []
        self.unsynced = set(self.members)
        self.join_deadline_ms = now_ms + self._longest_rebalance_timeout()  # the syncs' (``_drop_unsynced``)
        effects.append(ScheduleTimer(self._key(TimerKind.JOIN), self.join_deadline_ms))
        for member in sorted(self.members.values(), key=lambda m: m.member_id):
            effects += self._touch_session(member, now_ms)
            call = self._unpark(member)
            if call is not None:
                replies.append(Reply(call, JoinGroupResponse(ErrorCode.NONE, "", self.generation, member.member_id, self.protocol_version)))
        # Persist first: the replies depend on the generation being durable.
        return [self._persist(), *effects, *replies]

    def _rebuild_cluster(self) -> None:
        topology = self.topology or Topology(())
        hosts = []
        for member in sorted(self.members.values(), key=lambda m: m.process_id):
            assignment = self._client_assignment(member.process_id)
            hosts.append(
                HostTasks(member.process_id, member.endpoint, assignment.active, _with_warmups(assignment))
            )
        self.cluster = ClusterMetadata(topology, tuple(hosts))

    def _client_assignment(self, process_id: str) -> ClientAssignment:
        if self.result is None:
            return ClientAssignment()
        return self.result.clients.get(process_id, ClientAssignment())

    # ---- probing rebalances ------------------------------------------------------------------

    def _schedule_followup(self, result: AssignmentResult, now_ms: int) -> list:
        """The follow-up rebalance the probing policy asks for (``assignor.probing``), or none."""
        probe = followup_probe(result, self.config, now_ms) if self.config is not None else None
        if probe is None:
            return self._cancel_probe()
        return self._schedule_probe(probe.at_ms, probe.trigger)

    def _schedule_probe(self, at_ms: int, reason: str) -> list:
        self.next_probe_ms, self.next_probe_reason = at_ms, str(reason)
        return [
            ScheduleTimer(self._key(TimerKind.PROBE), at_ms),
            Event("group.probe.scheduled", {"reason": str(reason), "at_ms": at_ms}),
        ]

    def _cancel_probe(self) -> list:
        if self.next_probe_ms is None:
            return []
        self.next_probe_ms, self.next_probe_reason = None, ""
        return [CancelTimer(self._key(TimerKind.PROBE))]

    def _early_probe(self, now_ms: int) -> list:
        """The lag-driven early probe of the probing policy (``assignor.probing.early_probe``),
        once the group is Stable, against the members' latest lags measured since the last
        rebalance: a report from before it (a dead worker's, re-sent by its live sidecar with
        its age) says nothing of how far the warm-ups it started have come."""
        if self.result is None or self.config is None or self.state is not GroupState.STABLE:
            return []
        scheduled = None
        if self.next_probe_ms is not None:
            scheduled = Probe(self.next_probe_ms, Trigger(self.next_probe_reason or Trigger.PROBING_REBALANCE))
        lags = {m.process_id: m.lags for m in self.members.values() if m.lags_updated_ms >= self.last_rebalance_ms}
        probe = early_probe(self.result, lags,
                            self.config.acceptable_recovery_lag, self.settings.probing, now_ms,
                            self.last_rebalance_ms, scheduled)
        return [] if probe is None else self._schedule_probe(probe.at_ms, probe.trigger)

    def probe_due(self, now_ms: int) -> Outcome:
        if self.next_probe_ms is None or now_ms < self.next_probe_ms:
            return Outcome()
        if self.state not in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return Outcome()
        reason = self.next_probe_reason or Trigger.PROBING_REBALANCE
        effects: list = [Event("group.probe.fired", {"reason": reason})]
        effects += self._prepare_rebalance(reason, now_ms)
        effects += self._maybe_complete_join(now_ms)
        return Outcome(effects=effects)

    # ---- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------

    def _lookup(self, member_id: str, instance: str | None) -> tuple[Member | None, ErrorCode, str]:
        """Fencing by member id and instance id (KIP-345), and by process id: the member, or the
        error and its message. As Kafka's coordinator validates a member: an instance id, when
        sent, must be held by this member id (another holder: fenced; no holder: an unknown
        member); left out (the field is optional), the member id alone decides, so a static
        member that names its instance only when it joins is not fenced by itself."""
        if instance:
            holder = self.instances.get(instance)
            if holder is not None and holder != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID, _MESSAGES[ErrorCode.FENCED_INSTANCE_ID]
        member = self.members.get(member_id)
        if member is None:
            fenced = self.fenced.get(member_id)
            if fenced is not None:
                return None, ErrorCode.FENCED_INSTANCE_ID, fenced
            return None, ErrorCode.UNKNOWN_MEMBER_ID, _MESSAGES[ErrorCode.UNKNOWN_MEMBER_ID]
        if instance and member.group_instance_id != instance:
            return None, ErrorCode.UNKNOWN_MEMBER_ID, (
                f"group_instance_id {instance!r} is not held by member {member_id!r}: "
                + ("it joined without one" if member.group_instance_id is None else "it joined with another"))
        return member, ErrorCode.NONE, ""

    def _touch_session(self, member: Member, now_ms: int) -> list:
        """Move the session deadline. The timer is lazy: armed once, and on firing re-armed at
        the current deadline if the member has heartbeat since (no timer churn per heartbeat)."""
        member.session_deadline_ms = now_ms + member.session_timeout_ms
        if member.session_armed:
            return []
        member.session_armed = True
        return [ScheduleTimer(self._key(TimerKind.SESSION, member.member_id), member.session_deadline_ms)]

    def _joining(self) -> bool:
        """Joins are not answered yet: PreparingRebalance, or the assignor computing the new
        generation (CompletingRebalance before the joins are released), whose number no member
        has heard: a heartbeat or sync then hears REBALANCE_IN_PROGRESS, as in the barrier, not
        ILLEGAL_GENERATION for the generation it holds (an audit's find)."""
        return self.state is GroupState.PREPARING_REBALANCE or self.awaiting_assignment

    def sync(self, request: SyncGroupRequest, now_ms: int) -> Outcome:
        if self._check_alive():
            return Outcome(SyncGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the server is draining"))
        member, error, message = self._lookup(request.member_id, request.group_instance_id)
        if member is None:
            return Outcome(SyncGroupResponse(error, message))
        if self._joining():
            return Outcome(SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, _MESSAGES[ErrorCode.REBALANCE_IN_PROGRESS]))
        if request.generation_id != self.generation:
            return Outcome(SyncGroupResponse(ErrorCode.ILLEGAL_GENERATION, f"generation {request.generation_id} is not the group's {self.generation}"))
        effects = self._touch_session(member, now_ms)
        owed = member.member_id in self.unsynced
        self.unsynced.discard(member.member_id)
        if self.state is GroupState.COMPLETING_REBALANCE and not self.unsynced:
            self._transition(GroupState.STABLE)
            effects.append(CancelTimer(self._key(TimerKind.JOIN)))
            effects.append(Event("group.stable", {"generation": self.generation}))
            effects += self._early_probe(now_ms)
        if owed and not self.unsynced:
            # written, so that a restart knows the syncs are all in (once per rebalance); not
            # required: lost, a restart rebalances, which is safe, so this sync's answer does
            # not fail with its write
            effects.append(Persist(self.snapshot(), required=False))
        return Outcome(SyncGroupResponse(ErrorCode.NONE, "", self.member_assignment(member)), effects)

    def member_assignment(self, member: Member) -> MemberAssignment:
        """This member's part, encoded at the group's version (version probing)."""
        assignment = self._client_assignment(member.process_id)
        error = self.assignment_error
        if error is AssignorError.NONE and member.version > self.protocol_version:
            error = AssignorError.VERSION_PROBING
        cluster = self.cluster or ClusterMetadata(self.topology or Topology(()))
        return MemberAssignment(
            generation=self.generation,
            active=assignment.active,
            standby=_with_warmups(assignment),
            warmup=frozenset(assignment.warmup),
            next_rebalance_ms=self.next_probe_ms,
            version=self.protocol_version,
            commonly_supported_version=self.protocol_version,
            error=error,
            cluster=cluster,
        )

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> Outcome:
        if self._check_alive():
            return Outcome(HeartbeatResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the server is draining"))
        member, error, message = self._lookup(request.member_id, request.group_instance_id)
        if member is None:
            return Outcome(HeartbeatResponse(error, message))
        effects = [] if member.join_call is not None else self._touch_session(member, now_ms)
        if request.lags is not None:
            self._take_report(member, request.lags, now_ms)
        if self._joining():
            return Outcome(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS, _MESSAGES[ErrorCode.REBALANCE_IN_PROGRESS]), effects)
        if request.generation_id != self.generation:
            return Outcome(HeartbeatResponse(ErrorCode.ILLEGAL_GENERATION, f"generation {request.generation_id} is not the group's {self.generation}"), effects)
        if request.lags is not None:
            effects += self._early_probe(now_ms)
        return Outcome(HeartbeatResponse(ErrorCode.NONE, "", self.next_probe_ms), effects)

    def leave(self, request: LeaveGroupRequest, now_ms: int) -> Outcome:
        if self._check_alive():
            return Outcome(LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the server is draining"))
        member_id = request.member_id
        if not member_id and request.group_instance_id:  # a static member named by its instance id alone
            member_id = self.instances.get(request.group_instance_id, "")
        member, error, message = self._lookup(member_id, request.group_instance_id)
        if member is None:
            return Outcome(LeaveGroupResponse(error, message))
        effects = self._remove_member(member, ErrorCode.UNKNOWN_MEMBER_ID, "left the group")
        effects.append(Event("group.member.left", {"member_id": member.member_id}))
        effects += self._after_removal(Trigger.MEMBER_LEFT, now_ms)
        return Outcome(LeaveGroupResponse(ErrorCode.NONE), effects)

    def session_expired(self, member_id: str, now_ms: int) -> Outcome:
        member = self.members.get(member_id)
        # A stale timer: the member left or rejoined (parked joins do not expire) ...
        if member is None or member.join_call is not None or self.state is GroupState.DEAD:
            return Outcome()
        # ... or heartbeat since it was armed: re-arm at the current deadline.
        if now_ms < member.session_deadline_ms:
            return Outcome(effects=[ScheduleTimer(self._key(TimerKind.SESSION, member_id), member.session_deadline_ms)])
        effects = self._remove_member(member, None, "")
        effects.append(Event("group.member.expired", {"member_id": member_id}))
        effects += self._after_removal(Trigger.SESSION_EXPIRED, now_ms)
        return Outcome(effects=effects)

    def join_deadline(self, now_ms: int) -> Outcome:
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and not self.awaiting_assignment:
            return Outcome(effects=self._drop_unsynced(now_ms))
        return Outcome(effects=self._maybe_complete_join(now_ms))

    def _drop_unsynced(self, now_ms: int) -> list:
        """The syncs' deadline (Kafka's pending-sync timeout): a member whose join was answered
        (in a completing rebalance, or a static replacement in a Stable group) but that has not
        synced within the rebalance timeout is dropped, and the group rebalances. One that
        heartbeat but never synced kept the group in CompletingRebalance for good, its tasks run
        by nobody (an audit's find)."""
        if now_ms < self.join_deadline_ms or not self.unsynced:
            return []
        effects: list = []
        for member_id in sorted(self.unsynced):
            member = self.members.get(member_id)
            if member is not None:
                effects += self._remove_member(member, None, "")
                effects.append(Event("group.member.dropped", {"member_id": member_id, "reason": "missed the sync within the rebalance timeout"}))
        return effects + self._after_removal(Trigger.SESSION_EXPIRED, now_ms)

    def _remove_member(self, member: Member, reply_error: ErrorCode | None, message: str) -> list:
        del self.members[member.member_id]
        self.unsynced.discard(member.member_id)
        if member.group_instance_id and self.instances.get(member.group_instance_id) == member.member_id:
            del self.instances[member.group_instance_id]
        effects: list = [CancelTimer(self._key(TimerKind.SESSION, member.member_id))]
        member.session_armed = False
        call = self._unpark(member)
        if call is not None and reply_error is not None:
            effects.append(Reply(call, JoinGroupResponse(reply_error, message)))
        return effects

    def _after_removal(self, trigger: str, now_ms: int) -> list:
        """The group without a member: a rebalance, and the state that results made durable
        (once: completing the join of an emptied group persists it already)."""
        effects: list = []
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            effects += self._prepare_rebalance(trigger, now_ms)
        effects += self._maybe_complete_join(now_ms)
        if not any(isinstance(effect, Persist) for effect in effects):
            effects.insert(0, self._persist())
        return effects

    # ---- restore -------------------------------------------------------------------------------

    def restored(self, now_ms: int) -> Outcome:
        """A group just loaded from its snapshot (server start, lease takeover): every member's
        session starts afresh, the scheduled probe is re-armed, and a rebalance that was being
        prepared waits for its members again from now (they have no parked calls here)."""
        # an event, so that the per-group gauges (members, generation, warm-ups) are there from
        # the start and not only after the next rebalance
        warmups = _warmups(self.result)
        effects: list = [Event("group.restored", {"state": self.state.value, "warmups": warmups})]
        for member in sorted(self.members.values(), key=lambda m: m.member_id):
            member.session_deadline_ms = now_ms + member.session_timeout_ms
            member.session_armed = True
            effects.append(ScheduleTimer(self._key(TimerKind.SESSION, member.member_id), member.session_deadline_ms))
        if self.next_probe_ms is not None:
            effects.append(ScheduleTimer(self._key(TimerKind.PROBE), self.next_probe_ms))
        if self.state is GroupState.COMPLETING_REBALANCE:
            # Caught mid-sync (Stable is written when the last member syncs). Which members had
            # synced is not durable: waiting for them all would drop those that had and now
            # only heartbeat, waiting for none kept a member that never synced on its tasks, run
            # by nobody, for good (a helper's audit, over a failover). Everyone rejoins instead.
            effects += self._prepare_rebalance(Trigger.RESTORED_MID_SYNC, now_ms)
            effects.append(self._persist())
        elif self.unsynced:  # Stable: static replacements owe their sync (``_drop_unsynced``)
            self.join_deadline_ms = now_ms + self._longest_rebalance_timeout()
            effects.append(ScheduleTimer(self._key(TimerKind.JOIN), self.join_deadline_ms))
        if self.state is GroupState.PREPARING_REBALANCE:
            self.join_deadline_ms = now_ms + self._longest_rebalance_timeout()
            self.join_ready_ms = now_ms
            effects.append(ScheduleTimer(self._key(TimerKind.JOIN), self.join_deadline_ms))
        return Outcome(effects=effects)

    # ---- drain ---------------------------------------------------------------------------------

    def unload(self) -> Outcome:
        """Server drain: parked joins answer COORDINATOR_NOT_AVAILABLE (the durable state stays)."""
        if self.state is GroupState.DEAD:
            return Outcome()
        effects: list = []
        for member in sorted(self.members.values(), key=lambda m: m.member_id):
            effects.append(CancelTimer(self._key(TimerKind.SESSION, member.member_id)))
            member.session_armed = False
            call = self._unpark(member)
            if call is not None:
                effects.append(Reply(call, JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the server is draining")))
        effects += [CancelTimer(self._key(TimerKind.JOIN)), CancelTimer(self._key(TimerKind.PROBE))]
        self._transition(GroupState.DEAD)
        return Outcome(effects=effects)

    # ---- read-only views -----------------------------------------------------------------------

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.state.value, self.generation, len(self.members))

    def describe(self) -> GroupView:
        members = []
        for m in sorted(self.members.values(), key=lambda m: m.member_id):
            assignment = self._client_assignment(m.process_id)
            members.append(
                MemberView(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    process_id=m.process_id,
                    endpoint=m.endpoint,
                    rack=m.rack,
                    client_tags=m.client_tags,
                    num_threads=m.num_threads,
                    version=m.version,
                    latest_supported_version=m.latest_supported_version,
                    lags=m.lags,  # read-only, replaced whole on each report: no copy (the live page reads it each second)
                    lags_updated_ms=m.lags_updated_ms,
                    active=assignment.active,
                    standby=assignment.standby,
                    warmup=assignment.warmup,
                    session_timeout_ms=m.session_timeout_ms,
                )
            )
        return GroupView(
            group_id=self.group_id,
            state=self.state.value,
            generation=self.generation,
            commonly_supported_version=self.protocol_version,
            members=tuple(members),
            topology=self.topology,
            config=self.config,
            next_probe_ms=self.next_probe_ms,
            next_probe_reason=self.next_probe_reason,
            reasons=self.result.reasons if self.result else (),
            last_rebalance_ms=self.last_rebalance_ms,
            last_rebalance_trigger=self.last_trigger,
            assignment_error=self.assignment_error,
        )

    def route(self, store: str, partition: int, max_lag: int | None, now_ms: int) -> RouteAnswer:
        """KIP-535 "Proposed Changes", step 4: the active if alive, else the most in-sync standbys
        within the caller's acceptable lag. The lag of a store partition is its task's lag (summed
        over the task's logged stores, an upper bound for each). A member without an endpoint
        serves no queries: its replica is not offered (an active without one leaves the answer
        to the standbys)."""
        sub = self.topology.store_subtopology(store) if self.topology else None
        if sub is None:
            return RouteAnswer(ErrorCode.UNKNOWN_STATE_STORE, f"store {store!r} is not in group {self.group_id!r}'s topology")
        task = TaskId(sub.id, partition)
        if not 0 <= partition < sub.partition_count:
            return RouteAnswer(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition} of store {store!r}: it has "
                                                            f"{sub.partition_count}", task)
        if self.result is None:  # said so: read as a bad partition, a large-group audit's queries looked broken
            return RouteAnswer(ErrorCode.UNKNOWN_PARTITION, f"no assignment for partition {partition} of store {store!r} "
                                                            "now: the group is rebalancing (or its assignor failed); retry", task)
        by_pid = {m.process_id: m for m in self.members.values()}
        hosts: list[QueryHost] = []
        for pid, assignment in sorted(self.result.clients.items()):
            member = by_pid.get(pid)
            if member is None or member.endpoint is None:
                continue
            lag = member.lags.get(task, UNKNOWN)
            age = max(0, now_ms - member.lags_updated_ms)
            if task in assignment.active:
                return RouteAnswer(ErrorCode.NONE, "", task, (QueryHost(pid, member.endpoint, Role.ACTIVE.value, lag, age),))
            role = Role.STANDBY if task in assignment.standby else Role.WARMUP if task in assignment.warmup else None
            if role is None:
                continue
            behind = lag.known_offsets
            if behind is None or (max_lag is not None and behind > max_lag):
                continue
            hosts.append(QueryHost(pid, member.endpoint, role.value, lag, age))
        hosts.sort(key=lambda h: (h.lag.known_offsets, h.process_id))
        return RouteAnswer(ErrorCode.NONE, "", task, tuple(hosts))


def _rekeyed(result: AssignmentResult | None, old_pid: str, new_pid: str) -> AssignmentResult | None:
    if result is None or old_pid not in result.clients:
        return result
    clients = dict(result.clients)
    clients[new_pid] = clients.pop(old_pid)
    return dataclasses.replace(result, clients=MappingProxyType(clients))


def _with_warmups(assignment: ClientAssignment) -> tuple[TaskId, ...]:
    """A member's standbys as the member sees them: warm-ups included (KIP-441 "Rejected
    Alternatives": a warm-up is a standby for the worker), sorted."""
    if not assignment.warmup:
        return assignment.standby
    return tuple(sorted(set(assignment.standby) | set(assignment.warmup)))


#: Superseded member ids a group remembers, to fence them rather than let them rejoin
FENCED_MEMBERS_KEPT = 64

_MESSAGES: Mapping[ErrorCode, str] = {
    ErrorCode.NONE: "",
    ErrorCode.UNKNOWN_MEMBER_ID: "not a member of the group: rejoin with an empty member id",
    ErrorCode.FENCED_INSTANCE_ID: "another member holds this group_instance_id",
    ErrorCode.REBALANCE_IN_PROGRESS: "a rebalance is in progress: rejoin",
}
