"""Durable group state: one JSON snapshot per group in SQLite (``STATE_DIR/state.db``).

Written before a response depends on it: the runtime asks for a write and awaits it before it
replies. Writes are coalesced per group (the latest state wins) and performed in request
order by one writer, so a burst of 5,000 joins costs one write per generation, not 5,000.
What survives a restart: generation, members (with their last lags), topology, config, end
offsets, the last assignment (and the last one computed, after a generation without one) and
the scheduled probe (docs/protocol.md, "Persistence").
Session deadlines do not: every member gets a fresh session timeout from the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import aiosqlite
import structlog

from assignor.cluster import AssignorError
from assignor.lag import MAX_LONG, Lag
from assignor.model import (
    AssignmentConfig,
    AssignmentProblem,
    HostInfo,
    StateStore,
    TaskId,
)
from assignor.scenario import parse_result, problem_to_document, result_to_document
from assignor.topology import SourceTopic, Subtopology, Topology
from server.group import Group, GroupSettings
from server.model import GroupSnapshot, LagReport, MemberSnapshot
from server.observability import compact_json

SNAPSHOT_SCHEMA = 1
log = structlog.get_logger(__name__)


class StoreError(OSError):
    """The state store cannot be opened or read; the message names the file and its flag."""


# ---- snapshot codec -----------------------------------------------------------------------------


def _task_map(mapping) -> dict[str, int]:
    return {str(t): v for t, v in sorted(mapping.items())}


def _parse_task_map(raw: dict[str, int]) -> dict[TaskId, int]:
    return {TaskId.parse(k): int(v) for k, v in raw.items()}


def topology_to_json(topology: Topology) -> list[dict[str, Any]]:
    return [
        {
            "id": sub.id,
            "source_topics": [
                {"name": t.name, "partition_count": t.partition_count, "partition_racks": [[p, sorted(r)] for p, r in t.partition_racks]}
                for t in sub.source_topics
            ],
            "state_stores": [{"name": s.name, "logged": s.logged} for s in sub.state_stores],
        }
        for sub in topology.subtopologies
    ]


def topology_from_json(raw: list[dict[str, Any]]) -> Topology:
    return Topology(
        tuple(
            Subtopology(
                sub["id"],
                tuple(
                    SourceTopic(t["name"], t["partition_count"], tuple((p, frozenset(r)) for p, r in t["partition_racks"]))
                    for t in sub["source_topics"]
                ),
                tuple(StateStore(s["name"], s["logged"]) for s in sub["state_stores"]),
            )
            for sub in raw
        )
    )


def snapshot_document(snapshot: GroupSnapshot) -> dict[str, Any]:
    """A group's durable state (what a ``Persist`` effect carries) as a JSON-able document."""
    config_doc = problem_to_document(AssignmentProblem((), (), snapshot.config))["config"] if snapshot.config else None
    # Written only when it is not the assignment (a generation ended without one), and without
    # the reasons (who ran what is all it is for): a large group's assignment is most of its
    # snapshot.
    remembered = snapshot.last_assignment
    memory = {} if remembered is None or remembered is snapshot.result else {"last_assignment": result_to_document(remembered)}
    return {
        "schema": SNAPSHOT_SCHEMA,
        "group_id": snapshot.group_id,
        "state": snapshot.state,
        "generation": snapshot.generation,
        "protocol_version": snapshot.protocol_version,
        "topology": topology_to_json(snapshot.topology) if snapshot.topology else None,
        "config": config_doc,
        "end_offsets": _task_map(snapshot.end_offsets),
        "result": result_to_document(snapshot.result, explain=True) if snapshot.result else None,
        "assignment_error": int(snapshot.assignment_error),
        "last_rebalance_ms": snapshot.last_rebalance_ms,
        "last_trigger": snapshot.last_trigger,
        "pending_trigger": snapshot.pending_trigger,
        "next_probe_ms": snapshot.next_probe_ms,
        "next_probe_reason": snapshot.next_probe_reason,
        "creator": snapshot.creator,
        "unsynced": list(snapshot.unsynced) if snapshot.unsynced is not None else None,
        **memory,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "process_id": m.process_id,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "version": m.version,
                "latest_supported_version": m.latest_supported_version,
                "num_threads": m.num_threads,
                "endpoint": [m.endpoint.host, m.endpoint.port] if m.endpoint else None,
                "rack": m.rack,
                "client_tags": dict(m.client_tags),
                "lags": {
                    "task_lags": {str(t): lag.to_wire() for t, lag in sorted(m.report.task_lags.items())},
                    "offset_sums": _task_map(m.report.offset_sums),
                    "end_offsets": _task_map(m.report.end_offsets),
                },
                "lags_updated_ms": m.lags_updated_ms,
                "shutdown_requested": m.shutdown_requested,
                "principal": m.principal,
            }
            for m in snapshot.members
        ],
    }


