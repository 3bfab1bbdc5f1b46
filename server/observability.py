"""Operations plumbing for the runtime: structlog JSON logs, Prometheus metrics and the
rebalance log (docs/interfaces.md, "Rebalance log").

The state machine emits ``Event`` effects; ``Telemetry.record`` turns each into a log line with
``group_id``, ``member_id`` and ``generation`` bound, and into metrics. The registry is per
server instance so that tests can run several servers in one process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import logging.handlers
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = structlog.get_logger("server")

#: Per-member events are frequent in large groups: logged at debug, the rest at info.
_DEBUG_EVENTS = frozenset({"group.member.joined", "group.probe.scheduled", "group.stable", "group.restored"})


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """structlog to standard error, JSON by default (docs/interfaces.md, --log-format)."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


class Metrics:
    """The server's Prometheus metrics (docs/interfaces.md, `--metrics-port`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rebalances = Counter("remote_leader_rebalances", "Completed rebalances", ["group", "trigger"], registry=r)
        self.generation = Gauge("remote_leader_group_generation", "Current generation of the group", ["group"], registry=r)
        self.members = Gauge("remote_leader_group_members", "Members of the group", ["group"], registry=r)
        self.compute_seconds = Histogram(
            "remote_leader_assignment_compute_seconds",
            "Time the assignor took for one rebalance",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.warmups = Gauge("remote_leader_warmups_in_flight", "Warm-up replicas in the current assignment", ["group"], registry=r)
        self.probes_scheduled = Counter("remote_leader_probes_scheduled", "Probing rebalances scheduled", ["group", "reason"], registry=r)
        self.probes_fired = Counter("remote_leader_probes_fired", "Probing rebalances fired", ["group", "reason"], registry=r)
        # Several replicas over PostgreSQL (docs/high-availability.md); zero with the SQLite store.
        self.leases_held = Gauge("remote_leader_leases_held", "Group leases this replica holds", registry=r)
        self.takeovers = Counter("remote_leader_takeovers", "Groups this replica took over from another (epoch > 1)", registry=r)
        self.fenced_writes = Counter("remote_leader_fenced_writes", "Writes refused because another replica took the group over", registry=r)
        self.internal_errors = Counter(
            "remote_leader_rpc_internal_errors", "Calls answered INTERNAL after an unexpected exception", ["method"], registry=r
        )
        self.refused = Counter(
            "remote_leader_requests_refused",
            "Calls refused by a limit or by authentication/authorization (docs/security.md)",
            ["method", "code", "reason"],
            registry=r,
        )

        self.groups_expired = Counter("remote_leader_groups_expired", "Empty groups removed after the retention", registry=r)
        self._group_series: dict[str, set[tuple[Any, tuple[str, ...]]]] = {}

    def of_group(self, metric, group_id: str, *labels: str):
        """``metric``'s series of this group (and further label values), remembered for
        ``forget_group``."""
        self._group_series.setdefault(group_id, set()).add((metric, (group_id, *labels)))
        return metric.labels(group_id, *labels)

    def forget_group(self, group_id: str) -> None:
        """Drop the group's series: it expired, or another replica serves it now. Its ids are
        the callers' to choose, so series kept for every group ever seen grow without bound, and
        a replica that lost a group exported its gauges beside the new owner's (dashboards
        summing members or warm-ups counted it twice)."""
        for metric, labels in self._group_series.pop(group_id, ()):
            metric.remove(*labels)

    def expect_refused(self, combinations: Iterable[tuple[str, str, str]]) -> None:
        """Export these (method, code, reason) at 0 until they happen. A series that first
        appears at 1 reads "No data" before it (a panel, an ``absent()`` alert), and ``rate()``
        and ``increase()`` miss that first refusal: there is no earlier sample to count it from.
        Only known, closed sets of labels (``server.edge.refusals``): never group ids."""
        for labels in combinations:
            self.refused.labels(*labels)

    def expect_internal_errors(self, methods: Iterable[str]) -> None:
        """As ``expect_refused``, for the RPC methods."""
        for method in methods:
            self.internal_errors.labels(method)

    def refused_seen(self, method: str, code: str, reason: str) -> None:
        self.refused.labels(method, code, reason).inc()

    def internal_errors_seen(self, method: str) -> None:
        self.internal_errors.labels(method).inc()


class Telemetry:
    """Events to logs and metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def record(self, group_id: str, generation: int, members: int, name: str, fields: dict[str, Any]) -> None:
        m = self.metrics
        if name == "group.rebalance.completed":
            m.of_group(m.rebalances, group_id, fields.get("trigger", "")).inc()
            if "compute_ms" in fields:
                m.compute_seconds.observe(fields["compute_ms"] / 1000.0)
            m.of_group(m.warmups, group_id).set(fields.get("warmups", 0))
        elif name == "group.probe.scheduled":
            m.of_group(m.probes_scheduled, group_id, fields["reason"]).inc()
        elif name == "group.probe.fired":
            m.of_group(m.probes_fired, group_id, fields["reason"]).inc()
        elif name == "group.restored":  # loaded at start or taken over: what it holds now
            m.of_group(m.warmups, group_id).set(fields["warmups"])
        elif name == "group.empty":  # nobody restores anything any more
            m.of_group(m.warmups, group_id).set(0)
        m.of_group(m.generation, group_id).set(generation)
        m.of_group(m.members, group_id).set(members)
        (log.debug if name in _DEBUG_EVENTS else log.info)(name, **{"group_id": group_id, "generation": generation, **fields})


