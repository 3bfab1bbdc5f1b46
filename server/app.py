"""Assembly of one running server: the grpc.aio server with the GroupLeader servicer, health
checking, reflection, Prometheus metrics, the state store and the rebalance log.

``Settings`` is the table of docs/interfaces.md ("Server settings"); ``server.cli`` fills it
from flags and the environment. ``LeaderServer`` is what the CLI, the tests and the benchmark
start and stop; tests inject a ``FakeClock`` (which is its own timer set).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, fields
from pathlib import Path

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from remote_leader.net import address_in_use
from remote_leader.tls import MAX_ANSWER_BYTES
from remote_leader.v1 import group_leader_pb2
from server.assignor_runner import AssignorRunner
from server.auth import Authenticator, Gate, JwtSettings, is_loopback
from server.edge import METHODS, GroupLeaderServicer, add_to_server, refusals
from server.group import GroupSettings
from server.limits import Limits
from server.model import ReplicaInfo
from server.observability import Metrics, RebalanceLog
from server.ownership import Ownership, advertised_address, default_replica_id
from server.retention import Retention
from server.runtime import Coordinator
from server.store import GroupStore, Store
from server.store_postgres import open_replicated
from server.timers import AsyncioTimers, Clock, FakeClock, SystemClock, Timers
from server.web.app import LivePage, ssl_context_for

log = structlog.get_logger(__name__)

SERVICE_NAME = group_leader_pb2.DESCRIPTOR.services_by_name["GroupLeader"].full_name

#: The cyclic collector's thresholds for the serving process (CPython's default: 700, 10, 10).
GC_THRESHOLDS = (10_000, 50, 100)
_DEFAULT_LIMITS = Limits()


def tune_garbage_collector() -> None:
    """For the ``serve`` process, once started. A rebalance of 1,000 members allocates enough
    to run the default young collection about 100 times, and full collections that walk every
    object of the imported libraries (70-160 ms each, measured with bench/bench_server.py's
    group). Freezing what start-up created takes it out of every later collection; a larger
    young generation collects far less often. Reference counting still frees all acyclic
    garbage at once: only cycles wait longer. Not for tests, which share one process."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass(frozen=True, slots=True)
