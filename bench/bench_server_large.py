"""A large assignment beside other groups: the rebalance of a 1,000-member x 20,000-task group
end to end, and the heartbeats of another group while it computes.

    PYTHONPATH=. .venv/bin/python bench/bench_server_large.py              # about 2 minutes
    PYTHONPATH=. .venv/bin/python bench/bench_server_large.py --members 1000 --subtopologies 200 --partitions 100

For each way of running the assignor (``process``: ``--assignor-processes 1``, the default;
``thread``: ``--assignor-processes 0``, the previous design, as the same-run baseline), a
fresh server (separate process, loopback) hosts two groups:

- *big*: ``--members`` members, a topology of ``--subtopologies`` x ``--partitions`` stateful
  tasks (logged stores), 1 standby. Formed once, then each measured round every member
  rejoins at once reporting its active tasks 100,000 offsets behind (beyond
  acceptable_recovery_lag), so the assignor computes the whole group again. ``rebalance`` is the
  time from the last JoinGroup sent to the last SyncGroup answered (median of ``--repeat``).
- *beside*: 10 members heartbeating back to back, 10 calls in flight. During each round, the
  heartbeats answered per second, their latency (p50 / p99 / max, ms) and failures; ``idle`` is
  the same loop measured before the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.append(str(Path(__file__).resolve().parent.parent))

from bench.bench_server import OPTIONS, PENDING, Member, _form, _start, _topology, _wait_port  # noqa: E402
from remote_leader.net import free_port  # noqa: E402
from remote_leader.v1 import assignment_pb2 as apb  # noqa: E402
from remote_leader.v1 import group_leader_pb2 as pb  # noqa: E402
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc  # noqa: E402

BEHIND = 100_000  # offsets: beyond the default acceptable_recovery_lag (10,000)
BESIDE = 10


def _big_topology(subtopologies: int, partitions: int) -> pb.Topology:
    return pb.Topology(subtopologies=[
        pb.Subtopology(id=s, source_topics=[pb.SourceTopic(name=f"in-{s}", partition_count=partitions)],
                       state_stores=[pb.StateStore(name=f"store-{s}", logged=True)])
        for s in range(subtopologies)
    ])


class BigMember(Member):
    """A member of the big group: 1 standby, and its actives reported far behind once formed."""

    def __init__(self, *args, standbys: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.standbys = standbys

    def join_request(self) -> pb.JoinGroupRequest:
        request = super().join_request()
        lags = pb.LagReport(task_lags=[apb.TaskLag(task=t, lag=BEHIND) for t in self.active])
        request.subscription.lags.CopyFrom(lags)
        request.subscription.config.CopyFrom(apb.AssignmentConfig(num_standby_replicas=self.standbys))
        return request


class Heartbeats:
    """Back-to-back heartbeats of the beside group, every call's (end time, latency, ok) kept."""

    def __init__(self, stub: pb_grpc.GroupLeaderStub, members: list[Member]) -> None:
        self.stub, self.members = stub, members
        self.calls: list[tuple[float, float, bool]] = []
        self.running = True

    async def run(self) -> None:
        async def loop(member: Member) -> None:
            while self.running:
                started = time.perf_counter()
                try:
                    answer = await self.stub.Heartbeat(pb.HeartbeatRequest(
                        group_id=member.group, member_id=member.member_id, generation_id=member.generation))
                    ok = answer.error_code == 0
                except grpc.RpcError:
                    ok = False
                ended = time.perf_counter()
                self.calls.append((ended, ended - started, ok))

        await asyncio.gather(*(loop(m) for m in self.members))

    def window(self, start: float, end: float) -> dict:
        inside = [(latency, ok) for ended, latency, ok in self.calls if start <= ended <= end]
        # a call still waiting at the end counts with its wait so far: a stall cannot hide
        latencies = sorted(latency for latency, _ in inside)
        return {
            "rate": sum(ok for _, ok in inside) / max(end - start, 1e-9),
            "p50": latencies[len(latencies) // 2] * 1000 if latencies else float("nan"),
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else float("nan"),
            "max": (latencies[-1] * 1000) if latencies else (end - start) * 1000,
            "failed": sum(not ok for _, ok in inside),
        }


async def measure(port: int, members: int, subtopologies: int, partitions: int, standbys: int, repeat: int) -> dict:
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[*OPTIONS, ("grpc.channel_id", i)])
                for i in range(8)]
    stubs = [pb_grpc.GroupLeaderStub(c) for c in channels]
    beside = [Member(stubs[i % 8], "beside", _topology(BESIDE), 100_000 + i) for i in range(BESIDE)]
    await _form(beside)
    topology = _big_topology(subtopologies, partitions)
    big = [BigMember(stubs[i % 8], "big", topology, i, standbys=standbys) for i in range(members)]
    await _form(big)
    heartbeats = Heartbeats(stubs[0], beside)
    loop_task = asyncio.ensure_future(heartbeats.run())
    await asyncio.sleep(2.0)
    idle = heartbeats.window(time.perf_counter() - 2.0, time.perf_counter())
    rounds = []
    for _ in range(repeat):
        calls = [asyncio.ensure_future(m.join_and_sync()) for m in big]
        await asyncio.sleep(0)
        sent = time.perf_counter()
        results = await asyncio.gather(*calls, return_exceptions=True)
        ended = time.perf_counter()
        failures = [r for r in results if isinstance(r, BaseException)]
        tasks = sum(len(m.active) for m in big)
        if failures or tasks != subtopologies * partitions:
            raise RuntimeError(f"round failed: {failures[:1]} or {tasks} actives for {subtopologies * partitions} tasks")
        rounds.append({"seconds": ended - sent, **heartbeats.window(sent, ended)})
        if os.environ.get("BENCH_VERBOSE"):
            print(rounds[-1], file=sys.stderr)
        await asyncio.sleep(1.0)
    heartbeats.running = False
    await loop_task
    for channel in channels:
        await channel.close()
    return {"idle": idle, "rounds": rounds}


