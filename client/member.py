"""The asyncio group member: what a stream worker embeds to take part in a remote-led group.

One ``GroupMember`` per worker process runs Kafka's classic group protocol against the remote
leader (``remote_leader.v1.GroupLeader``): JoinGroup → SyncGroup → a Heartbeat loop, rejoining
when the leader answers REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID. Around
that loop sit the worker-side duties of KIP-441:

- lags: each JoinGroup carries the lag source's task lags; each heartbeat carries fresh lags of
  the assigned tasks, so the leader sees warm-ups and standbys catch up (its early probe);
- "Race between assignment and state cleanup": the member takes the state-cleanup lock before it
  computes the lags it reports and releases it only after the resulting assignment has been
  applied (the worker's callback has returned), so ``client.state.StateCleaner`` can never delete
  state that was just reported and received;
- the worker learns its assignment through one callback with the ``AssignmentChange``.

Transport faults are retried twice over: grpc's own retry policy (service config) for a brief
UNAVAILABLE, then the member's backoff with jitter for longer outages. Fatal protocol outcomes
(fenced static member, inconsistent topology or config, invalid session timeout, a requested
shutdown) stop the member with ``MemberError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import inspect
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import grpc
import structlog

from assignor.cluster import MemberAssignment
from assignor.lag import MAX_LONG, Lag
from assignor.model import MAX_INT, AssignmentConfig, HostInfo, InvalidInput, Role, TaskId
from assignor.topology import Topology
from client import codec
from client.assignment import EMPTY_ASSIGNMENT, AssignmentChange, diff
from client.coordinator import MOVED, CoordinatorLink
from client.lags import MAX_LAGS_AGE_MS, LagInfo, LagSource, lags_age_ms
from client.metadata import (
    KeyQueryMetadata,
    StreamPartitioner,
    StreamsMetadataState,
    local_store_partition_lags,
    partition_for_key,
    store_task,
)
from client.state import StateCleanupLock
from remote_leader.tls import PLAINTEXT, ClientTls
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc

log = structlog.get_logger(__name__)

LATEST_SUPPORTED_VERSION = 2
"""The subscription/assignment metadata version this client speaks (group_leader.proto history)."""

SERVICE_NAME = "remote_leader.v1.GroupLeader"

RETRY_SERVICE_CONFIG = json.dumps({
    "methodConfig": [{
        "name": [{"service": SERVICE_NAME}],
        "retryPolicy": {
            "maxAttempts": 4,
            "initialBackoff": "0.05s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }],
})
"""grpc retries a call that failed with UNAVAILABLE before any response (connection refused or
reset, server draining): every GroupLeader call is safe to resend — JoinGroup and SyncGroup are
keyed by member id and generation, Heartbeat and LeaveGroup are idempotent."""

_TRANSIENT = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
})
_REJOIN = frozenset({epb.ERROR_CODE_REBALANCE_IN_PROGRESS, epb.ERROR_CODE_ILLEGAL_GENERATION})
_FATAL = frozenset({
    epb.ERROR_CODE_FENCED_INSTANCE_ID, epb.ERROR_CODE_INCONSISTENT_GROUP_PROTOCOL,
    epb.ERROR_CODE_INVALID_SESSION_TIMEOUT, epb.ERROR_CODE_INVALID_GROUP_ID,
})
_LOCK_HOLDER = "member"
#: How long a JoinGroup (and SyncGroup) waits, beyond the rebalance timeout, for the leader to
#: compute the assignment: seconds for the largest groups. Given up sooner, the retry is a rejoin
#: that starts the rebalance over, and a group of 50,000 tasks whose assignment took 18 s never
#: formed (a large-group audit's find).
ASSIGNMENT_GRACE_MS = 60_000
CLOSE_GRACE_S = 5.0
"""How long close() waits for a cancelled assignment callback to finish."""
#: MOVED as the names a RoutingError carries.
_MOVED_NAMES = frozenset(epb.ErrorCode.Name(code) for code in MOVED)


#: Keepalive pings while a call is out (``server.app`` accepts them this often): a JoinGroup
#: parked at a replica that was then paused (SIGSTOP, a stalled VM) waited out its deadline, more
#: than a minute, while another replica had long taken the group over (an HA audit's find).
#: Unanswered for KEEPALIVE_TIMEOUT_MS, the connection is closed; grpc's retry then tries to
#: connect again, for CONNECT_TIMEOUT_MS (grpc's default is 20 s: a stopped process still
#: accepts TCP, it never sends its HTTP/2 settings), then the call fails UNAVAILABLE and the
#: member looks for the group's owner (``client.coordinator``): 15 s in all, measured.
KEEPALIVE_TIME_MS = 5_000
KEEPALIVE_TIMEOUT_MS = 5_000
CONNECT_TIMEOUT_MS = 5_000
_KEEPALIVE = [("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS), ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
              ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS), ("grpc.http2.max_pings_without_data", 0),
              ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS)]


def open_channel(target: str, options: list[tuple[str, Any]] | None = None, tls: ClientTls | None = None) -> grpc.aio.Channel:
    """A channel with the GroupLeader retry policy and keepalive pings switched on: plaintext, or
    TLS / mTLS / bearer token as ``tls`` says (docs/security.md)."""
    return (tls or PLAINTEXT).aio_channel(
        target, options=[("grpc.enable_retries", 1), ("grpc.service_config", RETRY_SERVICE_CONFIG), *_KEEPALIVE,
                         *(options or [])])


class MemberError(Exception):
    """A fatal outcome: the member stopped and will not rejoin by itself."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _reportable(lag: Lag | int) -> Lag:
    """A lag source's value as a ``Lag`` that fits the wire (an int64), else ValueError."""
    lag = Lag.coerce(lag)
    if lag.to_wire() > MAX_LONG:
        raise ValueError(f"a lag of {lag.offsets} offsets does not fit an int64")
    return lag


