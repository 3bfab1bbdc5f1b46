"""The sidecar: a ``GroupMember`` in its own process, serving a worker in any language on localhost.

The worker talks to ``remote_leader.sidecar.v1.SidecarService`` (docs/sidecar.md); the sidecar
talks to the remote leader. The lag source is what the worker last reported (``ReportLags``);
the cleanup lock is the member's own, held by the member through each rebalance and by a worker's
state cleaner through ``HoldCleanupLock`` for as long as its call stays open — a worker that dies
while holding it releases it with its connection. Watchers that ask to acknowledge keep the lock
held after a new assignment until they confirm it is applied, which is KIP-441's
"release in onPartitionsAssigned" across a process boundary. Optionally (``state_dir``) the
sidecar runs the state cleaner itself on the worker's state directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import structlog
import yaml

from assignor.cluster import MemberAssignment
from assignor.lag import Lag
from assignor.model import MAX_INT, AssignmentConfig, InvalidInput, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client import codec
from client.assignment import EMPTY_ASSIGNMENT, AssignmentChange, diff
from client.lags import CheckpointLagSource, LagInfo, StaticLagSource
from client.member import GroupMember, MemberConfig, RoutingError
from client.state import StateCleaner, StateDirectory
from remote_leader.net import address_in_use
from remote_leader.sidecar.v1 import sidecar_pb2 as spb
from remote_leader.sidecar.v1 import sidecar_pb2_grpc as spb_grpc
from remote_leader.tls import ClientTls
from remote_leader.v1 import group_leader_pb2 as pb

log = structlog.get_logger(__name__)

_STATES = {"created": spb.MEMBER_STATE_JOINING, "joining": spb.MEMBER_STATE_JOINING,
           "stable": spb.MEMBER_STATE_STABLE, "closed": spb.MEMBER_STATE_CLOSED}


def assignment_to_proto(member: GroupMember, assignment: MemberAssignment) -> spb.MemberAssignment:
    message = spb.MemberAssignment(
        generation_id=assignment.generation,
        member_id=member.member_id,
        active=codec.tasks_to_proto(assignment.active),
        standby=codec.tasks_to_proto(assignment.standby),
        warmup=codec.tasks_to_proto(assignment.warmup),
        active_by_host=[spb.HostTasks(host=codec.host_to_proto(h), tasks=codec.tasks_to_proto(t))
                        for h, t in sorted(assignment.cluster.active_by_host().items())],
        standby_by_host=[spb.HostTasks(host=codec.host_to_proto(h), tasks=codec.tasks_to_proto(t))
                         for h, t in sorted(assignment.cluster.standby_by_host().items())],
    )
    if assignment.next_rebalance_ms is not None:
        message.next_rebalance_ms = assignment.next_rebalance_ms
    return message


def change_to_proto(change: AssignmentChange) -> spb.AssignmentChange:
    return spb.AssignmentChange(
        revoked_active=codec.tasks_to_proto(change.revoked_active),
        assigned_active=codec.tasks_to_proto(change.assigned_active),
        revoked_standby=codec.tasks_to_proto(change.revoked_standby),
        assigned_standby=codec.tasks_to_proto(change.assigned_standby),
        released=codec.tasks_to_proto(change.released),
    )


class _Acknowledgements:
    """Acknowledging watchers, and the generation each must confirm before the lock is released.

    A watcher is known by its ``watch_id`` when it gives one (its pending acknowledgement then
    outlives its stream: one that reconnects mid-apply still owes it, and only an
    acknowledgement with that name settles it), else by its stream alone (gone with it).
    """

    def __init__(self) -> None:
        self.watchers: dict[object, int] = {}  # live acknowledging watchers (a name or a stream's token) -> streams
        self.pending: dict[object, int] = {}  # watcher -> the generation it owes
        self.changed = asyncio.Event()

    def notify(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def join(self, watcher: object) -> None:
        self.watchers[watcher] = self.watchers.get(watcher, 0) + 1

    def leave(self, watcher: object) -> None:
        self.watchers[watcher] -= 1
        if not self.watchers[watcher]:
            del self.watchers[watcher]
            if not _named(watcher):
                self.pending.pop(watcher, None)
        self.notify()

    def owe(self, generation: int) -> None:
        for watcher in self.watchers:
            self.pending[watcher] = generation

    def owing(self, generation: int) -> bool:
        return generation in self.pending.values()

    def give_up(self, generation: int) -> None:
        """The apply timeout: nobody owes that generation any more (a late acknowledgement of it
        is refused, as for any stale one)."""
        for watcher in [w for w, owed in self.pending.items() if owed == generation]:
            del self.pending[watcher]

    def settle(self, generation: int, watch_id: str) -> bool:
        """An acknowledgement: by name, that watcher's; unnamed, one unnamed watcher's."""
        if watch_id:
            watcher: object = ("named", watch_id)
            if self.pending.get(watcher) != generation:
                return False
        else:
            watcher = next((w for w, owed in self.pending.items() if owed == generation and not _named(w)), None)
            if watcher is None:
                return False
        del self.pending[watcher]
        self.notify()
        return True


def _named(watcher: object) -> bool:
    return isinstance(watcher, tuple)


class SidecarLagSource:
    """The lags the sidecar reports for its worker (``ReportLags``): the worker's own task lags
    when it sends them; otherwise, with a state directory, the default checkpoint source
    against the changelog end offsets and running actives the worker last reported."""

    def __init__(self, topology: Topology, directory: StateDirectory | None = None) -> None:
        self.topology = topology
        self.reported = StaticLagSource()
        self.explicit = directory is None
        self.end_offsets: dict[tuple[str, int], int] = {}
        self.running: frozenset[TaskId] = frozenset()
        self.reported_at: float | None = None  # time.monotonic() of the worker's last report
        self.checkpoints = None if directory is None else CheckpointLagSource(
            topology, directory, lambda wanted: self.end_offsets, lambda: self.running)

    def update(self, task_lags: Mapping[TaskId, Lag], store_lags: Mapping[str, Mapping[int, LagInfo]],
               end_offsets: Mapping[tuple[str, int], int], running: frozenset[TaskId]) -> None:
        self.explicit = bool(task_lags) or self.checkpoints is None
        self.reported.update(task_lags, store_lags)
        self.end_offsets = dict(end_offsets)
        self.running = running
        self.reported_at = time.monotonic()

    def lags_age_ms(self) -> int:
        """The age of the worker's last report: the checkpoints are read when asked, but the end
        offsets and running actives they are measured against are the report's."""
        return 0 if self.reported_at is None else int((time.monotonic() - self.reported_at) * 1000)

    def _source(self):
        return self.reported if self.explicit or self.checkpoints is None else self.checkpoints

    def task_lags(self) -> Mapping[TaskId, Lag]:
        return self._source().task_lags()

    def store_partition_lags(self) -> Mapping[str, Mapping[int, LagInfo]]:
        return self._source().store_partition_lags()


