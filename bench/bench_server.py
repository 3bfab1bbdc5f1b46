"""Server benchmarks: rebalance latency and heartbeat throughput, each against a bare grpc.aio
baseline measured in the same run (server and load generator in separate processes).

    python bench/bench_server.py                      # 100, 1,000, 5,000 members
    python bench/bench_server.py --members 100 1000   # a subset
    python bench/bench_server.py --heartbeat-seconds 5

Rebalance latency: a formed group of N members rejoins at once (one task per member, every
member reporting its active as LATEST); time from the last JoinGroup sent to the last
SyncGroup answer received. Baseline: N calls parked on a bare grpc.aio barrier and released
together, from the last call sent to the last reply received.
Heartbeat throughput: 1,000 members heartbeat with 100 calls in flight. Baseline: bare
unary calls with 100 in flight. Prints one table; issue 4's targets are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote_leader.v1 import assignment_pb2 as apb  # noqa: E402
from remote_leader.v1 import group_leader_pb2 as pb  # noqa: E402
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc  # noqa: E402

CHANNELS = 8
IN_FLIGHT = 100
PENDING = 20_000
OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]


# ---- the bare baseline server (run in its own process: --baseline-server PORT) -------------------


def _identity(data: bytes) -> bytes:
    return data


async def _baseline_server(port: int) -> None:
    waiting: list[asyncio.Future] = []
    expected = {"n": 0}

    async def arm(request: bytes, context) -> bytes:
        expected["n"] = int(request.decode())
        waiting.clear()
        return b"ok"

    async def wait(request: bytes, context) -> bytes:
        future = asyncio.get_running_loop().create_future()
        waiting.append(future)
        if len(waiting) >= expected["n"]:
            for f in waiting:
                if not f.done():
                    f.set_result(None)
        await future
        return b"go"

    async def ping(request: bytes, context) -> bytes:
        return request

    handlers = {
        name: grpc.unary_unary_rpc_method_handler(fn, request_deserializer=_identity, response_serializer=_identity)
        for name, fn in (("Arm", arm), ("Wait", wait), ("Ping", ping))
    }
    server = grpc.aio.server(options=[("grpc.server.max_pending_requests", PENDING), ("grpc.server.max_pending_requests_hard_limit", PENDING)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Bare", handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


# ---- helpers -------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def _channels(port: int) -> list[grpc.aio.Channel]:
    # Distinct channels (connections): a load generator's realistic fan-in.
    return [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[*OPTIONS, ("grpc.channel_id", i)]) for i in range(CHANNELS)]


def _bare(channel: grpc.aio.Channel, name: str):
    return channel.unary_unary(f"/bench.Bare/{name}", request_serializer=_identity, response_deserializer=_identity)


async def bare_barrier(port: int, n: int) -> tuple[float, int]:
    channels = _channels(port)
    try:
        await _bare(channels[0], "Arm")(str(n).encode())
        calls = [_bare(channels[i % CHANNELS], "Wait")(b"x") for i in range(n)]
        sent = time.perf_counter()
        results = await asyncio.gather(*calls, return_exceptions=True)
        elapsed = time.perf_counter() - sent
        return elapsed, sum(isinstance(r, Exception) for r in results)
    finally:
        for c in channels:
            await c.close()


async def _closed_loop(call, seconds: float) -> tuple[float, int]:
    """IN_FLIGHT loops, each issuing ``await call(k)`` back to back (k counts per loop, strided
    so that loops spread over members) for ``seconds``; returns (calls per second, failures)."""
    done = failed = 0
    stop = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        nonlocal done, failed
        k = i
        while time.perf_counter() < stop:
            failed += not await call(k)
            done += 1
            k += IN_FLIGHT

    started = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(IN_FLIGHT)))
    return done / (time.perf_counter() - started), failed


async def bare_unary_rate(port: int, seconds: float) -> float:
    channels = _channels(port)
    calls = [_bare(c, "Ping") for c in channels]

    async def ping(k: int) -> bool:
        return await calls[k % CHANNELS](b"ping") == b"ping"

    rate, _failed = await _closed_loop(ping, seconds)
    for c in channels:
        await c.close()
    return rate


# ---- the group leader ----------------------------------------------------------------------------------


def _topology(n: int) -> pb.Topology:
    return pb.Topology(subtopologies=[pb.Subtopology(id=0, source_topics=[pb.SourceTopic(name="input", partition_count=n)],
                                                       state_stores=[pb.StateStore(name="store", logged=True)])])


class Member:
    def __init__(self, stub: pb_grpc.GroupLeaderStub, group: str, topology: pb.Topology, index: int, endpoint: bool = False) -> None:
        self.stub, self.group, self.topology, self.endpoint = stub, group, topology, endpoint
        self.process_id = str(uuid.UUID(int=index + 1))
        self.port = 20_000 + index
        self.member_id = ""
        self.generation = -1
        self.active: list[apb.TaskId] = []

    def join_request(self) -> pb.JoinGroupRequest:
        lags = pb.LagReport(task_lags=[apb.TaskLag(task=t, lag=-1) for t in self.active])
        request = pb.JoinGroupRequest(
            group_id=self.group, member_id=self.member_id, session_timeout_ms=120_000, rebalance_timeout_ms=120_000,
            subscription=pb.Subscription(version=2, latest_supported_version=2, process_id=self.process_id, num_threads=1,
                                         topology=self.topology, lags=lags, config=apb.AssignmentConfig()),
        )
        if self.endpoint:  # an interactive-query endpoint: KIP-535 host maps for everyone
            request.subscription.endpoint.CopyFrom(pb.HostInfo(host="127.0.0.1", port=self.port))
        return request

    async def join_and_sync(self, retries: int = 0) -> None:
        """Join then sync; during formation a late joiner may restart the rebalance, so the
        caller may allow rejoining (REBALANCE_IN_PROGRESS). The measured round allows none."""
        for _attempt in range(retries + 1):
            joined = await self.stub.JoinGroup(self.join_request())
            if joined.error_code:
                raise RuntimeError(f"JoinGroup: {joined.error_code} {joined.error_message}")
            self.member_id, self.generation = joined.member_id, joined.generation_id
            synced = await self.stub.SyncGroup(pb.SyncGroupRequest(group_id=self.group, member_id=self.member_id, generation_id=self.generation))
            if synced.error_code == 27 and _attempt < retries:
                continue
            if synced.error_code:
                raise RuntimeError(f"SyncGroup: {synced.error_code} {synced.error_message}")
            self.active = [t.task for t in synced.assignment.active_tasks]
            return


async def _form(members: list[Member]) -> None:
    for _round in range(5):
        await asyncio.gather(*(m.join_and_sync(retries=5) for m in members))
        if len({m.generation for m in members}) == 1:
            return
    raise RuntimeError("formation did not converge on one generation")


async def leader_rebalance(port: int, n: int, endpoints: bool = False) -> tuple[float, int]:
    channels = _channels(port)
    stubs = [pb_grpc.GroupLeaderStub(c) for c in channels]
    topology = _topology(n)
    group = f"bench-{n}{'-iq' if endpoints else ''}"
    members = [Member(stubs[i % CHANNELS], group, topology, i, endpoints) for i in range(n)]
    try:
        # Form the group (the server's initial delay gathers everyone), unmeasured.
        await _form(members)
        # The measured rebalance: every member rejoins at once.
        calls = [asyncio.ensure_future(m.join_and_sync()) for m in members]
        await asyncio.sleep(0)
        sent = time.perf_counter()
        results = await asyncio.gather(*calls, return_exceptions=True)
        elapsed = time.perf_counter() - sent
        failures = sum(isinstance(r, Exception) for r in results)
        if not failures and sorted((t.subtopology, t.partition) for m in members for t in m.active) != [(0, p) for p in range(n)]:
            raise RuntimeError("inconsistent assignment")
        return elapsed, failures
    finally:
        for c in channels:
            await c.close()


async def leader_heartbeat_rate(port: int, n: int, seconds: float) -> float:
    channels = _channels(port)
    stubs = [pb_grpc.GroupLeaderStub(c) for c in channels]
    members = [Member(stubs[i % CHANNELS], "bench-heartbeat", _topology(n), i) for i in range(n)]
    await _form(members)

    async def heartbeat(k: int) -> bool:
        m = members[k % n]
        response = await m.stub.Heartbeat(pb.HeartbeatRequest(group_id=m.group, member_id=m.member_id, generation_id=m.generation))
        return response.error_code == 0

    rate, errors = await _closed_loop(heartbeat, seconds)
    for c in channels:
        await c.close()
    if errors:
        raise RuntimeError(f"{errors} heartbeats answered with an error")
    return rate


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--endpoint-members", type=int, nargs="*", default=[100, 1000],
                        help="group sizes to measure again with IQ endpoints (every answer carries every host)")
    parser.add_argument("--heartbeat-members", type=int, default=1000)
    parser.add_argument("--heartbeat-seconds", type=float, default=5.0)
    parser.add_argument("--baseline-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline_server:
        asyncio.run(_baseline_server(args.baseline_server))
        return 0

    bare_port, leader_port = _free_port(), _free_port()
    state = tempfile.mkdtemp(prefix="bench-server-")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bare = _start([sys.executable, __file__, "--baseline-server", str(bare_port)], env)
    leader = _start([sys.executable, "-m", "remote_leader.cli", "serve", "--listen", f"127.0.0.1:{leader_port}",
                     "--state-dir", state, "--metrics-port", "0", "--initial-rebalance-delay-ms", "8000",
                     "--log-level", "warning", "--max-pending-requests", str(PENDING)], env)
    rows = []
    try:
        _wait_port(bare_port)
        _wait_port(leader_port)
        for n in args.members:
            base, base_failed = asyncio.run(bare_barrier(bare_port, n))
            took, failed = asyncio.run(leader_rebalance(leader_port, n))
            rows.append((f"rebalance latency, {n:,} members", f"{took * 1000:,.0f} ms", f"{base * 1000:,.0f} ms",
                         f"{took / base:.1f}x", f"{failed} / {base_failed}"))
        for n in args.endpoint_members:
            base, base_failed = asyncio.run(bare_barrier(bare_port, n))
            took, failed = asyncio.run(leader_rebalance(leader_port, n, endpoints=True))
            rows.append((f"rebalance latency, {n:,} members with IQ endpoints", f"{took * 1000:,.0f} ms",
                         f"{base * 1000:,.0f} ms", f"{took / base:.1f}x", f"{failed} / {base_failed}"))
        base_rate = asyncio.run(bare_unary_rate(bare_port, args.heartbeat_seconds))
        rate = asyncio.run(leader_heartbeat_rate(leader_port, args.heartbeat_members, args.heartbeat_seconds))
        rows.append((f"heartbeats/s, {args.heartbeat_members:,} members", f"{rate:,.0f}/s", f"{base_rate:,.0f}/s",
                     f"{rate / base_rate:.2f}x", "0 / 0"))
    finally:
        for proc in (bare, leader):
            proc.terminate()
            proc.wait(timeout=30)
    header = ("measure", "remote-leader", "bare grpc.aio", "ratio", "failed calls (leader / bare)")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
