"""Durable group state in PostgreSQL, shared by several replicas of the leader.

The same coalescing, ordered writer as the SQLite store (``server.store.GroupStore``), with two
differences. The schema is created and migrated by the service itself (``MIGRATIONS``, applied
under a transaction-level advisory lock, so replicas starting together migrate once). And every
write is fenced: it lands only if the writing replica still holds the group's lease at the
epoch it loaded the group with (``server.ownership``), checked in the same statement that
writes, with the lease row locked ``FOR SHARE`` so that a takeover (which updates that row)
waits for a write in flight and a write after a takeover finds the new epoch and changes
nothing. docs/high-availability.md explains the design.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.model import NotCoordinator, StoreUnavailable
from server.ownership import Ownership
from server.store import GroupStore

log = structlog.get_logger(__name__)

#: Schema versions in order; version N is MIGRATIONS[N - 1]. Never edit a released one: add.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE replicas (
        replica_id text PRIMARY KEY,
        address text NOT NULL,
        expires_at timestamptz NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE group_leases (
        group_id text PRIMARY KEY,
        owner text NOT NULL,
        epoch bigint NOT NULL,
        expires_at timestamptz NOT NULL
    );
    CREATE INDEX group_leases_owner ON group_leases (owner);
    CREATE INDEX group_leases_expires ON group_leases (expires_at);
    CREATE TABLE groups (
        group_id text PRIMARY KEY,
        snapshot text NOT NULL,
        epoch bigint NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
#: Concurrent group writes (each holds one pooled connection for one statement).
WRITERS = 6
#: The advisory lock key that serialises migrations between replicas ("rl-schema" in ASCII).
_MIGRATION_LOCK = 0x726C2D736368656D

_FENCED_DELETE = """
WITH lease AS (
    UPDATE group_leases SET expires_at = now() - interval '1 millisecond'
    WHERE group_id = %(group_id)s AND owner = %(owner)s AND epoch = %(epoch)s
    RETURNING group_id
)
DELETE FROM groups WHERE group_id IN (SELECT group_id FROM lease)
"""
"""An expired group's row goes, and its lease is handed back in the same statement, only while
the writer holds the lease. The lease row itself stays: its epoch must keep growing for any
later group of the same id, or an old replica's stale epoch could match again."""

_FENCED_WRITE = """
WITH lease AS (
    SELECT epoch FROM group_leases
    WHERE group_id = %(group_id)s AND owner = %(owner)s AND epoch = %(epoch)s
    FOR SHARE
)
INSERT INTO groups AS g (group_id, snapshot, epoch, updated_at)
SELECT %(group_id)s, %(snapshot)s, epoch, now() FROM lease
ON CONFLICT (group_id) DO UPDATE
    SET snapshot = EXCLUDED.snapshot, epoch = EXCLUDED.epoch, updated_at = now()
    WHERE g.epoch <= EXCLUDED.epoch
RETURNING 1
"""


class FencedWrite(NotCoordinator):
    """A write refused by PostgreSQL: another replica took the group over (a higher epoch)."""


class StoreSchemaError(ValueError):
    """A database this server cannot use (migrated by a newer server): refused at start like a
    bad setting, in one line naming ``--store`` (a RuntimeError, it was a 35-line traceback)."""


def open_pool(dsn: str, *, max_size: int = 10) -> AsyncConnectionPool:
    """Autocommit connections: every statement is its own transaction (the fenced write is
    one statement, so no lock outlives it even if this process is paused). Each connection is
    checked as it is handed out (a round trip): after a PostgreSQL restart the pool held
    connections the restart had closed, and the first write on one failed a JoinGroup with
    INTERNAL, which the worker library takes as fatal."""
    return AsyncConnectionPool(dsn, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True},
                               name="remote-leader", check=AsyncConnectionPool.check_connection)


