"""Server benchmarks: rebalance latency and heartbeat throughput, each against a bare grpc.aio
baseline measured in the same run (server and load generator in separate processes).

    python bench/bench_server.py                      # 100, 1,000, 5,000 members
    python bench/bench_server.py --members 100 1000   # a subset
    python bench/bench_server.py --repeat 7 --heartbeat-seconds 5
    python bench/bench_server.py --baseline-loop uvloop   # both servers on uvloop

Rebalance latency: a formed group of N members rejoins at once (one task per member, every
member reporting its active as LATEST); time from the last JoinGroup sent to the last
SyncGroup answer received. Baseline: N calls parked on a bare grpc.aio barrier and released
together, from the last call sent to the last reply received. Each size runs ``--repeat``
rounds, a baseline round just before each leader round (the machine is shared: neighbours'
load moves both alike); the table gives medians and ranges, the ratio is of the medians.
"floor": the same rebalance against remote-leader's service and messages with trivial
handlers (``_FloorLeader``, in the baseline process): what grpc.aio and protobuf alone cost
for two round trips per member, so "vs floor" is what the leader's own work adds.
"server CPU" is the CPU time (all threads) the server process spent per round, read from
/proc: less sensitive to neighbours than wall time.
Heartbeat throughput: 1,000 members heartbeat with 100 calls in flight. Baseline: bare
unary calls with 100 in flight, measured just before. Prints one table; issue 4's targets
are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote_leader.net import free_port  # noqa: E402
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
    pb_grpc.add_GroupLeaderServicer_to_server(_FloorLeader(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


class _FloorLeader(pb_grpc.GroupLeaderServicer):
    """remote-leader's service and messages with trivial handlers: what grpc.aio and protobuf
    alone cost for a rebalance's two round trips per member. JoinGroup parks until the group's
    N members have joined (N from the group id, ``floor-N``); SyncGroup answers member i task
    0_i (its process id is UUID i + 1, as ``Member`` makes them)."""

    def __init__(self) -> None:
        self._parked: dict[str, list[asyncio.Future]] = {}
        self._generation = 0

    async def JoinGroup(self, request: pb.JoinGroupRequest, context) -> pb.JoinGroupResponse:
        waiting = self._parked.setdefault(request.group_id, [])
        future = asyncio.get_running_loop().create_future()
        waiting.append(future)
        if len(waiting) >= int(request.group_id.rsplit("-", 1)[1]):
            self._generation += 1
            for f in waiting:
                f.set_result(self._generation)
            self._parked[request.group_id] = []
        generation = await future
        member_id = request.member_id or f"member-{request.subscription.process_id}"
        return pb.JoinGroupResponse(generation_id=generation, member_id=member_id, commonly_supported_version=2)

    async def SyncGroup(self, request: pb.SyncGroupRequest, context) -> pb.SyncGroupResponse:
        partition = uuid.UUID(request.member_id.removeprefix("member-")).int - 1
        response = pb.SyncGroupResponse()
        response.assignment.version = response.assignment.commonly_supported_version = 2
        response.assignment.active_tasks.add(task=apb.TaskId(subtopology=0, partition=partition),
                                             partitions=[apb.TopicPartition(topic="input", partition=partition)])
        return response


# ---- helpers -------------------------------------------------------------------------------------------



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


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), or None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Round:
    """Wall time, failed calls and server CPU of one measured round."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seconds = 0.0
        self.failed = 0
        self.cpu_s: float | None = None

    async def run(self, calls: list) -> list:
        cpu = process_cpu_s(self.pid)
        sent = time.perf_counter()
        results = await asyncio.gather(*calls, return_exceptions=True)
        self.seconds = time.perf_counter() - sent
        after = process_cpu_s(self.pid)
        self.cpu_s = after - cpu if cpu is not None and after is not None else None
        self.failed = sum(isinstance(r, BaseException) for r in results)
        return results


async def bare_barrier(channels: list[grpc.aio.Channel], pid: int, n: int) -> Round:
    await _bare(channels[0], "Arm")(str(n).encode())
    calls = [_bare(channels[i % CHANNELS], "Wait")(b"x") for i in range(n)]
    measured = Round(pid)
    await measured.run(calls)
    return measured


async def _closed_loop(call, seconds: float) -> tuple[float, int]:
    """IN_FLIGHT loops, each issuing ``await call(k)`` back to back (k counts per loop, strided
    so that loops spread over members) for ``seconds``; returns (successful calls per second,
    failures). A call fails when it answers False or its RPC fails (status other than OK): it
    is counted, never raised, so that a run with failures still reports them."""
    done = failed = 0
    stop = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        nonlocal done, failed
        k = i
        while time.perf_counter() < stop:
            try:
                ok = await call(k)
            except grpc.RpcError:
                ok = False
            failed += not ok
            done += 1
            k += IN_FLIGHT

    started = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(IN_FLIGHT)))
    return (done - failed) / (time.perf_counter() - started), failed