def _median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--subtopologies", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--standbys", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["thread", "process"], choices=["thread", "process"])
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    print(f"# {args.members} members x {args.subtopologies * args.partitions:,} tasks ({args.subtopologies} "
          f"subtopologies, {args.standbys} standby), {args.repeat} rounds; {BESIDE} members of another group "
          "heartbeat meanwhile\n")
    print("| assignor runs in | rebalance, last join -> all syncs (median, range) | heartbeats/s beside | "
          "heartbeat p50 / p99 / max ms | failed | idle: heartbeats/s, max ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in args.modes:
        port = free_port()
        state = tempfile.mkdtemp(prefix="bench-large-")
        server = _start([sys.executable, "-m", "remote_leader.cli", "serve", "--listen", f"127.0.0.1:{port}",
                         "--state-dir", state, "--metrics-port", "0", "--initial-rebalance-delay-ms", "5000",
                         "--log-level", "warning", "--max-pending-requests", str(PENDING),
                         "--assignor-processes", "1" if mode == "process" else "0"], env)
        try:
            _wait_port(port)
            result = asyncio.run(measure(port, args.members, args.subtopologies, args.partitions, args.standbys,
                                         args.repeat))
        finally:
            server.terminate()
            server.wait(timeout=30)
        rounds, idle = result["rounds"], result["idle"]
        seconds = [r["seconds"] for r in rounds]
        print(f"| {mode} | {statistics.median(seconds) * 1000:,.0f} ms ({min(seconds) * 1000:,.0f}–"
              f"{max(seconds) * 1000:,.0f}) | {_median(rounds, 'rate'):,.0f} | {_median(rounds, 'p50'):.0f} / "
              f"{_median(rounds, 'p99'):.0f} / {max(r['max'] for r in rounds):,.0f} | "
              f"{sum(r['failed'] for r in rounds)} | {idle['rate']:,.0f}, {idle['max']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