def lag_report_from_proto(request, topology: Topology) -> tuple[dict, dict, dict, frozenset[TaskId]]:
    """``ReportLags`` as domain values (task lags, store lags, changelog end offsets, running
    actives), every field checked: InvalidInput names the first bad one. Task ids are checked as
    the leader checks them (``TaskId.checked``): a bad one was taken here, refused by the leader
    at the next JoinGroup, and the member stopped."""
    task_lags: dict[TaskId, Lag] = {}
    for index, entry in enumerate(request.task_lags):
        where = f"task_lags[{index}]"
        if not entry.HasField("task"):
            raise InvalidInput(f"{where}.task", "required")
        task = TaskId.checked(entry.task.subtopology, entry.task.partition, f"{where}.task")
        if task in task_lags:
            raise InvalidInput(f"{where}.task", f"duplicate task {task}")
        if entry.lag < -2:
            raise InvalidInput(f"{where}.lag", f"expected >= 0, -1 (latest) or -2 (unknown), got {entry.lag}")
        task_lags[task] = Lag.from_wire(entry.lag)
    store_lags: dict[str, dict[int, LagInfo]] = {}
    for index, entry in enumerate(request.store_lags):
        where = f"store_lags[{index}]"
        if not entry.store:
            raise InvalidInput(f"{where}.store", "required")
        topology.store(entry.store, f"{where}.store")
        if entry.partition < 0:
            raise InvalidInput(f"{where}.partition", f"expected >= 0, got {entry.partition}")
        if entry.partition in store_lags.get(entry.store, {}):
            raise InvalidInput(f"{where}.partition", f"duplicate partition {entry.partition} of store {entry.store!r}")
        for name in ("current_offset_position", "end_offset_position"):
            if getattr(entry, name) < 0:
                raise InvalidInput(f"{where}.{name}", f"expected >= 0, got {getattr(entry, name)}")
        store_lags.setdefault(entry.store, {})[entry.partition] = LagInfo(
            entry.current_offset_position, entry.end_offset_position)
    end_offsets: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(request.changelog_end_offsets):
        if not entry.topic or entry.partition < 0 or entry.end_offset < 0:
            raise InvalidInput(f"changelog_end_offsets[{index}]", "expected a topic, a partition >= 0 and an offset >= 0")
        end_offsets[(entry.topic, entry.partition)] = entry.end_offset
    running = frozenset(TaskId.checked(task.subtopology, task.partition, f"running_actives[{index}]")
                        for index, task in enumerate(request.running_actives))
    return task_lags, store_lags, end_offsets, running