async def bare_unary_rate(port: int, seconds: float) -> tuple[float, int]:
    """(successful calls per second, failed calls) of bare unary pings."""
    channels = _channels(port)
    calls = [_bare(c, "Ping") for c in channels]

    async def ping(k: int) -> bool:
        return await calls[k % CHANNELS](b"ping") == b"ping"

    try:
        return await _closed_loop(ping, seconds)
    finally:
        for c in channels:
            await c.close()


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


async def _rejoin_round(members: list[Member], pid: int) -> Round:
    """Every member rejoins at once, then syncs; the assignment must cover every task once."""
    calls = [asyncio.ensure_future(m.join_and_sync()) for m in members]
    await asyncio.sleep(0)
    measured = Round(pid)
    await measured.run(calls)
    if not measured.failed and sorted((t.subtopology, t.partition) for m in members for t in m.active) != [(0, p) for p in range(len(members))]:
        raise RuntimeError("inconsistent assignment")
    return measured


async def rebalance_rounds(leader_port: int, leader_pid: int, bare_port: int, bare_pid: int, n: int, repeat: int,
                           endpoints: bool = False) -> tuple[list[Round], list[Round], list[Round]]:
    """``repeat`` rounds of (bare barrier of n, floor rebalance, leader rebalance of n members),
    interleaved; returns the leader's, the bare barrier's and the floor's rounds."""
    channels, bare_channels = _channels(leader_port), _channels(bare_port)
    stubs = [pb_grpc.GroupLeaderStub(c) for c in channels]
    floor_stubs = [pb_grpc.GroupLeaderStub(c) for c in bare_channels]
    topology = _topology(n)
    group = f"bench-{n}{'-iq' if endpoints else ''}"
    members = [Member(stubs[i % CHANNELS], group, topology, i, endpoints) for i in range(n)]
    floor = [Member(floor_stubs[i % CHANNELS], f"floor-{n}", topology, i, endpoints) for i in range(n)]
    leader_rounds, bare_rounds, floor_rounds = [], [], []
    try:
        # Form the group (the server's initial delay gathers everyone), unmeasured.
        await _form(members)
        await _rejoin_round(floor, bare_pid)
        for _ in range(repeat):
            bare_rounds.append(await bare_barrier(bare_channels, bare_pid, n))
            floor_rounds.append(await _rejoin_round(floor, bare_pid))
            measured = await _rejoin_round(members, leader_pid)
            leader_rounds.append(measured)
            if measured.failed:
                await _form(members)  # rejoin the stragglers before the next round
        return leader_rounds, bare_rounds, floor_rounds
    finally:
        for c in channels + bare_channels:
            await c.close()


class Rates:
    """Successful calls per second of each round, and the failed calls of all rounds."""

    def __init__(self) -> None:
        self.per_second: list[float] = []
        self.failed = 0

    def add(self, rate: float, failed: int) -> None:
        self.per_second.append(rate)
        self.failed += failed


async def heartbeat_rounds(leader_port: int, bare_port: int, n: int, seconds: float, repeat: int) -> tuple[Rates, Rates]:
    """``repeat`` pairs of (bare unary rate, leader heartbeat rate) over one formed group; a
    heartbeat fails when its RPC fails or it answers an error code."""
    channels = _channels(leader_port)
    stubs = [pb_grpc.GroupLeaderStub(c) for c in channels]
    members = [Member(stubs[i % CHANNELS], "bench-heartbeat", _topology(n), i) for i in range(n)]
    await _form(members)

    async def heartbeat(k: int) -> bool:
        m = members[k % n]
        response = await m.stub.Heartbeat(pb.HeartbeatRequest(group_id=m.group, member_id=m.member_id, generation_id=m.generation))
        return response.error_code == 0

    leader, bare = Rates(), Rates()
    try:
        for _ in range(repeat):
            bare.add(*await bare_unary_rate(bare_port, seconds))
            leader.add(*await _closed_loop(heartbeat, seconds))
    finally:
        for c in channels:
            await c.close()
    return leader, bare


def _ms_summary(values: list[float]) -> str:
    """Median, and the range when there are several values (milliseconds)."""
    ms = [v * 1000 for v in values]
    median = f"{statistics.median(ms):,.0f} ms"
    return median if len(ms) == 1 else f"{median} ({min(ms):,.0f}–{max(ms):,.0f})"