class Settings:
    """docs/interfaces.md, "Server settings (flags and environment)"."""

    listen: str = "127.0.0.1:50051"
    state_dir: Path = Path("./data")
    metrics_port: int = 9464
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    min_probe_interval_ms: int = 60_000
    early_probe: bool = True
    drain_timeout_s: float = 20.0
    max_pending_requests: int = 20_000
    rebalance_log_max_bytes: int = 104_857_600
    rebalance_log_backups: int = 10
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # docs/security.md: identity and authorization (all off by default)
    tls_client_ca: Path | None = None
    auth_token_file: Path | None = None
    auth_jwt_key: Path | None = None
    auth_jwt_algorithms: str = "RS256,ES256,EdDSA"
    auth_jwt_audience: str = ""
    auth_jwt_issuer: str = ""
    acl_file: Path | None = None
    metrics_host: str = ""
    metrics_tls: bool = False
    #: Who may open the live page on the metrics port: loopback clients, anyone, or nobody.
    live_page: str = "loopback"
    empty_group_retention_ms: int = 604_800_000
    log_level: str = "info"
    log_format: str = "json"
    event_loop: str = "auto"
    # server/assignor_runner.py: problems of at least this many tasks run in worker processes
    assignor_processes: int = 1
    assignor_process_min_tasks: int = 2_000
    # docs/security.md, "Limits"
    max_message_bytes: int = _DEFAULT_LIMITS.max_message_bytes
    max_partitions_per_topic: int = _DEFAULT_LIMITS.max_partitions_per_topic
    max_partitions_per_group: int = _DEFAULT_LIMITS.max_partitions_per_group
    max_subtopologies: int = _DEFAULT_LIMITS.max_subtopologies
    max_tasks_per_group: int = _DEFAULT_LIMITS.max_tasks_per_group
    max_store_partitions_per_group: int = _DEFAULT_LIMITS.max_store_partitions_per_group
    max_host_map_bytes: int = _DEFAULT_LIMITS.max_host_map_bytes
    max_members_per_group: int = _DEFAULT_LIMITS.max_members_per_group
    max_groups: int = _DEFAULT_LIMITS.max_groups
    max_groups_per_principal: int = _DEFAULT_LIMITS.max_groups_per_principal
    max_tasks_per_assign: int = _DEFAULT_LIMITS.max_tasks_per_assign
    max_clients_per_assign: int = _DEFAULT_LIMITS.max_clients_per_assign
    max_replicas_per_group: int = _DEFAULT_LIMITS.max_replicas_per_group
    max_replicas_per_assign: int = _DEFAULT_LIMITS.max_replicas_per_assign
    max_concurrent_assigns: int = _DEFAULT_LIMITS.max_concurrent_assigns
    max_rebalance_timeout_ms: int = _DEFAULT_LIMITS.max_rebalance_timeout_ms
    max_client_tags: int = _DEFAULT_LIMITS.max_client_tags

    def limits(self) -> Limits:
        return Limits(**{f.name: getattr(self, f.name) for f in fields(Limits)})
    #: "sqlite" (STATE_DIR/state.db, one instance) or a postgresql:// DSN (several replicas).
    store: str = "sqlite"
    #: Several replicas: this one's id (default: host name and a random suffix), the host:port
    #: clients reach it at (default: the listen address, or the host name when it listens on
    #: every interface), and the group lease (docs/high-availability.md).
    replica_id: str = ""
    advertise_address: str = ""
    lease_ms: int = 5_000

    @property
    def replicated(self) -> bool:
        return self.store.startswith(("postgresql://", "postgres://"))

    def gate(self, metrics: Metrics | None = None) -> Gate:
        jwt = None
        if self.auth_jwt_key:
            jwt = JwtSettings(
                Path(self.auth_jwt_key),
                tuple(a.strip() for a in self.auth_jwt_algorithms.split(",") if a.strip()),
                self.auth_jwt_audience or None,
                self.auth_jwt_issuer or None,
            )
        authenticator = Authenticator(client_certificates=self.tls_client_ca is not None, token_file=self.auth_token_file, jwt=jwt)
        return Gate(authenticator, self.acl_file, metrics)

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS from --tls-cert/--tls-key; with --tls-client-ca, client certificates signed by that
        CA are required (mTLS)."""
        if not (self.tls_cert and self.tls_key):
            return None
        ca = Path(self.tls_client_ca).read_bytes() if self.tls_client_ca else None
        return grpc.ssl_server_credentials(
            [(Path(self.tls_key).read_bytes(), Path(self.tls_cert).read_bytes())], root_certificates=ca, require_client_auth=ca is not None
        )

    def group_settings(self) -> GroupSettings:
        return GroupSettings(
            min_session_timeout_ms=self.min_session_timeout_ms,
            max_session_timeout_ms=self.max_session_timeout_ms,
            initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
            min_probe_interval_ms=self.min_probe_interval_ms,
            early_probe=self.early_probe,
        )


class ListenError(OSError):
    """A port the server cannot listen on; the message names the address and its flag."""


def _check_free(listen: str) -> None:
    if address_in_use(listen):
        raise ListenError(f"cannot listen on {listen} (--listen): the address is in use")


class LeaderServer:
    """One remote-leader server: ``await start()``, ``port``, ``await stop()``."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.metrics = Metrics()
        self.port = 0
        self.metrics_port = 0
        self._server: grpc.aio.Server | None = None
        self._health = health_aio.HealthServicer()
        self._metrics_http: LivePage | None = None
        self.coordinator: Coordinator | None = None
        self._assign_runner: AssignorRunner | None = None  # the Assign calls' (``start``)
        self.retention: Retention | None = None
        #: Authentication and ACLs of this server (server/auth.py), for any other front door.
        self.gate: Gate | None = None
        self.ownership: Ownership | None = None
        self._started = False

    async def _serving(self, serving: bool) -> None:
        """A replica that cannot renew its leases reports NOT_SERVING until it can again."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", SERVICE_NAME):
            await self._health.set(service, status)

    def _timers(self) -> Timers:
        if isinstance(self.clock, FakeClock):
            return self.clock
        return AsyncioTimers(self.clock, lambda key, error: log.error("timer.failed", key=key, error=repr(error)))

    async def start(self) -> None:
        """Bind the ports first, so that a busy address fails at once with nothing opened; on
        any failure, close whatever did start (no thread left to keep the process alive)."""
        try:
            await self._start()
        except BaseException:
            await self.stop(0)
            raise

    def _bind(self, server: grpc.aio.Server) -> None:
        s = self.settings
        _check_free(s.listen)
        credentials = s.server_credentials()
        try:
            if credentials is not None:
                self.port = server.add_secure_port(s.listen, credentials)
            else:
                self.port = server.add_insecure_port(s.listen)
        except RuntimeError:  # grpc's "Failed to bind to address ...": a busy or foreign address
            self.port = 0
        if self.port == 0:
            raise ListenError(f"cannot listen on {s.listen} (--listen): the address is in use or not on this host")

    async def _start(self) -> None:
        s = self.settings
        # A JoinGroup barrier parks one call per member: grpc's default max_pending_requests
        # (1,000 soft, 3,000 hard) would cancel the rest (docs/interfaces.md).
        options = [
            ("grpc.server.max_pending_requests", s.max_pending_requests),
            ("grpc.server.max_pending_requests_hard_limit", s.max_pending_requests),
            ("grpc.max_receive_message_length", s.max_message_bytes),
            ("grpc.max_send_message_length", MAX_ANSWER_BYTES),
            ("grpc.so_reuseport", 0),
            # members ping every client.member.KEEPALIVE_TIME_MS while a call is out (a parked
            # JoinGroup sends no data for its whole wait): grpc's default answers a third such
            # ping within 5 minutes with GOAWAY (too_many_pings); pings faster than this still do
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 1_000),
        ]
        server = grpc.aio.server(options=options)
        self._bind(server)
        self._server = server
        store: Store
        if s.replicated:
            self.ownership, store = await open_replicated(s.store, s.replica_id or default_replica_id(), s.lease_ms, self.metrics)
        else:
            store = GroupStore(Path(s.state_dir) / "state.db")
        await store.open()
        rebalance_log = RebalanceLog(Path(s.state_dir) / "rebalance-log", s.rebalance_log_max_bytes, s.rebalance_log_backups)
        runner = AssignorRunner(processes=s.assignor_processes, min_process_tasks=s.assignor_process_min_tasks)
        await runner.warm()
        # The Assign calls' problems in worker processes of their own: in the groups' process,
        # twelve calls at once held a group's rebalance (5,000 tasks) back from 0.4 s to 14.7 s.
        self._assign_runner = AssignorRunner(processes=s.assignor_processes, min_process_tasks=s.assignor_process_min_tasks)
        self.coordinator = Coordinator(s.group_settings(), self.clock, self._timers(), store, rebalance_log, self.metrics,
                                       runner=runner)
        self.coordinator.ownership = self.ownership
        self.retention = Retention(self.coordinator, self.clock, self.coordinator.timers, s.empty_group_retention_ms,
                                   on_expired=lambda _gid: self.metrics.groups_expired.inc())
        gate = self.gate = s.gate(self.metrics)
        self.metrics.expect_refused(refusals(gate.enabled))
        self.metrics.expect_internal_errors(METHODS)
        add_to_server(GroupLeaderServicer(self.coordinator, s.limits(), gate, self._assign_runner), server, self.metrics.internal_errors_seen, self.metrics.refused_seen)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
        )
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        await self.coordinator.start()
        self.retention.start()
        # Alone, FindCoordinator answers "me, at the address you used" unless told otherwise.
        self.coordinator.replica = ReplicaInfo(s.replica_id, s.advertise_address)
        if self.ownership is not None:
            address = advertised_address(s.advertise_address, s.listen, self.port)
            self.ownership.me = self.coordinator.replica = ReplicaInfo(self.ownership.me.replica_id, address)
            self.ownership.on_serving = self._serving
            await self.ownership.start(self.coordinator)
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if s.metrics_port:
            host = s.metrics_host or s.listen.rsplit(":", 1)[0].strip("[]") or "0.0.0.0"
            tls = ssl_context_for(Path(s.tls_cert), Path(s.tls_key), s.tls_client_ca) if s.metrics_tls else None
            page = LivePage(registry=self.metrics.registry, coordinator=lambda: self.coordinator, clock=self.clock,
                            gate=gate, mode=s.live_page, ssl_context=tls)
            rebalance_log.listeners.append(page.history.record_rebalance)
            self.metrics.expect_refused(page.refusals())
            try:
                await page.start(host, s.metrics_port, rebalance_log.path)
            except OSError as error:
                await page.stop()
                raise ListenError(f"cannot listen on {host}:{s.metrics_port} (--metrics-port): {error.strerror or error}") from None
            self._metrics_http = page
            self.metrics_port = page.port
        if not gate.enabled and not is_loopback(s.listen):
            log.warning("server.unauthenticated", listen=s.listen,
                        detail="listening beyond loopback with no authentication: anyone who reaches the port may "
                               "join, leave or describe any group (docs/security.md)")
        elif gate.enabled and s.acl_file is None:
            log.warning("server.no_acl_file", detail="authentication is on but no --acl-file: every call is denied")
        self._started = True
        log.info("server.started", listen=s.listen, port=self.port, state_dir=str(s.state_dir), metrics_port=self.metrics_port)

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful drain: NOT_SERVING, refuse new calls, durable state, answer parked calls,
        let in-flight calls finish within the drain timeout, then close."""
        grace = self.settings.drain_timeout_s if grace_s is None else grace_s
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.retention is not None:
            self.retention.stop()
        if self.coordinator is not None:
            await self.coordinator.drain()
        if self.ownership is not None:
            await self.ownership.stop(release=True)
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self.coordinator is not None:
            await self.coordinator.close()
        if self._assign_runner is not None:
            self._assign_runner.close()
            self._assign_runner = None
        if self._metrics_http is not None:
            await self._metrics_http.stop()
            self._metrics_http = None
        if self._started:
            log.info("server.stopped")
        self._started = False