class SidecarServicer(spb_grpc.SidecarServiceServicer):
    def __init__(self, member: GroupMember, lag_source: SidecarLagSource, *, apply_timeout_s: float = 30.0) -> None:
        self.member = member
        self.lag_source = lag_source
        self.apply_timeout_s = apply_timeout_s
        self.acks = _Acknowledgements()

    async def on_assignment(self, change: AssignmentChange) -> None:
        """The member's callback: wait (bounded) until every acknowledging watcher applied it."""
        generation = change.current.generation
        self.acks.owe(generation)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.apply_timeout_s
        while self.acks.owing(generation):
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("sidecar.apply.timeout", generation=generation)
                self.acks.give_up(generation)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.acks.changed.wait(), remaining)

    async def GetAssignment(self, request, context):
        assignment = self.member.assignment
        has = assignment.generation >= 0
        return spb.GetAssignmentResponse(
            state=_STATES.get(self.member.state.value, spb.MEMBER_STATE_UNSPECIFIED), has_assignment=has,
            assignment=assignment_to_proto(self.member, assignment) if has else None)

    async def WatchAssignment(self, request, context) -> AsyncIterator[spb.WatchAssignmentResponse]:
        queue = self.member.subscribe()
        watcher: object = ("named", request.watch_id) if request.watch_id else object()
        if request.acknowledge:
            self.acks.join(watcher)
        try:
            current = self.member.assignment
            if current.generation >= 0:  # what it holds, as a change from nothing: a worker that
                # applies changes starts with every task (it got an empty change: a new user's find)
                yield spb.WatchAssignmentResponse(assignment=assignment_to_proto(self.member, current),
                                                  change=change_to_proto(diff(EMPTY_ASSIGNMENT, current)))
            while True:
                change = await queue.get()
                if change is None:
                    return
                yield spb.WatchAssignmentResponse(assignment=assignment_to_proto(self.member, change.current),
                                                  change=change_to_proto(change))
        finally:
            self.member.unsubscribe(queue)
            if request.acknowledge:
                self.acks.leave(watcher)

    async def AcknowledgeAssignment(self, request, context):
        return spb.AcknowledgeAssignmentResponse(accepted=self.acks.settle(request.generation_id, request.watch_id))

    async def ReportLags(self, request, context):
        try:
            report = lag_report_from_proto(request, self.lag_source.topology)
        except InvalidInput as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        self.lag_source.update(*report)
        return spb.ReportLagsResponse()

    async def HoldCleanupLock(self, request, context) -> AsyncIterator[spb.HoldCleanupLockResponse]:
        holder = request.holder or f"worker:{context.peer()}"
        await self.member.lock.acquire(holder)
        log.info("sidecar.cleanup_lock.held", holder=holder)
        try:
            yield spb.HoldCleanupLockResponse(held=True)
            await asyncio.Event().wait()  # until the caller cancels or disconnects
        finally:
            self.member.lock.release(holder)
            log.info("sidecar.cleanup_lock.released", holder=holder)

    def _partition(self, request) -> dict[str, Any]:
        target = request.WhichOneof("target")
        if target == "key":
            return {"key": bytes(request.key)}
        if target == "partition":
            return {"partition": request.partition}
        raise InvalidInput("target", "give key or partition")

    async def QueryMetadata(self, request, context):
        try:
            metadata = self.member.metadata
            if metadata is None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no assignment yet")
            target = self._partition(request)
            if "key" in target:
                meta = metadata.query_metadata_for_key(request.store, target["key"])
            else:
                meta = metadata.query_metadata_for_partition(request.store, target["partition"])
        except InvalidInput as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        response = spb.QueryMetadataResponse(
            standby_hosts=[codec.host_to_proto(h) for h in meta.standby_hosts],
            partition=meta.partition, task=codec.task_to_proto(meta.task))
        if meta.active_host is not None:
            response.active_host.CopyFrom(codec.host_to_proto(meta.active_host))
        return response

    async def RouteQuery(self, request, context):
        try:
            result = await self.member.route_query(
                request.store, max_lag=request.max_lag if request.HasField("max_lag") else None,
                **self._partition(request))
        except InvalidInput as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except RoutingError as error:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
        except grpc.aio.AioRpcError as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"leader: {error.code().name} {error.details()}")
        return spb.RouteQueryResponse(
            partition=result.partition, task=codec.task_to_proto(result.task),
            hosts=[pb.QueryHost(host=codec.host_to_proto(h.host) if h.host is not None else None, process_id=h.process_id,
                                role={"active": 1, "standby": 2, "warmup": 3}[h.role.value],
                                lag=h.lag, lag_age_ms=h.lag_age_ms) for h in result.hosts])


