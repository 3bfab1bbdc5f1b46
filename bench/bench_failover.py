"""Several replicas over PostgreSQL (docs/high-availability.md): failover time, the cost of the
PostgreSQL store against SQLite, and scale-out over replicas. Everything runs on this machine:
a throwaway PostgreSQL (tests/pg_server.py), replicas as separate `remote-leader serve`
processes, and one load-generating process.

    python bench/bench_failover.py                       # all three parts
    python bench/bench_failover.py --parts failover --lease-ms 2000 5000
    python bench/bench_failover.py --parts store --members 1000 --repeat 5
    python bench/bench_failover.py --parts scale --groups 2000 --group-size 5

1. Failover: three replicas, groups of real members (the worker library, session timeout
   ``--session-ms``); kill -9 the replica owning the most groups; time from the kill until every
   member of its groups has a heartbeat accepted by the new owner (or a new assignment), printed
   beside the configured lease and session timeouts, with how many members kept their generation.
2. Store: rebalance latency of one group of ``--members`` (every member rejoins at once; last
   JoinGroup sent to last SyncGroup answered, as bench/bench_server.py) on a server with the
   SQLite store and on one with the PostgreSQL store, rounds interleaved; the ratio of medians is
   the figure.
3. Scale-out: ``--groups`` groups of ``--group-size`` members on 1 replica, then on 3 (members
   talk to their group's owner, found with FindCoordinator): rebalances per second when every
   member of every group rejoins at once, and heartbeat latency (p50/p99) with 100 calls in
   flight. On 2 cores the three replicas, PostgreSQL and the load generator share the same CPU:
   the figure shows that groups spread and that replicas add no coordination cost per call, not
   the throughput N machines would give.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_server import IN_FLIGHT, Member, Round, _form, _topology  # noqa: E402

from remote_leader.v1 import group_leader_pb2 as pb  # noqa: E402
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc  # noqa: E402
from tests.pg_server import throwaway_postgres  # noqa: E402
from tests.server.replica_cluster import Cluster, Groups  # noqa: E402

CHANNELS = 8
#: Groups forming at once in the scale-out part (all members of a group join together).
FORMING = 200
OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]


def _database(server_dsn: str, name: str) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_dsn.rsplit("/", 1)[0] + f"/{name}"


def _table(rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
        if index == 0:
            print(" | ".join("-" * w for w in widths))


# ---- 1. failover -----------------------------------------------------------------------------------


async def failover(server_dsn: str, workdir: Path, lease_ms: int, session_ms: int, groups_n: int, size: int) -> tuple:
    cluster = Cluster(_database(server_dsn, f"failover_{lease_ms}"), workdir / f"failover-{lease_ms}", lease_ms=lease_ms)
    (workdir / f"failover-{lease_ms}").mkdir(parents=True, exist_ok=True)
    groups = Groups("", session_ms=session_ms, heartbeat_ms=max(100, session_ms // 10))
    try:
        for name in ("r1", "r2", "r3"):
            cluster.start(name)
        await asyncio.gather(*(cluster.wait_serving(r) for r in list(cluster.replicas.values())))
        groups.bootstrap = cluster.bootstrap
        for index in range(groups_n):
            await groups.add(f"g{index}", size)
        await groups.wait_converged(120)
        owners = {g: cluster.owner(g)[0] for g in groups.members}
        victim = max(sorted(set(owners.values())), key=lambda r: list(owners.values()).count(r))
        moved = [g for g, o in owners.items() if o == victim]
        before = {id(r): r.history[-1][0] for g in moved for r in groups.members[g]}
        killed_at = time.monotonic()
        cluster.replicas[victim].kill()
        waiting = [r for g in moved for r in groups.members[g]]
        while waiting and time.monotonic() - killed_at < 120:
            waiting = [r for r in waiting if not (r.member.heartbeat_ok_at > killed_at or r.history[-1][0] != before[id(r)])]
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - killed_at
        if waiting:
            raise RuntimeError(f"{len(waiting)} members never reached the new owner")
        kept = sum(r.history[-1][0] == before[id(r)] for g in moved for r in groups.members[g])
        return (f"{lease_ms:,}", f"{session_ms:,}", f"{len(moved)} of {groups_n} ({sum(len(groups.members[g]) for g in moved)} members)",
                f"{elapsed:.2f}", f"{elapsed * 1000 / lease_ms:.2f}", f"{kept}/{len(before)}")
    finally:
        await groups.close()
        cluster.stop()


# ---- 2. SQLite against PostgreSQL ------------------------------------------------------------------


def _stubs(address: str) -> tuple[list[grpc.aio.Channel], list[pb_grpc.GroupLeaderStub]]:
    channels = [grpc.aio.insecure_channel(address, options=[*OPTIONS, ("grpc.channel_id", i)]) for i in range(CHANNELS)]
    return channels, [pb_grpc.GroupLeaderStub(c) for c in channels]


async def _rejoin_all(members: list[Member]) -> Round:
    calls = [asyncio.ensure_future(m.join_and_sync()) for m in members]
    await asyncio.sleep(0)
    measured = Round(0)
    await measured.run(calls)
    return measured


async def store_latency(server_dsn: str, workdir: Path, n: int, repeat: int) -> list[tuple]:
    extra = ("--initial-rebalance-delay-ms", "8000", "--max-pending-requests", "20000", "--log-level", "warning")
    sqlite = Cluster("sqlite", workdir / "store-sqlite", lease_ms=5_000, extra=extra)
    postgres = Cluster(_database(server_dsn, "store"), workdir / "store-pg", lease_ms=5_000, extra=extra)
    for cluster in (sqlite, postgres):
        cluster.workdir.mkdir(parents=True, exist_ok=True)
    servers = {"sqlite": sqlite.start("sqlite"), "postgresql": postgres.start("pg")}
    channels: list[grpc.aio.Channel] = []
    try:
        await asyncio.gather(sqlite.wait_serving(servers["sqlite"]), postgres.wait_serving(servers["postgresql"]))
        members: dict[str, list[Member]] = {}
        for label, replica in servers.items():
            opened, stubs = _stubs(replica.address)
            channels += opened
            members[label] = [Member(stubs[i % CHANNELS], "big", _topology(n), i) for i in range(n)]
            await _form(members[label])
        seconds: dict[str, list[float]] = {"sqlite": [], "postgresql": []}
        for _round in range(repeat):
            for label in ("sqlite", "postgresql"):
                measured = await _rejoin_all(members[label])
                if measured.failed:
                    raise RuntimeError(f"{label}: {measured.failed} calls failed")
                seconds[label].append(measured.seconds)
        med = {k: statistics.median(v) for k, v in seconds.items()}
        return [(f"rebalance, {n:,} members", f"{med['sqlite'] * 1000:.0f} ({min(seconds['sqlite']) * 1000:.0f}-{max(seconds['sqlite']) * 1000:.0f})",
                 f"{med['postgresql'] * 1000:.0f} ({min(seconds['postgresql']) * 1000:.0f}-{max(seconds['postgresql']) * 1000:.0f})",
                 f"{med['postgresql'] / med['sqlite']:.2f}")]
    finally:
        for channel in channels:
            await channel.close()
        sqlite.stop()
        postgres.stop()


# ---- 3. scale-out ----------------------------------------------------------------------------------


async def _settle(group: list[Member]) -> None:
    """Form one group the way real members do: join and sync, then heartbeat, rejoining on
    REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION, until one pass of heartbeats all succeed."""
    async def member(m: Member) -> bool:
        if m.generation < 0:
            await m.join_and_sync(retries=20)
        beat = await m.stub.Heartbeat(pb.HeartbeatRequest(group_id=m.group, member_id=m.member_id, generation_id=m.generation))
        if beat.error_code == 25:  # dropped while others formed (a slow barrier): join afresh
            m.member_id, m.generation = "", -1
        if beat.error_code in (22, 25, 27):
            await m.join_and_sync(retries=20)
            return False
        if beat.error_code:
            raise RuntimeError(f"Heartbeat: {beat.error_code} {beat.error_message}")
        return True

    for _pass in range(50):
        if all(await asyncio.gather(*(member(m) for m in group))) and len({m.generation for m in group}) == 1:
            return
    raise RuntimeError(f"{group[0].group} did not settle")


async def scale_out(server_dsn: str, workdir: Path, replicas: int, groups_n: int, size: int, seconds: float) -> tuple:
    extra = ("--initial-rebalance-delay-ms", "1000", "--max-pending-requests", "50000", "--log-level", "warning",
             "--max-groups", str(max(10_000, groups_n)))
    cluster = Cluster(_database(server_dsn, f"scale_{replicas}"), workdir / f"scale-{replicas}", lease_ms=10_000, extra=extra)
    cluster.workdir.mkdir(parents=True, exist_ok=True)
    channels: list[grpc.aio.Channel] = []
    try:
        started = [cluster.start(f"r{i + 1}") for i in range(replicas)]
        await asyncio.gather(*(cluster.wait_serving(r) for r in started))
        stubs_by_replica: dict[str, list[pb_grpc.GroupLeaderStub]] = {}
        for replica in started:
            opened, stubs = _stubs(replica.address)
            channels += opened
            stubs_by_replica[replica.name] = stubs
        finder = stubs_by_replica[started[0].name][0]
        topology = _topology(size)
        members: list[Member] = []
        groups: list[list[Member]] = []
        spread: dict[str, int] = {}
        for g in range(groups_n):
            found = await finder.FindCoordinator(pb.FindCoordinatorRequest(group_id=f"group-{g}"))
            owner = found.coordinator.replica_id
            spread[owner] = spread.get(owner, 0) + 1
            stubs = stubs_by_replica[owner]
            group = [Member(stubs[(g * size + i) % CHANNELS], f"group-{g}", topology, g * size + i) for i in range(size)]
            groups.append(group)
            members += group
        forming = asyncio.Semaphore(FORMING)

        async def settle(group: list[Member]) -> None:
            async with forming:
                await _settle(group)

        formed_at = time.perf_counter()
        await asyncio.gather(*(settle(group) for group in groups))
        print(f"  {replicas} replica(s): {groups_n:,} groups formed in {time.perf_counter() - formed_at:.1f} s", flush=True)
        rejoin = await _rejoin_all(members)
        rebalances_per_s = groups_n / rejoin.seconds
        latencies: list[float] = []
        failed = 0
        stop = time.perf_counter() + seconds

        async def beat(loop: int) -> None:
            nonlocal failed
            k = loop
            while time.perf_counter() < stop:
                m = members[k % len(members)]
                sent = time.perf_counter()
                try:
                    answer = await m.stub.Heartbeat(pb.HeartbeatRequest(group_id=m.group, member_id=m.member_id, generation_id=m.generation))
                    failed += answer.error_code != 0
                except grpc.RpcError:
                    failed += 1
                latencies.append(time.perf_counter() - sent)
                k += IN_FLIGHT

        began = time.perf_counter()
        await asyncio.gather(*(beat(i) for i in range(IN_FLIGHT)))
        rate = len(latencies) / (time.perf_counter() - began)
        latencies.sort()
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
        return (replicas, f"{groups_n:,} x {size}", "/".join(str(spread[k]) for k in sorted(spread)),
                f"{rebalances_per_s:,.0f}" + (f" ({rejoin.failed} failed)" if rejoin.failed else ""),
                f"{rate:,.0f}", f"{p50 * 1000:.1f} / {p99 * 1000:.1f}", failed)
    finally:
        for channel in channels:
            await channel.close()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=("failover", "store", "scale"), default=["failover", "store", "scale"])
    parser.add_argument("--lease-ms", type=int, nargs="+", default=[2_000, 5_000])
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--failover-groups", type=int, default=12)
    parser.add_argument("--failover-group-size", type=int, default=3)
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--group-size", type=int, default=5)
    parser.add_argument("--heartbeat-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    workdir = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    with throwaway_postgres(durable=True) as postgres:  # fsync on, like SQLite's commits
        if "failover" in args.parts:
            rows = [("lease ms", "session ms", "groups moved", "kill -> all members served (s)", "/ lease", "kept generation")]
            for lease_ms in args.lease_ms:
                rows.append(asyncio.run(failover(postgres.dsn, workdir, lease_ms, args.session_ms,
                                                 args.failover_groups, args.failover_group_size)))
            print("\nFailover (3 replicas, kill -9 of the owner of the most groups)")
            _table(rows)
        if "store" in args.parts:
            rows = [("measure", "SQLite ms (range)", "PostgreSQL ms (range)", "PostgreSQL / SQLite")]
            rows += asyncio.run(store_latency(postgres.dsn, workdir, args.members, args.repeat))
            print(f"\nStore (one server each, medians of {args.repeat} interleaved rounds)")
            _table(rows)
        if "scale" in args.parts:
            rows = [("replicas", "groups", "groups per replica", "rebalances/s", "heartbeats/s", "heartbeat ms p50 / p99", "failed")]
            for replicas in (1, 3):
                rows.append(asyncio.run(scale_out(postgres.dsn, workdir, replicas, args.groups, args.group_size,
                                                  args.heartbeat_seconds)))
            print("\nScale-out (PostgreSQL store; 2 cores shared by replicas, PostgreSQL and the load generator)")
            _table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