async def migrate(pool: AsyncConnectionPool) -> int:
    """Create or upgrade the schema to ``SCHEMA_VERSION``; returns the version found before."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute("CREATE TABLE IF NOT EXISTS remote_leader_schema (version integer NOT NULL)")
        row = await (await conn.execute("SELECT max(version) FROM remote_leader_schema")).fetchone()
        found = (row[0] if row else None) or 0
        if found > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"--store: the database's schema version {found} is newer than this server's {SCHEMA_VERSION}: upgrade the server")
        for version in range(found + 1, SCHEMA_VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO remote_leader_schema (version) VALUES (%s)", (version,))
            log.info("store.schema.migrated", version=version)
    return found


class PostgresStore(GroupStore):
    """Group snapshots in PostgreSQL, written only under the writer's lease epoch.

    ``lease(group_id)`` returns ``(owner, epoch)`` of this replica's lease on the group, or
    None when it holds none (the write is then refused before it is sent)."""

    def __init__(self, pool: AsyncConnectionPool, lease: Callable[[str], tuple[str, int] | None],
                 released: Callable[[str, int], None] | None = None) -> None:
        super().__init__(path=None)  # type: ignore[arg-type]
        self._pool = pool
        self._lease = lease
        self._released = released
        self._tasks: set[asyncio.Task] = set()

    async def open(self) -> None:
        await migrate(self._pool)

    async def load_all(self) -> list[dict[str, Any]]:
        """Nothing at start: a replica loads a group when it takes its lease (server.ownership)."""
        return []

    async def load(self, group_id: str) -> dict[str, Any] | None:
        async with self._pool.connection() as conn:
            row = await (await conn.execute("SELECT snapshot FROM groups WHERE group_id = %s", (group_id,))).fetchone()
        return json.loads(row[0]) if row else None

    async def _write_loop(self) -> None:
        """Up to ``WRITERS`` groups written at once (a server round trip and a commit each),
        never one group twice at once: a group asked for again while its write is in flight
        stays dirty and is written after it, so a later request still sees a later snapshot."""
        in_flight: set[str] = set()
        slots = asyncio.Semaphore(WRITERS)

        def finished(group_id: str, task: asyncio.Task) -> None:
            in_flight.discard(group_id)
            self._tasks.discard(task)
            slots.release()
            self._wake.set()

        while True:
            await self._wake.wait()
            self._wake.clear()
            for group_id in [g for g in self._dirty if g not in in_flight]:
                await slots.acquire()
                snapshot, waiters = self._dirty.pop(group_id)  # only this loop takes entries out
                in_flight.add(group_id)
                task = asyncio.get_running_loop().create_task(self._write_for(group_id, snapshot, waiters))
                self._tasks.add(task)
                task.add_done_callback(lambda t, g=group_id: finished(g, t))

    async def flush(self) -> None:
        """Wait until every requested write is done, those in flight included."""
        while self._dirty or self._tasks:
            await super().flush()
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _held_lease(self, group_id: str) -> tuple[str, int]:
        """(owner, epoch) of this replica's lease on the group; a write without one is refused
        before it is sent."""
        lease = self._lease(group_id)
        if lease is None:
            raise NotCoordinator(None, f"this replica does not own group {group_id!r}")
        return lease

    async def _put(self, group_id: str, text: str) -> None:
        owner, epoch = self._held_lease(group_id)
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(_FENCED_WRITE, {"group_id": group_id, "owner": owner, "epoch": epoch,
                                                            "snapshot": text})
                written = await cursor.fetchone()
        except (psycopg.Error, PoolTimeout) as error:
            # Not durable: the caller unloads the group (as for a fenced write) and it comes back
            # from its last durable snapshot; the members are told NOT_COORDINATOR and retry.
            log.warning("store.write.failed", group_id=group_id, error=type(error).__name__)
            raise StoreUnavailable(None, f"PostgreSQL unreachable: {type(error).__name__}") from None
        if written is None:
            log.warning("store.write.fenced", group_id=group_id, epoch=epoch)
            raise FencedWrite(None, f"group {group_id!r}: lease epoch {epoch} was taken over")

    async def _delete(self, group_id: str) -> None:
        """An expired group's row goes only while this replica still holds its lease."""
        owner, epoch = self._held_lease(group_id)
        async with self._pool.connection() as conn:
            await conn.execute(_FENCED_DELETE, {"group_id": group_id, "owner": owner, "epoch": epoch})
        if self._released is not None:
            self._released(group_id, epoch)

    async def close(self) -> None:
        await self.flush()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None
        await self._pool.close()


async def open_replicated(dsn: str, replica_id: str, lease_ms: int, metrics: Any) -> tuple[Ownership, PostgresStore]:
    """The ownership and the store of one replica, sharing one connection pool (the store
    closes it). Fails with a clear error when the database cannot be reached."""
    pool = open_pool(dsn)
    try:
        await pool.open(wait=True, timeout=10)
    except Exception as error:
        await pool.close()
        raise OSError(f"--store: cannot connect to PostgreSQL: {error}") from None
    ownership = Ownership(pool, replica_id, "", lease_ms, metrics=metrics)
    return ownership, PostgresStore(pool, ownership.lease, ownership.released)
