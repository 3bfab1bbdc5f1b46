"""The runtime: runs the pure group state machine against the real world.

It owns what the state machine must not touch: the per-group locks (groups are independent),
the per-member cleanup mutex (KIP-441 "Race between assignment and state cleanup" asks for a
mutex between the member's rebalance and its cleanup; here one member's calls and its
session expiry or leave are serialised the same way, so an expiry never races a join in
flight), the parked-call futures, the keyed timers, the assignor run (off the event loop),
persistence before replies, the rebalance log and telemetry. Lock order: member, then group;
no lock is held across an I/O await or the assignor: persistence is awaited after the locks
are released (writes are ordered, so a later reply can never overtake an earlier write), and
a ``ComputeAssignment`` runs after them, its result re-entering the state machine under the
group's lock like any other event (``Group.assignment_computed`` drops a stale generation).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import structlog

import assignor
from assignor.model import AssignmentProblem, AssignmentResult
from server.assignor_runner import AssignorRunner
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
from server.group import Group, GroupSettings, GroupState
from server.model import (
    ErrorCode,
    GroupOverview,
    GroupView,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    NotCoordinator,
    ReplicaInfo,
    RouteAnswer,
    StoreUnavailable,
    SyncGroupRequest,
    SyncGroupResponse,
)
from server.observability import Metrics, RebalanceLog, Telemetry
from server.store import Store, restore
from server.timers import Clock, Timers

log = structlog.get_logger(__name__)

Handler = Callable[[Group, int, int], Outcome]  # (group, call_id, now_ms) -> Outcome
#: The edge's checks that need the group (capacity, ownership): run under the group's lock before
#: the handler, with the group (None when it does not exist yet) and the number of groups; they
#: refuse by raising, and then nothing has changed.
Admit = Callable[[Group | None, Mapping[str, Group]], None]


class _KeyedLocks:
    """asyncio locks created on demand and dropped when nobody holds or waits for them."""

    def __init__(self) -> None:
        self._locks: dict[Any, tuple[asyncio.Lock, int]] = {}

    def acquire(self, key: Any) -> _Held:
        return _Held(self, key)

    async def _enter(self, key: Any) -> None:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._release_user(key)
            raise

    def _exit(self, key: Any) -> None:
        self._locks[key][0].release()
        self._release_user(key)

    def _release_user(self, key: Any) -> None:
        lock, users = self._locks[key]
        if users <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)


class _Held:
    def __init__(self, owner: _KeyedLocks, key: Any) -> None:
        self._owner, self._key = owner, key

    async def __aenter__(self) -> None:
        await self._owner._enter(self._key)

    async def __aexit__(self, *exc: object) -> None:
        self._owner._exit(self._key)


class Coordinator:
    """Every group of this server, and the machinery that runs their handlers."""

    def __init__(
        self,
        settings: GroupSettings,
        clock: Clock,
        timers: Timers,
        store: Store | None = None,
        rebalance_log: RebalanceLog | None = None,
        metrics: Metrics | None = None,
        assign: Callable[[AssignmentProblem], AssignmentResult] = assignor.solve,
        runner: AssignorRunner | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.timers = timers
        self.store = store
        self.rebalance_log = rebalance_log
        self.metrics = metrics or Metrics()
        self.telemetry = Telemetry(self.metrics)
        self.assign = runner or AssignorRunner(assign, processes=0)
        self.groups: dict[str, Group] = {}
        self._group_locks = _KeyedLocks()
        self._member_locks = _KeyedLocks()
        self._calls: dict[int, asyncio.Future] = {}
        self._call_ids = itertools.count(1)
        self._finishing: set[asyncio.Task] = set()  # ``_finish`` and the assignor runs it starts
        self.draining = False
        self.loaded = False
        #: Several replicas over PostgreSQL: which groups this one owns (server.ownership).
        self.ownership: Any = None
        #: How clients reach this server (FindCoordinator's answer when it is alone).
        self.replica = ReplicaInfo("", "")

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load every group from the store and re-arm its timers."""
        if self.store is not None:
            for document in await self.store.load_all():
                group = restore(document, self.settings)
                self.groups[group.group_id] = group
                await self._rearm(group)
            self.store.start()
        if self.rebalance_log is not None:
            self.rebalance_log.start()
        self.loaded = True
        log.info("server.state.loaded", groups=len(self.groups))

    async def _rearm(self, group: Group) -> None:
        """A restored group's timers, from its state machine (``Group.restored``), and its
        writes (a group restored mid-sync rebalances) followed up as any handler's."""
        writes, _replies, _computes = await self._apply(group, group.restored(self.clock.now_ms()).effects)
        if writes:
            self._spawn(self._written(group.group_id, writes))

    async def adopt(self, group_id: str, document: dict[str, Any] | None) -> None:
        """This replica took ``group_id``'s lease: serve it from its last durable snapshot."""
        async with self._group_locks.acquire(group_id):
            if document is None:
                self.groups.pop(group_id, None)
                return
            group = restore(document, self.settings)
            self.groups[group_id] = group
            await self._rearm(group)

    async def forget(self, group_id: str) -> None:
        """Another replica owns ``group_id`` now: stop serving it (timers off, parked joins
        answered COORDINATOR_NOT_AVAILABLE so their members look for the owner)."""
        async with self._group_locks.acquire(group_id):
            group = self.groups.pop(group_id, None)
            if group is None:
                return
            _writes, replies, _computes = await self._apply(group, group.unload().effects)
            self.metrics.forget_group(group_id)
        self._deliver(replies)

    async def check_owner(self, group_id: str) -> None:
        """Raise NotCoordinator when another replica owns the group (read-only calls)."""
        if self.ownership is not None:
            await self.ownership.ensure(group_id, create=False)

    async def find_coordinator(self, group_id: str) -> ReplicaInfo:
        """FindCoordinator: the owner among the replicas, or this server when it is alone."""
        if self.ownership is not None:
            return await self.ownership.find(group_id)
        return self.replica

    def _owner(self, group_id: str) -> Any:
        return self.ownership.owner_of(group_id) if self.ownership is not None else None

    async def drain(self) -> None:
        """Graceful shutdown: refuse new calls, make every pending write durable, then answer
        the parked joins (COORDINATOR_NOT_AVAILABLE: retry on the next server)."""
        self.draining = True
        if self.store is not None:
            await self.store.flush()
        for group_id in sorted(self.groups):
            await self._run(group_id, "", lambda g, _c, _n: g.unload())

    async def close(self) -> None:
        self.timers.cancel_all()
        self.assign.close()
        if self.store is not None:
            await self.store.close()
        if self.rebalance_log is not None:
            await self.rebalance_log.close()
        for future in self._calls.values():
            if not future.done():
                future.cancel()
        self._calls.clear()
        for task in list(self._finishing):
            task.cancel()

    # ---- the group RPCs ----------------------------------------------------------------------

    async def join(self, request: JoinGroupRequest, admit: Admit | None = None) -> JoinGroupResponse:
        return await self._run(request.group_id, request.member_id, lambda g, c, n: g.join(request, c, n), create=True, parkable=True, admit=admit)

    async def sync(self, request: SyncGroupRequest, admit: Admit | None = None) -> SyncGroupResponse:
        return await self._run(request.group_id, request.member_id, lambda g, _c, n: g.sync(request, n), admit=admit)

    async def heartbeat(self, request: HeartbeatRequest, admit: Admit | None = None) -> HeartbeatResponse:
        return await self._run(request.group_id, request.member_id, lambda g, _c, n: g.heartbeat(request, n), admit=admit)

    async def leave(self, request: LeaveGroupRequest, admit: Admit | None = None) -> LeaveGroupResponse:
        return await self._run(request.group_id, request.member_id, lambda g, _c, n: g.leave(request, n), admit=admit)

    def describe(self, group_id: str) -> GroupView | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        view = group.describe()
        return dataclasses.replace(view, owner=self._owner(group_id)) if self.ownership is not None else view

    async def expire(self, group_id: str) -> bool:
        """Remove an Empty group from memory and from the store (server/retention.py). The group
        lock is held until the removal is queued, so a JoinGroup that re-creates the group
        afterwards is persisted after the deletion."""
        async with self._group_locks.acquire(group_id):
            group = self.groups.get(group_id)
            if group is None or group.state is not GroupState.EMPTY or group.members:
                return False
            del self.groups[group_id]
            self.metrics.forget_group(group_id)
            forgotten = self.store.forget(group_id) if self.store is not None else None
        if forgotten is not None:
            await forgotten
        return True

    def list_groups(self) -> list[GroupOverview]:
        """This replica's groups; none while its leases are not valid (resumed after a pause, it
        listed groups another replica had taken over until its renewal unloaded them)."""
        if self.ownership is not None and not self.ownership.valid():
            return []
        overviews = [self.groups[g].overview() for g in sorted(self.groups)]
        if self.ownership is None:
            return overviews
        return [dataclasses.replace(o, owner=self._owner(o.group_id)) for o in overviews]

    def route(self, group_id: str, store: str, partition: int, max_lag: int | None) -> RouteAnswer:
        group = self.groups.get(group_id)
        if group is None:
            return RouteAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} not found")
        return group.route(store, partition, max_lag, self.clock.now_ms())

    # ---- running handlers --------------------------------------------------------------------

    async def _run(
        self, group_id: str, member_id: str, handler: Handler, *, create: bool = False, parkable: bool = False, admit: Admit | None = None
    ) -> Any:
        call_id = 0
        future: asyncio.Future | None = None
        if parkable:
            call_id = next(self._call_ids)
            future = asyncio.get_running_loop().create_future()
            self._calls[call_id] = future
        try:
            if self.ownership is not None and not self.draining:  # a drain only unloads
                await self.ownership.ensure(group_id, create=create)
            member_key = (group_id, member_id)
            if member_id:
                await self._member_locks._enter(member_key)
            try:
                async with self._group_locks.acquire(group_id):
                    group = self.groups.get(group_id)
                    created = group is None
                    if admit is not None:
                        admit(group, self.groups)
                    if group is None:
                        if not create:
                            return _unknown_group(handler)
                        if self.ownership is not None and self.ownership.lease(group_id) is None:
                            raise NotCoordinator(None, f"group {group_id!r} moved while this call waited")
                        group = self.groups[group_id] = Group(group_id, self.settings)
                    outcome = handler(group, call_id, self.clock.now_ms())
                    writes, replies, computes = await self._apply(group, outcome.effects)
                    if created and not group.members and group.generation == 0 and not writes:
                        del self.groups[group_id]  # a refused first join leaves no empty group behind
            finally:
                if member_id:
                    self._member_locks._exit(member_key)
            if writes or replies or computes:  # most heartbeats have none
                await asyncio.shield(self._spawn(self._finish(group_id, writes, replies, computes)))
            if outcome.response is not None or future is None:
                return outcome.response
            return await future
        finally:
            if parkable:
                self._calls.pop(call_id, None)

    async def _apply(self, group: Group, effects: list) -> tuple[list[asyncio.Future], list[Reply], list[ComputeAssignment]]:
        """Carry out effects in order, under the group's lock; the assignor runs are handed back,
        to run once the locks are released (``_compute``)."""
        writes: list[asyncio.Future] = []
        replies: list[Reply] = []
        computes: list[ComputeAssignment] = []
        for effect in effects:
            match effect:
                case ScheduleTimer(key=key, deadline_ms=deadline):
                    self.timers.schedule(str(key), deadline, self._timer_callback(key))
                case CancelTimer(key=key):
                    self.timers.cancel(str(key))
                case Reply():
                    replies.append(effect)
                case Persist(snapshot=state, required=required):
                    if self.store is not None:
                        # the frozen state the handler put in the effect, requested before the
                        # group's next handler runs, so that the store sees a group's snapshots
                        # in order; the store's writer encodes only the latest
                        written = self.store.request(state.group_id, state)
                        writes.append(written if required else asyncio.ensure_future(self._tolerated(state.group_id, written)))
                case ComputeAssignment():
                    computes.append(effect)
                case AppendRebalanceLog():
                    if self.rebalance_log is not None:
                        self.rebalance_log.append(effect.record)
                case Event(name=name, fields=fields):
                    self.telemetry.record(group.group_id, group.generation, len(group.members), name, fields)
                case _:
                    raise TypeError(f"unknown effect {effect!r}")
        return writes, replies, computes

    async def _finish(self, group_id: str, writes: list[asyncio.Future], replies: list[Reply],
                      computes: list[ComputeAssignment]) -> None:
        """What a handler's effects set going once the locks are released: the writes, then the
        replies that wait for them, then the assignor runs. A task of its own, which the call
        that caused them does not take down when it goes away (its client's deadline, a worker
        killed): other members' parked joins were never answered (a helper's audit: the run of
        the assignor was cancelled with the JoinGroup that had released the barrier, and the
        group stayed in CompletingRebalance, no timer armed to end it)."""
        await self._written(group_id, writes)
        self._deliver(replies)
        for compute in computes:
            self._spawn(self._compute(compute))

    async def _written(self, group_id: str, writes: list[asyncio.Future]) -> None:
        """Wait for the writes; one fenced, or not durable, lets the group go (the next call
        loads it again, or finds its owner) and raises."""
        if not writes:
            return
        try:
            await asyncio.gather(*writes)
        except NotCoordinator as error:  # fenced, or not durable: answer nothing of it
            if self.ownership is not None:
                await self.ownership.lost(group_id, fenced=not isinstance(error, StoreUnavailable))
            raise

    async def _tolerated(self, group_id: str, written: asyncio.Future) -> None:
        """A write no reply depends on (``Persist.required`` False): waited for like any, its
        failure logged (a fenced one still lets the group go) but never the replies'."""
        try:
            await self._written(group_id, [written])
        except Exception as error:
            log.warning("group.write.failed", group_id=group_id, error=repr(error))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.ensure_future(work)
        self._finishing.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._finishing.discard(task)
        if not task.cancelled() and isinstance(task.exception(), Exception) \
                and not isinstance(task.exception(), NotCoordinator):
            log.error("group.effects.failed", error=repr(task.exception()))

    async def _compute(self, effect: ComputeAssignment) -> None:
        """Build the problem in a worker thread (a large group's tasks take about a second) and
        run the assignor off the event loop, holding no lock; then hand the result back to the
        group's state machine as an event of its own."""
        started = time.perf_counter()
        problem: AssignmentProblem | None = None
        result: AssignmentResult | None = None
        error = ""
        try:
            problem = await asyncio.to_thread(effect.inputs.build)
            result = await self.assign(problem)
        except Exception as exc:  # the assignor's failure is the group's ASSIGNMENT_ERROR
            error = f"{type(exc).__name__}: {exc}"
            log.error("group.assignor.failed", group_id=effect.group_id, generation=effect.generation, error=error)
        compute_ms = (time.perf_counter() - started) * 1000.0
        with contextlib.suppress(NotCoordinator):  # the group moved to another replica meanwhile
            await self._run(effect.group_id, "", lambda g, _c, n: g.assignment_computed(
                effect.generation, problem, result, error, compute_ms, n))

    def _deliver(self, replies: list[Reply]) -> None:
        for reply in replies:
            future = self._calls.get(reply.call_id)
            if future is not None and not future.done():
                future.set_result(reply.response)

    def _timer_callback(self, key: TimerKey):
        async def fire() -> None:
            try:
                await run()
            except NotCoordinator:
                # Refused by the local validity check (a pause, a slow renewal) while the group is
                # still this replica's: fire again once a renewal may have restored it, or a
                # session of a dead member never expired. Moved away: the new owner arms its own.
                if self.ownership is not None and self.ownership.lease(key.group_id) is not None \
                        and key.group_id in self.groups:
                    retry_ms = self.clock.now_ms() + max(self.ownership.lease_ms // 3, 1)
                    self.timers.schedule(str(key), retry_ms, self._timer_callback(key))

        async def run() -> None:
            if key.kind is TimerKind.SESSION:
                await self._run(key.group_id, key.member_id, lambda g, _c, n: g.session_expired(key.member_id, n))
            elif key.kind is TimerKind.JOIN:
                await self._run(key.group_id, "", lambda g, _c, n: g.join_deadline(n))
            else:
                await self._run(key.group_id, "", lambda g, _c, n: g.probe_due(n))

        return fire


def _unknown_group(handler: Handler) -> Any:
    """Calls on a group this server has never seen: the member is unknown (Kafka's answer)."""
    probe = Group("")
    return handler(probe, 0, 0).response