# ---- the member file: topology and assignment config -----------------------------------------


def load_member_file(path: str | Path) -> tuple[Topology, AssignmentConfig]:
    """Read a topology document (YAML or JSON, docs/sidecar.md) into domain values."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise InvalidInput("--topology", f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidInput("--topology", f"{path} is not UTF-8 text (expected YAML or JSON)") from None
    except yaml.YAMLError as error:
        raise InvalidInput("--topology", f"not valid YAML/JSON: {error}") from None
    return parse_member_document(document)


def check_group(topology: Topology, group_id: str) -> None:
    """A member file belongs to its group: Kafka Streams' ``application.id`` is its group id and
    names its changelog topics (and so the lags the sidecar reads); two names are a wrong file or
    flag. ValueError naming ``--topology`` and ``--group`` otherwise."""
    if topology.application_id != group_id:
        raise ValueError(f"--topology: application_id {topology.application_id!r} is not the group "
                         f"{group_id!r} (--group); a Kafka Streams application's group id is its application.id")


_SUBTOPOLOGY_KEYS = frozenset({"id", "source_topics", "partitions", "stores"})
_STORE_KEYS = frozenset({"name", "logged", "changelog_topic"})


def parse_member_document(document: Any) -> tuple[Topology, AssignmentConfig]:
    if not isinstance(document, Mapping):
        raise InvalidInput("(topology)", "expected an object with application_id and subtopologies")
    unknown = sorted(set(document) - {"application_id", "subtopologies", "config"})
    if unknown:
        raise InvalidInput(unknown[0], "unknown key")
    raw_subs = document.get("subtopologies")
    if not isinstance(raw_subs, list) or not raw_subs:
        raise InvalidInput("subtopologies", "expected a list of at least one subtopology")
    subs = []
    for index, raw in enumerate(raw_subs):
        where = f"subtopologies[{index}]"
        if not isinstance(raw, Mapping):
            raise InvalidInput(where, "expected an object")
        unknown = sorted(set(raw) - _SUBTOPOLOGY_KEYS, key=str)
        if unknown:
            raise InvalidInput(f"{where}.{unknown[0]}", f"unknown key (expected {', '.join(sorted(_SUBTOPOLOGY_KEYS))})")
        for key in ("id", "partitions"):  # int32 on the wire (Subtopology.id, SourceTopic.partition_count)
            value = raw.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_INT:
                raise InvalidInput(f"{where}.{key}", f"must be <= {MAX_INT}, got {value}")
        raw_stores = raw.get("stores")
        if raw_stores is None:
            raw_stores = []
        if not isinstance(raw_stores, list):
            raise InvalidInput(f"{where}.stores", f"expected a list of stores, got {raw_stores!r}")
        stores = []
        for s_index, store in enumerate(raw_stores):
            if isinstance(store, str):
                store = {"name": store}
            if not isinstance(store, Mapping):
                raise InvalidInput(f"{where}.stores[{s_index}]", "expected a store name or {name, logged?, changelog_topic?}")
            unknown = sorted(set(store) - _STORE_KEYS, key=str)
            if unknown:
                raise InvalidInput(f"{where}.stores[{s_index}].{unknown[0]}",
                                   f"unknown key (expected {', '.join(sorted(_STORE_KEYS))})")
            logged = store.get("logged", True)
            if not isinstance(logged, bool):
                raise InvalidInput(f"{where}.stores[{s_index}].logged", f"expected true or false, got {logged!r}")
            changelog = store.get("changelog_topic")
            if changelog is not None and (not isinstance(changelog, str) or not changelog):
                raise InvalidInput(f"{where}.stores[{s_index}].changelog_topic",
                                   f"expected a topic name, got {changelog!r}")
            stores.append(StateStore(store.get("name"), logged, store.get("changelog_topic")))
        topics = raw.get("source_topics")
        if not isinstance(topics, list):
            raise InvalidInput(f"{where}.source_topics", "expected a list of topic names")
        subs.append(Subtopology.of(raw.get("id"), topics, raw.get("partitions"), stores))
    topology = Topology.of(document.get("application_id"), subs)
    raw_config = document.get("config") or {}
    if not isinstance(raw_config, Mapping):
        raise InvalidInput("config", "expected an object")
    unknown = sorted(set(raw_config) - set(AssignmentConfig.__dataclass_fields__))
    if unknown:
        raise InvalidInput(f"config.{unknown[0]}", "unknown configuration key")
    return topology, AssignmentConfig(**raw_config)


# ---- the process ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SidecarOptions:
    server: str
    member: MemberConfig
    listen: str = "127.0.0.1:0"
    apply_timeout_s: float = 30.0
    state_dir: str | None = None
    state_cleanup_delay_ms: int = 600_000
    will_come_back: bool = False
    """On stop, a static member keeps its place for its session timeout instead of leaving."""
    upstream_tls: ClientTls | None = None
    """How to reach the remote leader: TLS, client certificate, bearer token (docs/security.md)."""
    local_tls: LocalTls | None = None
    """TLS for the local API (it listens on loopback by default and needs none there)."""


@dataclass(frozen=True, slots=True)
class LocalTls:
    cert: Path
    key: Path
    client_ca: Path | None = None  # require client certificates signed by it

    def credentials(self) -> grpc.ServerCredentials:
        ca = Path(self.client_ca).read_bytes() if self.client_ca else None
        return grpc.ssl_server_credentials([(Path(self.key).read_bytes(), Path(self.cert).read_bytes())],
                                           root_certificates=ca, require_client_auth=ca is not None)


def _check_free(listen: str) -> None:
    """Try the local API's address the way grpc binds it (SO_REUSEADDR) before grpc does: a port
    another program holds is then one line naming ``--listen``, not grpc's C-level error log too."""
    if address_in_use(listen):
        raise InvalidInput("--listen", f"cannot listen on {listen}: the address is in use")