def encode_snapshot(snapshot: GroupSnapshot) -> str:
    """The stored text of a snapshot (a large group's is megabytes: the store's writer calls
    this in a worker thread)."""
    return compact_json(snapshot_document(snapshot))


def _config_from_json(raw: dict[str, Any]) -> AssignmentConfig:
    return AssignmentConfig(**{**raw, "rack_aware_assignment_tags": tuple(raw["rack_aware_assignment_tags"])})


def snapshot_from_document(document: dict[str, Any]) -> GroupSnapshot:
    if document.get("schema") != SNAPSHOT_SCHEMA:
        raise ValueError(f"unsupported snapshot schema {document.get('schema')!r}")
    end_offsets = _parse_task_map(document["end_offsets"])
    result = parse_result(document["result"], "result") if document["result"] else None
    # absent: the memory is the assignment (and in snapshots of servers that kept no other)
    memory = parse_result(document["last_assignment"], "last_assignment") if document.get("last_assignment") else result
    members = []
    for raw in document["members"]:
        lags = raw["lags"]
        members.append(MemberSnapshot(
            member_id=raw["member_id"],
            group_instance_id=raw["group_instance_id"],
            process_id=raw["process_id"],
            session_timeout_ms=raw["session_timeout_ms"],
            rebalance_timeout_ms=raw["rebalance_timeout_ms"],
            version=raw["version"],
            latest_supported_version=raw["latest_supported_version"],
            num_threads=raw["num_threads"],
            endpoint=HostInfo(*raw["endpoint"]) if raw["endpoint"] else None,
            rack=raw["rack"],
            client_tags=MappingProxyType(raw["client_tags"]),
            report=LagReport(
                MappingProxyType({t: Lag.from_wire(lag) for t, lag in _parse_task_map(lags["task_lags"]).items()}),
                MappingProxyType(_parse_task_map(lags["offset_sums"])),
                MappingProxyType(_parse_task_map(lags["end_offsets"])),
            ),
            lags_updated_ms=raw["lags_updated_ms"],
            shutdown_requested=raw["shutdown_requested"],
            principal=raw.get("principal", ""),
        ))
    return GroupSnapshot(
        group_id=document["group_id"],
        state=document["state"],
        generation=document["generation"],
        protocol_version=document["protocol_version"],
        topology=topology_from_json(document["topology"]) if document["topology"] is not None else None,
        config=_config_from_json(document["config"]) if document["config"] is not None else None,
        end_offsets=MappingProxyType(end_offsets),
        result=result,
        last_assignment=memory,
        assignment_error=AssignorError(document["assignment_error"]),
        last_rebalance_ms=document["last_rebalance_ms"],
        last_trigger=document["last_trigger"],
        pending_trigger=document["pending_trigger"],
        # stored beyond int64 by a server that let now + interval overflow (assignor.probing)
        next_probe_ms=None if document["next_probe_ms"] is None else min(document["next_probe_ms"], MAX_LONG),
        next_probe_reason=document["next_probe_reason"],
        members=tuple(members),
        creator=document.get("creator", ""),  # absent in snapshots of servers before the quota
        # absent in snapshots of servers that did not store it (their Stable was never written)
        unsynced=tuple(document["unsynced"]) if document.get("unsynced") is not None else None,
    )


def restore(document: dict[str, Any], settings: GroupSettings) -> Group:
    """Rebuild a group from its stored document (``Group.from_snapshot`` decides what state it
    comes back in)."""
    return Group.from_snapshot(snapshot_from_document(document), settings)


# ---- the SQLite store -----------------------------------------------------------------------------


class Store(Protocol):
    """What the runtime needs of durable group state, whatever the engine: SQLite for one
    instance (``GroupStore``), PostgreSQL for several replicas (``server.store_postgres``).
    ``request(group_id, snapshot)`` resolves once that snapshot (or a later one of the group) is
    durable, so a reply awaited after it never depends on state that a crash could lose. The
    snapshot is a frozen ``GroupSnapshot``: the writer encodes only the latest of a group's
    coalesced snapshots, off the event loop, and no group lock waits for it."""

    async def open(self) -> None: ...
    async def load_all(self) -> list[dict[str, Any]]: ...
    def start(self) -> None: ...
    def request(self, group_id: str, snapshot: GroupSnapshot) -> asyncio.Future: ...
    def forget(self, group_id: str) -> asyncio.Future: ...
    async def flush(self) -> None: ...
    async def close(self) -> None: ...