def _median_s(rounds: list[Round]) -> float:
    return statistics.median(r.seconds for r in rounds)


def _rebalance_row(label: str, leader: list[Round], bare: list[Round], floor: list[Round]) -> tuple[str, ...]:
    cpus = [[r.cpu_s for r in rounds if r.cpu_s is not None] for rounds in (leader, floor, bare)]
    cpu_text = " / ".join(f"{statistics.median(c) * 1000:,.0f}" for c in cpus) + " ms" if all(cpus) else "n/a"
    failed = f"{sum(r.failed for r in leader)} / {sum(r.failed for r in bare)} / {sum(r.failed for r in floor)}"
    return (label, _ms_summary([r.seconds for r in leader]), _ms_summary([r.seconds for r in bare]),
            f"{_median_s(leader) / _median_s(bare):.1f}x", _ms_summary([r.seconds for r in floor]),
            f"{_median_s(leader) / _median_s(floor):.1f}x", cpu_text, failed)


def _heartbeat_row(label: str, leader: Rates, bare: Rates) -> tuple[str, ...]:
    """Rates count successful calls only; the failed column counts the rest (no floor here)."""
    def summary(rates: Rates) -> str:
        values = rates.per_second
        return f"{statistics.median(values):,.0f}/s ({min(values):,.0f}–{max(values):,.0f})"

    bare_median = statistics.median(bare.per_second)
    ratio = f"{statistics.median(leader.per_second) / bare_median:.2f}x" if bare_median else "n/a"
    return (label, summary(leader), summary(bare), ratio, "", "", "", f"{leader.failed} / {bare.failed} / n/a")


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--endpoint-members", type=int, nargs="*", default=[100, 1000],
                        help="group sizes to measure again with IQ endpoints (every answer carries every host)")
    parser.add_argument("--heartbeat-members", type=int, default=1000)
    parser.add_argument("--heartbeat-seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds per row (median reported)")
    parser.add_argument("--heartbeat-repeat", type=int, default=3, help="heartbeat/baseline pairs (median reported)")
    parser.add_argument("--leader-loop", choices=("auto", "uvloop", "asyncio"), default="auto",
                        help="the server's --event-loop (default auto: uvloop when installed)")
    parser.add_argument("--baseline-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="the bare baseline server's event loop (default asyncio, as issue 4's figures)")
    parser.add_argument("--baseline-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline_server:
        if args.baseline_loop == "uvloop":
            import uvloop

            uvloop.run(_baseline_server(args.baseline_server))
        else:
            asyncio.run(_baseline_server(args.baseline_server))
        return 0

    bare_port, leader_port = free_port(), free_port()
    state = tempfile.mkdtemp(prefix="bench-server-")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bare = _start([sys.executable, __file__, "--baseline-server", str(bare_port), "--baseline-loop", args.baseline_loop], env)
    leader = _start([sys.executable, "-m", "remote_leader.cli", "serve", "--listen", f"127.0.0.1:{leader_port}",
                     "--state-dir", state, "--metrics-port", "0", "--initial-rebalance-delay-ms", "8000",
                     "--log-level", "warning", "--max-pending-requests", str(PENDING),
                     "--event-loop", args.leader_loop], env)
    rows = []
    try:
        _wait_port(bare_port)
        _wait_port(leader_port)
        sizes = [(n, False) for n in args.members] + [(n, True) for n in args.endpoint_members]
        for n, endpoints in sizes:
            leader_rounds, bare_rounds, floor_rounds = asyncio.run(
                rebalance_rounds(leader_port, leader.pid, bare_port, bare.pid, n, args.repeat, endpoints))
            label = f"rebalance latency, {n:,} members" + (" with IQ endpoints" if endpoints else "")
            rows.append(_rebalance_row(label, leader_rounds, bare_rounds, floor_rounds))
        if args.heartbeat_repeat:
            leader_rates, bare_rates = asyncio.run(heartbeat_rounds(leader_port, bare_port, args.heartbeat_members,
                                                                    args.heartbeat_seconds, args.heartbeat_repeat))
            rows.append(_heartbeat_row(f"heartbeats/s, {args.heartbeat_members:,} members", leader_rates, bare_rates))
    finally:
        for proc in (bare, leader):
            proc.terminate()
            proc.wait(timeout=30)
    print(f"event loops: remote-leader {args.leader_loop}, bare baseline {args.baseline_loop}")
    header = ("measure", "remote-leader", "bare grpc.aio", "ratio", "floor", "vs floor", "server CPU (leader / floor / bare)",
              "failed (leader / bare / floor)")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