class MemberState(enum.StrEnum):
    CREATED = "created"
    JOINING = "joining"  # JoinGroup/SyncGroup in flight; the cleanup lock is held
    STABLE = "stable"  # holds an assignment and heartbeats
    CLOSED = "closed"


def _positive(name: str, value: object, minimum: int = 1, maximum: int = MAX_INT) -> None:
    """An integer in range; the default maximum is the wire's int32 (JoinGroupRequest)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(name, f"expected an integer >= {minimum}, got {value!r}")
    if value > maximum:
        raise InvalidInput(name, f"must be <= {maximum}, got {value}")


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """A member's identity and timing. ``assignment_config`` travels in the subscription; every
    member of a group must send the same one (the leader refuses a disagreeing newcomer)."""

    group_id: str
    topology: Topology
    process_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    group_instance_id: str | None = None
    endpoint: HostInfo | None = None
    rack: str | None = None
    client_tags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    num_threads: int = 1
    assignment_config: AssignmentConfig = AssignmentConfig()
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 0
    heartbeat_interval_ms: int = 3_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 5_000

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise InvalidInput("group_id", "expected a non-empty string")
        try:
            uuid.UUID(self.process_id)
        except (ValueError, TypeError, AttributeError):
            raise InvalidInput("process_id", f"expected a UUID (the worker process id), got {self.process_id!r}") from None
        if self.group_instance_id is not None and (not isinstance(self.group_instance_id, str) or not self.group_instance_id):
            raise InvalidInput("group_instance_id", "expected a non-empty string or none")
        # the types the member uses only once it runs: refused here, named, not by a traceback later
        if not isinstance(self.topology, Topology):
            raise InvalidInput("topology", f"expected an assignor.topology.Topology, got {self.topology!r}")
        if self.endpoint is not None:
            endpoint = self.endpoint
            if not isinstance(endpoint, HostInfo) or not isinstance(endpoint.host, str) or not endpoint.host \
                    or isinstance(endpoint.port, bool) or not isinstance(endpoint.port, int) or not 0 < endpoint.port < 65536:
                raise InvalidInput("endpoint", f"expected HostInfo(host, port) with a port in 1..65535 "
                                               f"(HostInfo.parse('host:port')), got {endpoint!r}")
        if self.rack is not None and not isinstance(self.rack, str):
            raise InvalidInput("rack", f"expected a string or none, got {self.rack!r}")
        if not isinstance(self.client_tags, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.client_tags.items()):
            raise InvalidInput("client_tags", f"expected a mapping of strings to strings, got {self.client_tags!r}")
        if not isinstance(self.assignment_config, AssignmentConfig):
            raise InvalidInput("assignment_config", f"expected an AssignmentConfig, got {self.assignment_config!r}")
        _positive("num_threads", self.num_threads)
        _positive("session_timeout_ms", self.session_timeout_ms)
        _positive("rebalance_timeout_ms", self.rebalance_timeout_ms, minimum=0)
        _positive("heartbeat_interval_ms", self.heartbeat_interval_ms)
        _positive("retry_backoff_ms", self.retry_backoff_ms, maximum=MAX_LONG)
        _positive("retry_backoff_max_ms", self.retry_backoff_max_ms, minimum=self.retry_backoff_ms, maximum=MAX_LONG)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidInput("heartbeat_interval_ms", "must be below session_timeout_ms (Kafka: about a third)")

    @property
    def join_timeout_s(self) -> float:
        """JoinGroup long-polls for up to the rebalance timeout, 5 s more as Kafka's consumer
        allows, and then the time the leader computes the assignment before it answers, which a
        Kafka leader spends after its join (``ASSIGNMENT_GRACE_MS``)."""
        return (max(self.rebalance_timeout_ms, self.session_timeout_ms) + 5_000 + ASSIGNMENT_GRACE_MS) / 1000


@dataclass(frozen=True, slots=True)
class RoutedHost:
    """One candidate of a routed query: KIP-535's host with the lag the leader last heard of."""

    host: HostInfo
    process_id: str
    role: Role
    lag: int
    lag_age_ms: int