class GroupStore:
    """SQLite persistence with one coalescing writer task (the embedded default ``Store``)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._db: aiosqlite.Connection | None = None
        #: the latest snapshot (None: delete the group, it expired) and its waiters
        self._dirty: dict[str, tuple[GroupSnapshot | None, list[asyncio.Future]]] = {}
        self._writing: list[asyncio.Future] = []  # the waiters of the write under way
        self._wake = asyncio.Event()
        self._writer: asyncio.Task | None = None

    async def open(self) -> None:
        """Open (or create) ``state.db``. A file that is not a readable SQLite database (random
        bytes, a truncated copy, a directory) raises ``StoreError`` naming it, with the
        connection's thread stopped (it would keep the process alive) and the file not written."""
        if self._path.exists() and not self._path.is_file():
            raise StoreError(f"--state-dir: {self._path} is not a file (expected the SQLite database state.db)")
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"--state-dir: cannot create {self._path.parent}: {error.strerror or error}") from None
        side_files = [self._path.with_name(self._path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]
        existed = {side for side in side_files if side.exists()}
        try:
            self._db = await aiosqlite.connect(self._path)
            # Read before anything writes: a file that is not a database fails here, untouched.
            async with self._db.execute("SELECT count(*) FROM sqlite_master") as cursor:
                await cursor.fetchall()
            await self._db.execute("PRAGMA journal_mode=WAL")
            await self._db.execute("PRAGMA synchronous=NORMAL")
            await self._db.execute(
                "CREATE TABLE IF NOT EXISTS groups (group_id TEXT PRIMARY KEY, snapshot TEXT NOT NULL, updated_ms INTEGER NOT NULL)"
            )
            await self._db.commit()
        except sqlite3.Error as error:
            await self._close_quietly()
            for side in side_files:  # the WAL files this attempt made, not a crash's
                if side not in existed:
                    with contextlib.suppress(OSError):
                        side.unlink()
            raise StoreError(f"--state-dir: {self._path} is not a readable SQLite database ({error})") from None

    async def _close_quietly(self) -> None:
        if self._db is not None:
            with contextlib.suppress(Exception):
                await self._db.close()
            self._db = None

    async def load_all(self) -> list[dict[str, Any]]:
        if self._db is None:
            raise RuntimeError("store not open")
        try:
            async with self._db.execute("SELECT snapshot FROM groups ORDER BY group_id") as cursor:
                rows = await cursor.fetchall()
            return [json.loads(row[0]) for row in rows]
        except sqlite3.Error as error:
            raise StoreError(f"--state-dir: {self._path} is not a readable SQLite database ({error})") from None
        except (ValueError, TypeError) as error:
            raise StoreError(f"--state-dir: {self._path} holds a group snapshot that is not JSON ({error})") from None

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write_loop(), name="group-store-writer")

    def request(self, group_id: str, snapshot: GroupSnapshot) -> asyncio.Future:
        """A future that resolves once ``snapshot`` (a ``Persist`` effect's state) or a later
        snapshot of the group is durable: writes coalesce to the latest, and only what is written
        is encoded."""
        future = asyncio.get_running_loop().create_future()
        _, waiters = self._dirty.get(group_id, (None, []))
        self._dirty[group_id] = (snapshot, [*waiters, future])
        self._wake.set()
        return future

    def forget(self, group_id: str) -> asyncio.Future:
        """A future that resolves once the group's row is deleted (an expired group, taken out
        under its lock), unless a later snapshot of a group of that id replaces the deletion."""
        return self.request(group_id, None)  # type: ignore[arg-type]

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                group_id, (snapshot, waiters) = next(iter(self._dirty.items()))
                del self._dirty[group_id]
                self._writing = waiters
                await self._write_for(group_id, snapshot, waiters)
                self._writing = []

    async def _write_for(self, group_id: str, snapshot: GroupSnapshot | None, waiters: list[asyncio.Future]) -> None:
        """One write (a deletion when ``snapshot`` is None), its outcome handed to every waiter
        (an error too: the others go on). The snapshot is encoded here, in a worker thread (a
        large group's is megabytes)."""
        try:
            if snapshot is None:
                await self._delete(group_id)
            else:
                await self._put(group_id, await asyncio.to_thread(encode_snapshot, snapshot))
        except Exception as error:
            log.error("store.write.failed", group_id=group_id, error=repr(error))
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error)
            return
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _delete(self, group_id: str) -> None:
        if self._db is None:
            raise RuntimeError("store not open")
        await self._db.execute("DELETE FROM groups WHERE group_id = ?", (group_id,))
        await self._db.commit()

    async def _put(self, group_id: str, text: str) -> None:
        """Make one group's snapshot durable (the part a store of another engine replaces)."""
        if self._db is None:
            raise RuntimeError("store not open")
        updated = time.time_ns() // 1_000_000
        await self._db.execute(
            "INSERT INTO groups (group_id, snapshot, updated_ms) VALUES (?, ?, ?) "
            "ON CONFLICT(group_id) DO UPDATE SET snapshot = excluded.snapshot, updated_ms = excluded.updated_ms",
            (group_id, text, updated),
        )
        await self._db.commit()

    async def flush(self) -> None:
        """Wait until every requested write is done, the one being written too (a write that no
        reply waits for, such as a group's Stable, may be under way when the server stops)."""
        while pending := [f for f in (*self._writing, *(f for _, waiters in self._dirty.values() for f in waiters))
                          if not f.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self._db is not None:
            await self._db.close()
            self._db = None
