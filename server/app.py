"""Assembly of one running server: the grpc.aio server with the GroupLeader servicer, health
checking, reflection, Prometheus metrics, the state store and the rebalance log.

``Settings`` is the table of docs/interfaces.md ("Server settings"); ``server.cli`` fills it
from flags and the environment. ``LeaderServer`` is what the CLI, the tests and the benchmark
start and stop; tests inject a ``FakeClock`` (which is its own timer set).
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, fields
from pathlib import Path

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from remote_leader.v1 import group_leader_pb2
from server.edge import GroupLeaderServicer, add_to_server
from server.group import GroupSettings
from server.limits import Limits
from server.model import ReplicaInfo
from server.observability import Metrics, RebalanceLog
from server.ownership import Ownership, advertised_address, default_replica_id
from server.runtime import Coordinator
from server.store import GroupStore, Store
from server.store_postgres import open_replicated
from server.timers import AsyncioTimers, Clock, FakeClock, SystemClock, Timers

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
    log_level: str = "info"
    log_format: str = "json"
    event_loop: str = "auto"
    # docs/security.md, "Limits"
    max_message_bytes: int = _DEFAULT_LIMITS.max_message_bytes
    max_partitions_per_topic: int = _DEFAULT_LIMITS.max_partitions_per_topic
    max_partitions_per_group: int = _DEFAULT_LIMITS.max_partitions_per_group
    max_subtopologies: int = _DEFAULT_LIMITS.max_subtopologies
    max_tasks_per_group: int = _DEFAULT_LIMITS.max_tasks_per_group
    max_members_per_group: int = _DEFAULT_LIMITS.max_members_per_group
    max_groups: int = _DEFAULT_LIMITS.max_groups
    max_tasks_per_assign: int = _DEFAULT_LIMITS.max_tasks_per_assign
    max_clients_per_assign: int = _DEFAULT_LIMITS.max_clients_per_assign
    max_rebalance_timeout_ms: int = _DEFAULT_LIMITS.max_rebalance_timeout_ms

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

    def group_settings(self) -> GroupSettings:
        return GroupSettings(
            min_session_timeout_ms=self.min_session_timeout_ms,
            max_session_timeout_ms=self.max_session_timeout_ms,
            initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
            min_probe_interval_ms=self.min_probe_interval_ms,
            early_probe=self.early_probe,
        )


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
        self._metrics_http = None
        self.coordinator: Coordinator | None = None
        self.ownership: Ownership | None = None

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
        s = self.settings
        store: Store
        if s.replicated:
            self.ownership, store = await open_replicated(s.store, s.replica_id or default_replica_id(), s.lease_ms, self.metrics)
        else:
            store = GroupStore(Path(s.state_dir) / "state.db")
        await store.open()
        rebalance_log = RebalanceLog(Path(s.state_dir) / "rebalance-log", s.rebalance_log_max_bytes, s.rebalance_log_backups)
        self.coordinator = Coordinator(s.group_settings(), self.clock, self._timers(), store, rebalance_log, self.metrics)
        self.coordinator.ownership = self.ownership
        # A JoinGroup barrier parks one call per member: grpc's default max_pending_requests
        # (1,000 soft, 3,000 hard) would cancel the rest (docs/interfaces.md).
        options = [
            ("grpc.server.max_pending_requests", s.max_pending_requests),
            ("grpc.server.max_pending_requests_hard_limit", s.max_pending_requests),
            ("grpc.max_receive_message_length", s.max_message_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.aio.server(options=options)
        add_to_server(GroupLeaderServicer(self.coordinator, s.limits()), server, self.metrics.internal_errors_seen)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
        )
        if s.tls_cert and s.tls_key:
            credentials = grpc.ssl_server_credentials([(Path(s.tls_key).read_bytes(), Path(s.tls_cert).read_bytes())])
            self.port = server.add_secure_port(s.listen, credentials)
        else:
            self.port = server.add_insecure_port(s.listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {s.listen}")
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        self._server = server
        await self.coordinator.start()
        address = advertised_address(s.advertise_address, s.listen, self.port)
        self.coordinator.replica = ReplicaInfo(s.replica_id, address)
        if self.ownership is not None:
            self.ownership.me = self.coordinator.replica = ReplicaInfo(self.ownership.me.replica_id, address)
            self.ownership.on_serving = self._serving
            await self.ownership.start(self.coordinator)
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if s.metrics_port:
            host = s.listen.rsplit(":", 1)[0].strip("[]") or "0.0.0.0"
            self._metrics_http, _ = start_http_server(s.metrics_port, addr=host, registry=self.metrics.registry)
            self.metrics_port = self._metrics_http.server_port
        log.info("server.started", listen=s.listen, port=self.port, state_dir=str(s.state_dir), metrics_port=self.metrics_port)

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful drain: NOT_SERVING, refuse new calls, durable state, answer parked calls,
        let in-flight calls finish within the drain timeout, then close."""
        grace = self.settings.drain_timeout_s if grace_s is None else grace_s
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.coordinator is not None:
            await self.coordinator.drain()
        if self.ownership is not None:
            await self.ownership.stop(release=True)
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self.coordinator is not None:
            await self.coordinator.close()
        if self._metrics_http is not None:
            with contextlib.suppress(Exception):
                self._metrics_http.shutdown()
                self._metrics_http.server_close()
            self._metrics_http = None
        log.info("server.stopped")