async def serve_sidecar(options: SidecarOptions, stop: asyncio.Event, ready=None) -> int:
    """Run the member and the local API until ``stop`` is set; ``ready(address)`` once listening."""
    directory = StateDirectory(options.state_dir) if options.state_dir is not None else None
    lag_source = SidecarLagSource(options.member.topology, directory)
    servicer = SidecarServicer(None, lag_source, apply_timeout_s=options.apply_timeout_s)  # type: ignore[arg-type]
    member = GroupMember(options.server, options.member, lag_source, on_assignment=servicer.on_assignment,
                         tls=options.upstream_tls)
    servicer.member = member
    server = grpc.aio.server()
    spb_grpc.add_SidecarServiceServicer_to_server(servicer, server)
    _check_free(options.listen)
    try:
        if options.local_tls is not None:
            port = server.add_secure_port(options.listen, options.local_tls.credentials())
        else:
            port = server.add_insecure_port(options.listen)
    except RuntimeError:  # grpc's "Failed to bind to address ...": a busy or foreign address
        port = 0
    if port == 0:
        raise InvalidInput("--listen", f"cannot listen on {options.listen}: the address is in use or not on this host")
    host = options.listen.rpartition(":")[0] or "127.0.0.1"
    await server.start()
    address = f"{host}:{port}"
    cleaner_task = None
    if directory is not None:
        cleaner = StateCleaner(directory, member.lock, member.assigned_tasks,
                               state_cleanup_delay_ms=options.state_cleanup_delay_ms)
        cleaner_task = asyncio.create_task(cleaner.run(max(options.state_cleanup_delay_ms / 2000, 0.05)))
    await member.start()
    if ready is not None:
        ready(address)
    code = 0
    try:
        stopped = asyncio.create_task(stop.wait())
        failed = asyncio.create_task(member.wait_for_assignment(lambda a: False))
        done, _ = await asyncio.wait({stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
        if failed in done and failed.exception() is not None:  # a protocol error, or a crash: a supervisor must see it
            log.error("sidecar.member.stopped", error=str(failed.exception()))
            code = 1
        for task in (stopped, failed):
            task.cancel()
    finally:
        if cleaner_task is not None:
            cleaner_task.cancel()
        await member.close(will_come_back=options.will_come_back)
        await server.stop(grace=1.0)
    return code


def ready_line(address: str, member: MemberConfig) -> str:
    """The one line the sidecar prints on stdout once listening: how a worker finds the port."""
    return json.dumps({"event": "sidecar.ready", "listen": address, "group_id": member.group_id,
                       "process_id": member.process_id})