@dataclass(frozen=True, slots=True)
class RouteResult:
    task: TaskId
    partition: int
    hosts: tuple[RoutedHost, ...]


class RoutingError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


_ROLES = {1: Role.ACTIVE, 2: Role.STANDBY, 3: Role.WARMUP}


async def route_query(
    stub: pb_grpc.GroupLeaderStub,
    group_id: str,
    topology: Topology,
    store: str,
    *,
    key: Any = None,
    partition: int | None = None,
    max_lag: int | None = None,
    serializer: Callable[[Any], bytes] | None = None,
    partitioner: StreamPartitioner | None = None,
    timeout_s: float = 5.0,
) -> RouteResult:
    """Ask the leader where to send a query (GroupLeader.RouteQuery): the active host if its
    member is alive, else the standbys within ``max_lag``, most caught up first. A router need
    not be a member; it needs the topology to find the key's partition (KIP-535)."""
    if (key is None) == (partition is None):
        raise InvalidInput("key", "give a key or a partition, exactly one")
    if partition is None:
        partition = partition_for_key(topology, store, key, serializer, partitioner)
    else:  # checked here as for query metadata: the leader refused a partition out of range otherwise
        store_task(topology, store, partition)
    if max_lag is not None:
        _positive("max_lag", max_lag, minimum=0, maximum=MAX_LONG)
    request = pb.RouteQueryRequest(group_id=group_id, store=store, partition=partition)
    if max_lag is not None:
        request.max_lag = max_lag
    response = await stub.RouteQuery(request, timeout=timeout_s)
    if response.error_code != epb.ERROR_CODE_NONE:
        raise RoutingError(epb.ErrorCode.Name(response.error_code), response.error_message)
    hosts = tuple(
        RoutedHost(codec.host_from_proto(h.host), h.process_id, _ROLES.get(h.role, Role.STANDBY), h.lag, h.lag_age_ms)
        for h in response.hosts
    )
    return RouteResult(codec.task_from_proto(response.task), partition, hosts)


AssignmentCallback = Callable[[AssignmentChange], Awaitable[None] | None]


