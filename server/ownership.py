"""Group ownership between replicas of the leader: leases in PostgreSQL, with fencing epochs.

Every group is owned by one replica at a time, through a row of ``group_leases``
(``group_id, owner, epoch, expires_at``). Why lease rows and not advisory locks: an advisory
lock lives as long as its PostgreSQL session, so a replica that is paused (SIGSTOP, a long GC,
a frozen VM) or cut off behind a half-open TCP connection keeps its groups until the server
notices the dead connection, which can take the kernel's keep-alive time; and a lock carries
no number that a later write could be checked against. A lease row expires at a time
PostgreSQL's own clock decides, and its epoch, raised by one at every takeover, is the fencing
token that every write of the group's state must carry (``server.store_postgres``).

- Renewal: every ``lease_ms / 3`` a replica renews its own row in ``replicas`` and, in one
  statement, the leases of the groups it serves. A group missing from the answer (or at another
  epoch) was taken over: it is unloaded here at once.
- Local validity: a replica answers for its groups only until ``lease_ms * 0.8`` after the start
  of its last successful renewal (measured on its own monotonic clock). Past that (PostgreSQL
  unreachable, or this process was paused) it unloads every group and reports NOT_SERVING
  instead of serving state that another replica may already have taken over.
- Placement: a group without a live lease goes to the live replica that rendezvous hashing
  picks (highest ``sha256(group_id, replica_id)``): every replica computes the same choice from
  the same live set with no coordination, and groups spread evenly, so N replicas serve about N
  times as many groups. Existing leases never move while their owner lives.
- Takeover: each renewal pass also claims the expired leases that hashing gives this replica,
  raising their epoch, and loads each group's last durable snapshot (generation, members,
  assignment, scheduled probe): Stable members carry on in their generation, a rebalance in
  flight completes when the members rejoin.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.model import NotCoordinator, ReplicaInfo

log = structlog.get_logger(__name__)

#: The share of the lease during which a replica trusts its last renewal (the rest is margin
#: for the renewal's own round trip and for clock-rate differences).
VALID_SHARE = 0.8
#: Expired leases examined per renewal pass.
TAKEOVER_BATCH = 500


class Adopter(Protocol):
    """What ownership needs of the runtime (``server.runtime.Coordinator``)."""

    async def adopt(self, group_id: str, document: dict[str, Any] | None) -> None: ...
    async def forget(self, group_id: str) -> None: ...


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def advertised_address(advertise: str, listen: str, port: int) -> str:
    """host:port that clients of another replica are redirected to."""
    if advertise:
        return advertise
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"{host}:{port}"


def rendezvous(group_id: str, replicas: list[ReplicaInfo]) -> ReplicaInfo | None:
    """The replica that hashing gives ``group_id`` among ``replicas`` (highest random weight)."""
    best: tuple[bytes, ReplicaInfo] | None = None
    for replica in replicas:
        weight = hashlib.sha256(f"{group_id}\x00{replica.replica_id}".encode()).digest()
        if best is None or weight > best[0]:
            best = (weight, replica)
    return best[1] if best else None


class Ownership:
    """This replica's leases, their renewal, takeovers and the FindCoordinator answer."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        replica_id: str,
        address: str,
        lease_ms: int,
        *,
        metrics: Any = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.me = ReplicaInfo(replica_id, address)
        self.lease_ms = lease_ms
        self.metrics = metrics
        self._monotonic = monotonic
        self.leases: dict[str, int] = {}
        self._valid_until = 0.0
        self._adopter: Adopter | None = None
        self._claiming: dict[str, list] = {}  # group_id -> [lock, users]
        self._task: asyncio.Task | None = None
        self.serving = False
        self.on_serving: Callable[[bool], Awaitable[None]] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self, adopter: Adopter) -> None:
        """Register this replica and hold a first valid renewal before serving anything."""
        self._adopter = adopter
        await self._renew()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="ownership-leases")

    async def stop(self, *, release: bool = True) -> None:
        """Stop renewing; on a graceful stop, hand every lease back at once (no wait for expiry)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if release:
            with contextlib.suppress(Exception):
                async with self.pool.connection(timeout=2) as conn:
                    await conn.execute(
                        "UPDATE group_leases SET expires_at = now() - interval '1 millisecond' "
                        "WHERE owner = %s AND group_id = ANY(%s)", (self.me.replica_id, list(self.leases)))
                    await conn.execute("DELETE FROM replicas WHERE replica_id = %s", (self.me.replica_id,))
        self.leases.clear()

    # ---- questions the runtime asks ------------------------------------------------------------

    def valid(self) -> bool:
        return self._monotonic() < self._valid_until

    def lease(self, group_id: str) -> tuple[str, int] | None:
        """(owner, epoch) for a fenced write, when this replica holds the group's lease."""
        epoch = self.leases.get(group_id)
        return None if epoch is None else (self.me.replica_id, epoch)

    def owner_of(self, group_id: str) -> ReplicaInfo | None:
        epoch = self.leases.get(group_id)
        return None if epoch is None else ReplicaInfo(self.me.replica_id, self.me.address, epoch)

    async def ensure(self, group_id: str, *, create: bool) -> None:
        """Return when this replica owns ``group_id`` (claiming it when it is free and hashing
        gives it here); raise NotCoordinator naming the owner otherwise. With ``create`` false
        a group that exists nowhere is left alone (the caller answers as for an unknown group)."""
        if group_id in self.leases:
            if not self.valid():
                raise NotCoordinator(None, "this replica cannot renew its leases (PostgreSQL unreachable?)")
            return
        # One claim per group at a time in this replica; the entry lives while anyone uses it.
        entry = self._claiming.setdefault(group_id, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                if group_id in self.leases:
                    return
                try:
                    await self._claim_or_redirect(group_id, create)
                except (psycopg.Error, PoolTimeout) as error:
                    raise NotCoordinator(None, f"PostgreSQL unreachable: {type(error).__name__}") from None
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._claiming[group_id]

    async def find(self, group_id: str) -> ReplicaInfo:
        """FindCoordinator: the live owner, else the live replica that would take the group."""
        if group_id in self.leases and self.valid():
            return self.owner_of(group_id) or self.me
        try:
            async with self.pool.connection(timeout=self.lease_ms / 2000) as conn:
                row = await self._lease_row(conn, group_id)
                if row is not None and row[2] and row[3]:
                    return ReplicaInfo(row[0], row[3], row[1])
                chosen = rendezvous(group_id, await self._live(conn))
        except (psycopg.Error, PoolTimeout) as error:  # as ``ensure``: hung 30 s, then INTERNAL
            raise NotCoordinator(None, f"PostgreSQL unreachable: {type(error).__name__}") from None
        return chosen or self.me

    # ---- claiming ------------------------------------------------------------------------------

    async def _lease_row(self, conn: Any, group_id: str) -> tuple | None:
        cursor = await conn.execute(
            "SELECT l.owner, l.epoch, l.expires_at > now(), r.address FROM group_leases l "
            "LEFT JOIN replicas r ON r.replica_id = l.owner WHERE l.group_id = %s", (group_id,))
        return await cursor.fetchone()

    async def _live(self, conn: Any) -> list[ReplicaInfo]:
        cursor = await conn.execute("SELECT replica_id, address FROM replicas WHERE expires_at > now() ORDER BY replica_id")
        return [ReplicaInfo(r[0], r[1]) for r in await cursor.fetchall()]

    async def _claim_or_redirect(self, group_id: str, create: bool) -> None:
        async with self.pool.connection(timeout=self.lease_ms / 2000) as conn:
            row = await self._lease_row(conn, group_id)
            if row is not None and row[2] and row[0] != self.me.replica_id:
                raise NotCoordinator(ReplicaInfo(row[0], row[3] or "", row[1]), f"group {group_id!r} is owned by {row[0]}")
            if row is None and not create:
                return
            if not self.valid():  # only a replica with a fresh renewal may take a group
                raise NotCoordinator(None, "this replica cannot renew its leases (PostgreSQL unreachable?)")
            if row is None or not row[2]:
                chosen = rendezvous(group_id, await self._live(conn))
                if chosen is not None and chosen.replica_id != self.me.replica_id:
                    raise NotCoordinator(chosen, f"group {group_id!r} goes to replica {chosen.replica_id}")
            cursor = await conn.execute(
                "INSERT INTO group_leases AS l (group_id, owner, epoch, expires_at) "
                "VALUES (%(g)s, %(me)s, 1, now() + make_interval(secs => %(ttl)s)) "
                "ON CONFLICT (group_id) DO UPDATE SET owner = EXCLUDED.owner, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at "
                "WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner RETURNING epoch",
                {"g": group_id, "me": self.me.replica_id, "ttl": self.lease_ms / 1000})
            claimed = await cursor.fetchone()
            if claimed is None:  # another replica claimed it between our read and our claim
                row = await self._lease_row(conn, group_id)
                owner = ReplicaInfo(row[0], row[3] or "", row[1]) if row else None
                raise NotCoordinator(owner, f"group {group_id!r} was just claimed by another replica")
            epoch = claimed[0]
            snapshot = await (await conn.execute("SELECT snapshot FROM groups WHERE group_id = %s", (group_id,))).fetchone()
        document = json.loads(snapshot[0]) if snapshot else None
        if self._adopter is not None:  # before the lease counts here: no call sees a half-loaded group
            await self._adopter.adopt(group_id, document)
        self.leases[group_id] = epoch
        if epoch > 1:
            log.info("ownership.takeover", group_id=group_id, epoch=epoch, restored=document is not None)
            if self.metrics is not None:
                self.metrics.takeovers.inc()
        if self.metrics is not None:
            self.metrics.leases_held.set(len(self.leases))

    # ---- renewal -------------------------------------------------------------------------------

    async def _loop(self) -> None:
        """Renew every third of a lease; whatever the renewal does, check the lease's validity on
        time. A renewal on a connection gone silent (half-open: no error, no answer) hangs until
        TCP gives up, minutes: awaited, it kept this replica SERVING with leases it no longer
        held (an audit's find). It is waited for a third of a lease at a time, and none other
        starts while it hangs."""
        interval = self.lease_ms / 3000
        renewal: asyncio.Task | None = None
        try:
            while True:
                await asyncio.sleep(interval)
                if renewal is None or renewal.done():
                    renewal = asyncio.get_running_loop().create_task(self._renew_once(), name="ownership-renewal")
                await asyncio.wait({renewal}, timeout=interval)
                if not self.valid() and (self.leases or self.serving):
                    await self._give_up_all()
        finally:
            if renewal is not None:
                renewal.cancel()

    async def _renew_once(self) -> None:
        try:
            await self._renew()
            await self._take_over_expired()
        except Exception as error:  # PostgreSQL unreachable: stop serving once the lease is unsafe
            log.warning("ownership.renewal.failed", error=repr(error))

    async def _renew(self) -> None:
        started = self._monotonic()
        before = dict(self.leases)
        ttl = self.lease_ms / 1000
        async with self.pool.connection(timeout=self.lease_ms / 2000) as conn:
            await conn.execute(
                "INSERT INTO replicas (replica_id, address, expires_at) VALUES (%s, %s, now() + make_interval(secs => %s)) "
                "ON CONFLICT (replica_id) DO UPDATE SET address = EXCLUDED.address, expires_at = EXCLUDED.expires_at",
                (self.me.replica_id, self.me.address, ttl))
            cursor = await conn.execute(
                "UPDATE group_leases SET expires_at = now() + make_interval(secs => %s) "
                "WHERE owner = %s AND group_id = ANY(%s) RETURNING group_id, epoch",
                (ttl, self.me.replica_id, list(before)))
            held = dict(await cursor.fetchall())
        self._valid_until = started + self.lease_ms * VALID_SHARE / 1000
        for group_id, epoch in before.items():
            if held.get(group_id) != epoch and self.leases.get(group_id) == epoch:
                log.warning("ownership.lease.lost", group_id=group_id, epoch=epoch)
                await self._drop(group_id)
        if self.valid():  # a renewal that hung past its own validity renews nothing it can use
            await self._set_serving(True)

    async def _take_over_expired(self) -> None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT group_id FROM group_leases WHERE expires_at <= now() ORDER BY expires_at LIMIT %s", (TAKEOVER_BATCH,))
            expired = [r[0] for r in await cursor.fetchall()]
            if not expired:
                return
            live = await self._live(conn)
        for group_id in expired:
            chosen = rendezvous(group_id, live)
            if chosen is None or chosen.replica_id != self.me.replica_id:
                continue
            try:
                await self.ensure(group_id, create=False)
            except NotCoordinator:
                continue

    async def _drop(self, group_id: str) -> None:
        self.leases.pop(group_id, None)
        if self._adopter is not None:
            await self._adopter.forget(group_id)
        if self.metrics is not None:
            self.metrics.leases_held.set(len(self.leases))

    def released(self, group_id: str, epoch: int) -> None:
        """The group expired here and its lease was handed back: stop renewing it."""
        if self.leases.get(group_id) == epoch:
            del self.leases[group_id]
            if self.metrics is not None:
                self.metrics.leases_held.set(len(self.leases))

    async def lost(self, group_id: str, *, fenced: bool = True) -> None:
        """A write of this group was fenced (another replica owns it now), or not taken
        (``fenced`` false: PostgreSQL unreachable): unload it; the next call reloads it."""
        if fenced and self.metrics is not None:
            self.metrics.fenced_writes.inc()
        if group_id in self.leases:
            await self._drop(group_id)

    async def _give_up_all(self) -> None:
        log.error("ownership.unsafe", groups=len(self.leases), detail="leases not renewed in time: unloading every group")
        for group_id in sorted(self.leases):
            await self._drop(group_id)
        await self._set_serving(False)

    async def _set_serving(self, serving: bool) -> None:
        if serving != self.serving:
            self.serving = serving
            if self.on_serving is not None:
                await self.on_serving(serving)