class RebalanceLog:
    """JSON lines, one completed rebalance per line, rotated by size (docs/interfaces.md).

    Appends are queued and written in order by one task, off the event loop."""

    def __init__(self, directory: Path, max_bytes: int = 104_857_600, backups: int = 10) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "rebalances.jsonl"
        self._handler = logging.handlers.RotatingFileHandler(self.path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._queue: asyncio.Queue[Callable[[], dict[str, Any]] | None] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        #: Called with each record as it is appended (the live page's recent rebalances).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._drain(), name="rebalance-log-writer")

    def append(self, build: Callable[[], dict[str, Any]]) -> None:
        """Queue a record's builder, called off the event loop (a large group's record is
        megabytes of JSON). Listeners see each record once it is written."""
        self._queue.put_nowait(build)

    def _write(self, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        record = build()
        self._handler.emit(logging.makeLogRecord({"msg": compact_json(record), "args": None}))
        return record

    async def _drain(self) -> None:
        while True:
            build = await self._queue.get()
            if build is None:
                return
            try:
                record = await asyncio.to_thread(self._write, build)
            except Exception as error:  # never lose the server over the log
                log.error("rebalance_log.write.failed", error=repr(error))
                continue
            for listener in self.listeners:
                try:
                    listener(record)
                except Exception as error:  # a reader (the live page) never takes the log down
                    log.error("rebalance_log.listener.failed", error=repr(error))

    async def close(self) -> None:
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
            self._task = None
        self._handler.close()


def compact_json(document: Any, depth: int = 3) -> str:
    """``json.dumps(document, separators=(",", ":"))``, encoded a piece at a time down to
    ``depth`` levels of nesting. The C encoder holds the GIL for a whole call: one megabyte-sized
    call in a worker thread stalls the event loop for as long, many small ones let it run
    between them."""
    if depth > 0 and isinstance(document, dict) and all(isinstance(key, str) for key in document):
        return "{" + ",".join(f"{json.dumps(key)}:{compact_json(value, depth - 1)}" for key, value in document.items()) + "}"
    if depth > 0 and isinstance(document, list | tuple):
        return "[" + ",".join(compact_json(value, depth - 1) for value in document) + "]"
    return json.dumps(document, separators=(",", ":"))