class GroupMember:
    """One worker process's membership in one group.

    ``await member.start()`` begins joining in the background; ``wait_for_assignment`` waits
    for one; ``close()`` leaves (or, for a static member that will come back, keeps its place
    until its session times out, KIP-345).
    """

    def __init__(
        self,
        target: str | grpc.aio.Channel,
        config: MemberConfig,
        lag_source: LagSource,
        *,
        on_assignment: AssignmentCallback | None = None,
        lock: StateCleanupLock | None = None,
        rng: random.Random | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self.config = config
        self.lag_source = lag_source
        self.lock = lock or StateCleanupLock()
        self._on_assignment = on_assignment
        # ``target``: a channel, or host:port[,host:port...] of one server or of several replicas.
        self._link = CoordinatorLink(target, config.group_id, lambda address: open_channel(address, tls=tls))
        # How the member's own channels connect, for the TLS hint; unknown for a caller's channel.
        self._tls = (tls or PLAINTEXT) if isinstance(target, str) else None
        self._rng = rng or random.Random(config.process_id)
        self._log = log.bind(group_id=config.group_id, process_id=config.process_id)
        self.member_id = ""
        self.generation = -1
        self.state = MemberState.CREATED
        self._version = LATEST_SUPPORTED_VERSION
        self._assignment = EMPTY_ASSIGNMENT
        self._metadata: StreamsMetadataState | None = None
        self._lock_held = False
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed: asyncio.Task | None = None  # close()'s work, once: ``close``
        self._last_lags: tuple[Mapping[TaskId, Lag], float] | None = None  # ``_measured_lags``
        self._watchers: set[asyncio.Queue[AssignmentChange | None]] = set()
        self.error: BaseException | None = None
        self.rebalances = 0
        #: time.monotonic() of the last heartbeat the leader accepted (failover measurements).
        self.heartbeat_ok_at = 0.0
        self._rejoin_now = False
        # The assignment being applied (the callback, the lock's release) while heartbeats go on
        self._applying: asyncio.Task | None = None
        self._wake = asyncio.Event()  # ends the wait between heartbeats early (close, a rejoin)

    # ---- public surface -------------------------------------------------------------------

    @property
    def _stub(self) -> pb_grpc.GroupLeaderStub:
        """The stub of the replica that owns the group (client.coordinator)."""
        return self._link.stub

    @property
    def _channel(self) -> grpc.aio.Channel:
        return self._link.channel

    @property
    def assignment(self) -> MemberAssignment:
        return self._assignment

    def assigned_tasks(self) -> frozenset[TaskId]:
        """Every task the member holds a replica of: what the state cleaner must keep."""
        return self._assignment.all_tasks()

    @property
    def metadata(self) -> StreamsMetadataState | None:
        return self._metadata

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"member-{self.config.process_id}")

    async def wait_for_assignment(
        self, predicate: Callable[[MemberAssignment], bool] = lambda a: a.generation >= 0, timeout: float | None = None
    ) -> MemberAssignment:
        async def wait() -> MemberAssignment:
            while True:
                if self.error is not None:
                    raise self.error
                if self.state == MemberState.STABLE and predicate(self._assignment):
                    return self._assignment
                if self.state == MemberState.CLOSED:
                    raise MemberError("CLOSED", "the member is closed")
                await self._changed.wait()

        return await asyncio.wait_for(wait(), timeout)

    def subscribe(self) -> asyncio.Queue[AssignmentChange | None]:
        """A queue of every applied assignment change from now on; ``None`` when the member stops."""
        queue: asyncio.Queue[AssignmentChange | None] = asyncio.Queue()
        self._watchers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[AssignmentChange | None]) -> None:
        self._watchers.discard(queue)

    def query_metadata_for_key(self, store: str, key: Any, serializer: Callable[[Any], bytes] | None = None,
                               partitioner: StreamPartitioner | None = None) -> KeyQueryMetadata:
        return self._require_metadata().query_metadata_for_key(store, key, serializer, partitioner)

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """KIP-535 ``allLocalStorePartitionLags``: the lags of this instance's assigned store partitions."""
        return local_store_partition_lags(self.lag_source.store_partition_lags(), self._query_topology, self._assignment)

    @property
    def _query_topology(self) -> Topology:
        """What KIP-535 queries read: the member's topology at the group's partition counts once
        an assignment brought them (``codec.cluster_from_proto``)."""
        return self._metadata.topology if self._metadata is not None else self.config.topology

    async def route_query(self, store: str, *, key: Any = None, partition: int | None = None,
                          max_lag: int | None = None, serializer: Callable[[Any], bytes] | None = None,
                          partitioner: StreamPartitioner | None = None) -> RouteResult:
        for _hop in range(3):
            try:
                return await route_query(self._stub, self.config.group_id, self._query_topology, store, key=key,
                                         partition=partition, max_lag=max_lag, serializer=serializer, partitioner=partitioner)
            except RoutingError as error:  # the group moved to another replica: ask its owner
                if error.code not in _MOVED_NAMES:
                    raise
                if not await self._link.rediscover():
                    raise
        raise RoutingError("ERROR_CODE_NOT_COORDINATOR", "the group's owner keeps moving")

    async def close(self, *, leave: bool = True, will_come_back: bool = False) -> None:
        """Stop. Leaves the group unless told not to, or unless this static member will come back
        (then the leader keeps its place for the session timeout: no rebalance on a restart).
        An assignment callback still running is cancelled and given ``CLOSE_GRACE_S`` to finish;
        one that ignores the cancellation is left running, and the cleanup lock released anyway.

        The work runs once, in a task of its own: a second close() waits for the first (it
        released the lock early and closed the channel under it), and a close() cancelled during
        the grace still finishes (it left the lock held and the member in the group)."""
        if self._closed is None:
            if self.state == MemberState.CLOSED and self._task is None:
                return
            self._closed = asyncio.get_running_loop().create_task(self._close(leave, will_come_back))
        await asyncio.shield(self._closed)

    async def _close(self, leave: bool, will_come_back: bool) -> None:
        self._closing.set()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._stop_applying()
        static_return = will_come_back and self.config.group_instance_id is not None
        if will_come_back and self.config.group_instance_id is None:
            self._log.warning("member.close.dynamic_cannot_come_back")
        if leave and not static_return and self.member_id:
            request = pb.LeaveGroupRequest(group_id=self.config.group_id, member_id=self.member_id)
            if self.config.group_instance_id is not None:
                request.group_instance_id = self.config.group_instance_id
            try:
                left = await self._stub.LeaveGroup(request, timeout=2.0)
                if left.error_code == epb.ERROR_CODE_NONE:
                    self._log.info("member.left", member_id=self.member_id)
                else:  # fenced, or dropped already: nothing left to leave
                    self._log.info("member.leave.refused", member_id=self.member_id,
                                   code=epb.ErrorCode.Name(left.error_code), message=left.error_message)
            except grpc.aio.AioRpcError as error:
                self._log.warning("member.leave.failed", code=error.code().name)
        self._release_lock()
        self._set_state(MemberState.CLOSED)
        for queue in self._watchers:
            queue.put_nowait(None)
        await self._link.close()

    # ---- the protocol loop -----------------------------------------------------------------

    def _set_state(self, state: MemberState) -> None:
        self.state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _run(self) -> None:
        try:
            while not self._closing.is_set():
                await self._join_and_sync()
                await self._heartbeat_until_rejoin()
                if self._applying is not None and not self._closing.is_set():
                    # A rejoin waits until the assignment is applied: it takes the lock again.
                    # Shielded, and not once closing (close's wake can win over its cancellation
                    # in asyncio.wait_for): stopping the apply is close()'s, within its grace.
                    await asyncio.shield(self._applying)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # surfaced, not swallowed: the worker sees member.error
            if isinstance(error, MemberError):
                self._log.error("member.stopped", code=error.code, message=error.message)
            else:
                self._log.exception("member.crashed")
            self.error = error
            self._set_state(MemberState.CLOSED)
            await self._stop_applying()
            self._release_lock()

    async def _stop_applying(self) -> None:
        """Cancel the assignment being applied and wait up to ``CLOSE_GRACE_S`` for its callback.
        One that swallows the cancellation (it held close() for good) is left to run on, logged,
        and changes nothing more (``_apply``); the caller releases the lock, so that a later
        member sharing it is not held back by a callback that may never return. The apply stays
        known until the wait is over: a caller interrupted meanwhile (close() cancelling the
        fatal path's wait) leaves it to the next, which waits its own grace."""
        applying = self._applying
        if applying is None:
            return
        if not applying.done():
            if not applying.cancelling():  # cancelled once: a second would cut its clean-up short
                applying.cancel()
            done, _ = await asyncio.wait({applying}, timeout=CLOSE_GRACE_S)
            if not done:
                self._log.warning("member.assignment.callback_abandoned", generation=self.generation,
                                  grace_s=CLOSE_GRACE_S)
        if self._applying is applying:
            self._applying = None

    async def _backoff(self, attempt: int) -> None:
        base = min(self.config.retry_backoff_max_ms, self.config.retry_backoff_ms * 2 ** min(attempt, 16))
        await asyncio.sleep(base * (0.5 + self._rng.random() / 2) / 1000)

    def _fatal_rpc(self, error: grpc.aio.AioRpcError) -> MemberError:
        return MemberError(error.code().name, error.details() or "")

    async def _take_lock(self) -> None:
        if not self._lock_held:
            await self.lock.acquire(_LOCK_HOLDER)
            self._lock_held = True

    def _release_lock(self) -> None:
        if self._lock_held:
            self._lock_held = False
            self.lock.release(_LOCK_HOLDER)

    def _measured_lags(self) -> tuple[Mapping[TaskId, Lag], int]:
        """The lag source's task lags and their age (``client.lags.lags_age_ms``). A broken
        source must not stop the member: while it fails (it raises, or gives a value that is no
        lag), the last good measurement goes on, growing older; before any, no state. Sending
        none at once wiped the member's lags at the leader, and a rebalance then took its
        actives away (an audit's find). Lags of an age the source cannot tell: measured now."""
        now = time.monotonic()
        try:
            lags = {task: _reportable(lag) for task, lag in self.lag_source.task_lags().items()}
        except Exception:
            self._log.exception("member.lags.failed")
            if self._last_lags is None:
                return {}, 0
            lags, measured_at = self._last_lags
            # aged after the log: a console traceback takes hundreds of ms to render, and lags
            # aged before it went out that much younger than they were (a flaky e2e test's find)
            return lags, min(int((time.monotonic() - measured_at) * 1000), MAX_LAGS_AGE_MS)
        try:
            age_ms = lags_age_ms(self.lag_source)
        except Exception:
            self._log.exception("member.lags_age.failed")
            age_ms = 0
        self._last_lags = (lags, now - age_ms / 1000)
        return lags, age_ms

    def _subscription(self) -> pb.Subscription:
        cfg = self.config
        lags, age_ms = self._measured_lags()
        # Only the topology's tasks (at the group's partition counts): the leader ignores the
        # others, but counts them against its --max-tasks-per-group, so a worker's stale task
        # directories got its JoinGroup refused and stopped the member (an audit's find).
        lags = self._query_topology.its_tasks(lags)
        subscription = pb.Subscription(
            version=self._version,
            latest_supported_version=LATEST_SUPPORTED_VERSION,
            process_id=cfg.process_id,
            client_tags=dict(cfg.client_tags),
            num_threads=cfg.num_threads,
            topology=codec.topology_to_proto(cfg.topology),
            lags=codec.lag_report(lags, age_ms),
            config=codec.config_to_proto(cfg.assignment_config),
        )
        if cfg.endpoint is not None:
            subscription.endpoint.CopyFrom(codec.host_to_proto(cfg.endpoint))
        if cfg.rack is not None:
            subscription.rack = cfg.rack
        return subscription

    def _with_instance(self, request: Any) -> Any:
        if self.config.group_instance_id is not None:
            request.group_instance_id = self.config.group_instance_id
        return request

    async def _join_and_sync(self) -> None:
        """Join until a SyncGroup hands back this generation's assignment, then apply it."""
        self._set_state(MemberState.JOINING)
        attempt = 0
        while True:
            # KIP-441: take the lock *before* computing the lags we report.
            await self._take_lock()
            request = self._with_instance(pb.JoinGroupRequest(
                group_id=self.config.group_id, member_id=self.member_id,
                session_timeout_ms=self.config.session_timeout_ms,
                rebalance_timeout_ms=self.config.rebalance_timeout_ms,
                subscription=self._subscription(),
            ))
            try:
                joined = await self._stub.JoinGroup(request, timeout=self.config.join_timeout_s)
            except grpc.aio.AioRpcError as error:
                if error.code() not in _TRANSIENT:
                    raise self._fatal_rpc(error) from None
                hint = self._tls.tls_hint(error) if self._tls is not None else None
                # a plaintext member at a TLS-only server retries forever: say why, loudly
                (self._log.warning if hint else self._log.info)(
                    "member.join.retry", code=error.code().name, attempt=attempt, message=error.details(),
                    **({"hint": hint} if hint else {}))
                await self._backoff(attempt)
                await self._link.rediscover()
                attempt += 1
                continue
            if not await self._handle_code(joined.error_code, joined.error_message, "join", attempt, joined):
                attempt += 1
                continue
            self.member_id, self.generation = joined.member_id, joined.generation_id
            synced = await self._sync()
            if synced is None:
                attempt += 1
                continue
            change = self._accept(synced)
            self._applying = asyncio.create_task(self._apply(change, synced.commonly_supported_version))
            return

    async def _sync(self) -> pb.Assignment | None:
        request = self._with_instance(pb.SyncGroupRequest(
            group_id=self.config.group_id, member_id=self.member_id, generation_id=self.generation))
        attempt = 0
        while True:
            try:
                response = await self._stub.SyncGroup(request, timeout=self.config.join_timeout_s)
            except grpc.aio.AioRpcError as error:
                if error.code() not in _TRANSIENT:
                    raise self._fatal_rpc(error) from None
                await self._backoff(attempt)
                await self._link.rediscover()
                attempt += 1
                continue
            if response.error_code == epb.ERROR_CODE_NONE:
                return response.assignment
            if response.error_code in MOVED:  # the group's new owner has the generation: sync there
                await self._moved(response, attempt)
                attempt += 1
                continue
            await self._handle_code(response.error_code, response.error_message, "sync", attempt)
            return None

    async def _moved(self, response: Any, attempt: int) -> None:
        """NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: go to the owner it names, else find
        it (client.coordinator); back off only when nobody knows yet (a takeover pending)."""
        if self._link.follow(response.coordinator if response.HasField("coordinator") else None):
            return
        await self._backoff(attempt)
        await self._link.rediscover()

    async def _handle_code(self, code: int, message: str, phase: str, attempt: int, response: Any = None) -> bool:
        """True on NONE; otherwise adjust (reset member id, back off) and return False to rejoin."""
        if code == epb.ERROR_CODE_NONE:
            return True
        name = epb.ErrorCode.Name(code)
        if code in _FATAL:
            raise MemberError(name, message)
        if code in MOVED and response is not None:
            self._log.info(f"member.{phase}.moved", code=name, message=message)
            await self._moved(response, attempt)
            return False
        self._log.info(f"member.{phase}.rejoin", code=name, message=message)
        if code == epb.ERROR_CODE_UNKNOWN_MEMBER_ID:
            self.member_id, self.generation = "", -1
        elif code not in _REJOIN or attempt >= 3:  # COORDINATOR_NOT_AVAILABLE, anything unexpected,
            await self._backoff(attempt)           # or a rejoin that keeps failing: back off
        return False

    def _accept(self, message: pb.Assignment) -> AssignmentChange:
        """The new assignment becomes the member's (its metadata, what heartbeats report, what
        watchers see); applying it is ``_apply``'s."""
        error = message.error_code
        if error == epb.ASSIGNOR_ERROR_SHUTDOWN_REQUESTED:
            raise MemberError("SHUTDOWN_REQUESTED", "a member asked the whole group to shut down")
        if error not in (epb.ASSIGNOR_ERROR_NONE, epb.ASSIGNOR_ERROR_VERSION_PROBING):
            self._log.warning("member.assignment.error", error=epb.AssignorError.Name(error))
        if error == epb.ASSIGNOR_ERROR_VERSION_PROBING and message.version:
            self._version = min(message.version, LATEST_SUPPORTED_VERSION)
        new = codec.assignment_from_proto(message, self.generation, self.config.topology)
        change = diff(self._assignment, new)
        self._assignment = new
        self._metadata = StreamsMetadataState(new.cluster)
        self.rebalances += 1
        # counts at info, the tasks at debug: a member of a large group logged 20,000 task ids
        # on one line at every rebalance
        self._log.info("member.assignment.received", generation=self.generation, member_id=self.member_id,
                       active=len(new.active), standby=len(set(new.standby) - set(new.warmup)), warmup=len(new.warmup))
        self._log.debug("member.assignment.tasks", generation=self.generation, member_id=self.member_id,
                        active=[str(t) for t in new.active], standby=[str(t) for t in new.standby],
                        warmup=[str(t) for t in sorted(new.warmup)])
        for queue in self._watchers:  # watchers (a sidecar's worker) may be the ones applying it
            queue.put_nowait(change)
        return change

    async def _apply(self, change: AssignmentChange, commonly_supported_version: int) -> None:
        """The callback, then the lock's release (KIP-441: once applied, as onPartitionsAssigned),
        while heartbeats go on: a worker that takes longer than the session to open its stores
        keeps its session (Kafka's heartbeat thread). Applied in a heartbeat's stead, it lost
        the session every generation, and rebalanced the group for good."""
        try:
            if self._on_assignment is not None:
                result = self._on_assignment(change)
                if inspect.isawaitable(result):
                    await result
        except Exception:
            self._log.exception("member.assignment.callback_failed", generation=self.generation)
        finally:
            # KIP-441: release only once the assignment is applied (onPartitionsAssigned).
            self._release_lock()
        if self._applying is not asyncio.current_task() or self.state is MemberState.CLOSED or self._closing.is_set():
            return  # stopped (closing, a fatal error), its cancellation swallowed
        self._set_state(MemberState.STABLE)
        if commonly_supported_version > self._version:
            self._version = min(commonly_supported_version, LATEST_SUPPORTED_VERSION)
            self._rejoin_now = True
        self._wake.set()  # a rejoin that waited for this assignment to be applied goes now

    def _heartbeat_lags(self) -> pb.LagReport:
        """The lags of the assigned tasks, sent with every heartbeat (a new owner of the group
        hears them at once): restoring actives, standbys and warm-ups with their offsets,
        running actives as LATEST. They feed RouteQuery and the leader's early probe."""
        lags, age_ms = self._measured_lags()
        assigned = self._assignment.all_tasks()
        return codec.lag_report({task: lag for task, lag in lags.items() if task in assigned}, age_ms)

    async def _heartbeat_until_rejoin(self) -> None:
        """Heartbeat the generation in hand until a rejoin is due and the member is ready for it:
        the assignment in hand applied, then the cleanup lock taken again (KIP-441: before the
        lags of the JoinGroup are read). Heartbeats go on while it waits for either, and the
        leader, answering REBALANCE_IN_PROGRESS, keeps the session: waiting without them, the
        member was expired while it applied, or while a cleaner held the lock (audits' finds)."""
        interval = self.config.heartbeat_interval_ms / 1000
        # A third of the session (at least an interval): a paused replica is given up on while the
        # session lives, so the member reaches the group's new owner in its generation. Waiting
        # the whole session, as before, lost it (a pause cost a rebalance that a kill did not).
        heartbeat_timeout_s = min(self.config.session_timeout_ms / 1000,
                                  max(interval, self.config.session_timeout_ms / 3000))
        last_ok = time.monotonic()
        attempt = 0
        rejoin_due = False
        # The first goes at once: the leader counts the session from the SyncGroup, whose answer
        # (tens of MB for a large group) took seconds to arrive and be read; a heartbeat an
        # interval later still came after the session ended, every generation (an audit's find)
        beat_now = True
        locking: asyncio.Task | None = None
        try:
            while not self._closing.is_set():
                if self._rejoin_now:
                    self._rejoin_now, rejoin_due = False, True
                if rejoin_due and self._applied():
                    if locking is None:
                        locking = asyncio.create_task(self._take_lock())
                        locking.add_done_callback(lambda _: self._wake.set())
                        if self.lock.locked():
                            self._log.info("member.rejoin.awaiting_lock", holder=self.lock.holder)
                    if locking.done():
                        return
                self._wake.clear()
                if beat_now:
                    beat_now = False
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), interval)
                        continue  # woken: closing, applied, the lock taken, or a rejoin asked for
                request = self._with_instance(pb.HeartbeatRequest(
                    group_id=self.config.group_id, member_id=self.member_id, generation_id=self.generation,
                    lags=self._heartbeat_lags()))
                try:
                    response = await self._stub.Heartbeat(request, timeout=heartbeat_timeout_s)
                except grpc.aio.AioRpcError as error:
                    if error.code() not in _TRANSIENT:
                        raise self._fatal_rpc(error) from None
                    attempt += 1
                    # said, not only retried: an operator whose members expire must see why
                    self._log.info("member.heartbeat.retry", code=error.code().name, attempt=attempt,
                                   since_last_ok_ms=round((time.monotonic() - last_ok) * 1000))
                    if (time.monotonic() - last_ok) * 1000 > self.config.session_timeout_ms:
                        self._log.warning("member.heartbeat.session_lost", code=error.code().name)
                        return
                    # The replica did not answer: ask the others first, it may be paused
                    await self._link.rediscover(current_last=True)
                    continue
                if response.error_code == epb.ERROR_CODE_NONE:
                    last_ok, attempt = time.monotonic(), 0
                    self.heartbeat_ok_at = last_ok
                    if response.HasField("next_rebalance_ms") != (self._assignment.next_rebalance_ms is not None) or (
                            response.HasField("next_rebalance_ms")
                            and response.next_rebalance_ms != self._assignment.next_rebalance_ms):
                        self._note_next_rebalance(
                            response.next_rebalance_ms if response.HasField("next_rebalance_ms") else None)
                    continue
                if response.error_code in MOVED:  # keep heartbeating, at the group's owner
                    attempt += 1
                    if (time.monotonic() - last_ok) * 1000 > self.config.session_timeout_ms:
                        return
                    await self._moved(response, attempt)
                    continue
                if response.error_code in _REJOIN:  # the same answer every heartbeat until the member rejoins
                    if not rejoin_due:
                        self._log.info("member.heartbeat.rejoin", code=epb.ErrorCode.Name(response.error_code),
                                       message=response.error_message)
                    rejoin_due = True
                    continue
                if not await self._handle_code(response.error_code, response.error_message, "heartbeat", attempt):
                    return
        finally:
            if locking is not None:
                locking.cancel()  # no rejoin after all (closing, a fatal answer): stop waiting for the lock

    def _applied(self) -> bool:
        """Whether the assignment in hand is applied (its callback returned, the lock released)."""
        return self._applying is None or self._applying.done()

    def _note_next_rebalance(self, next_rebalance_ms: int | None) -> None:
        """The leader rescheduled (or cancelled) the probing rebalance: keep the assignment's
        follow-up time current without a rebalance."""
        self._assignment = dataclasses.replace(self._assignment, next_rebalance_ms=next_rebalance_ms)

    def _require_metadata(self) -> StreamsMetadataState:
        if self._metadata is None:
            raise MemberError("NO_ASSIGNMENT", "no assignment yet: metadata is built from the first one")
        return self._metadata
