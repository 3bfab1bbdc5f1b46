"""Does the largest request the default limits allow stall the server? (docs/security.md)

    python bench/bench_limits.py                 # defaults: 50,000 tasks, the largest allowed
    python bench/bench_limits.py --tasks 20000 --assign-clients 50

A ``remote-leader serve`` subprocess with its default limits. While a probe loop sends a
health check (grpc.health.v1) and a heartbeat of another, small group every 5 ms, one of the
largest allowed requests is served:

- join: a JoinGroup whose topology forms ``--tasks`` tasks (the default max_tasks_per_group) and
  whose lag report lists every one of them, then the group's rebalance (the assignor runs on it);
- describe: five DescribeGroup calls in a row on that group;
- assign: an ``Assign`` of ``--tasks`` tasks (max_tasks_per_assign) over ``--assign-clients``
  clients, each reporting a lag for a share of the tasks.

- (``--concurrent-assigns K``, default 12) K such Assign calls at once, then a new group of 5,000
  tasks forms: its rebalance time beside them against its time alone, and how the calls ended
  (at most --max-concurrent-assigns are computed at once, the rest refused).

Baseline: the same probe loop against the idle server, just before each row, in the same run.
Prints, per row, the request's own time and the probes' median and worst latency (health check
and heartbeat), and the ratio of the worst health check to the idle worst.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote_leader.net import free_port  # noqa: E402
from remote_leader.v1 import assignment_pb2 as apb  # noqa: E402
from remote_leader.v1 import group_leader_pb2 as pb  # noqa: E402
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc  # noqa: E402

OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024), ("grpc.max_send_message_length", 64 * 1024 * 1024)]
PROBE_EVERY_S = 0.005
DESCRIBES = 5  # DescribeGroup calls in a row on the largest group (an operator's `describe --watch`)



def _topology(tasks: int, partitions_per_topic: int = 10_000) -> pb.Topology:
    subs, sub_id = [], 0
    while tasks > 0:
        width = min(tasks, partitions_per_topic)
        subs.append(pb.Subtopology(id=sub_id, source_topics=[pb.SourceTopic(name=f"topic-{sub_id}", partition_count=width)],
                                   state_stores=[pb.StateStore(name=f"store-{sub_id}", logged=True)]))
        tasks -= width
        sub_id += 1
    return pb.Topology(subtopologies=subs)


def _join(group: str, topology: pb.Topology, lags: dict[tuple[int, int], int], member_id: str = "") -> pb.JoinGroupRequest:
    sub = pb.Subscription(version=2, latest_supported_version=2, process_id=str(uuid.uuid4()), num_threads=1, topology=topology,
                          config=apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=0))
    for (s, p), lag in lags.items():
        sub.lags.task_lags.add(task=apb.TaskId(subtopology=s, partition=p), lag=lag)
    return pb.JoinGroupRequest(group_id=group, member_id=member_id, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                               subscription=sub)


class Probes:
    """Health checks and heartbeats of a small formed group, every 5 ms, with their latencies."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.health = health_pb2_grpc.HealthStub(channel)
        self.stub = pb_grpc.GroupLeaderStub(channel)
        self.member_id = ""
        self.generation = 0

    async def form(self) -> None:
        answer = await self.stub.JoinGroup(_join("probe-group", _topology(4), {}), timeout=30)
        self.member_id, self.generation = answer.member_id, answer.generation_id
        await self.stub.SyncGroup(pb.SyncGroupRequest(group_id="probe-group", member_id=self.member_id, generation_id=self.generation))

    async def run(self, stop: asyncio.Event) -> tuple[list[float], list[float]]:
        health, beats = [], []
        beat = pb.HeartbeatRequest(group_id="probe-group", member_id=self.member_id, generation_id=self.generation)
        check = health_pb2.HealthCheckRequest(service="remote_leader.v1.GroupLeader")
        while not stop.is_set():
            started = time.perf_counter()
            await self.health.Check(check, timeout=60)
            middle = time.perf_counter()
            answer = await self.stub.Heartbeat(beat, timeout=60)
            ended = time.perf_counter()
            if answer.error_code != 0:
                raise RuntimeError(f"the probe group's heartbeat failed: {answer}")
            health.append((middle - started) * 1000)
            beats.append((ended - middle) * 1000)
            await asyncio.sleep(PROBE_EVERY_S)
        return health, beats


async def _measured(probes: Probes, work) -> tuple[float, list[float], list[float]]:
    stop = asyncio.Event()
    running = asyncio.create_task(probes.run(stop))
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    await work()
    took = time.perf_counter() - started
    await asyncio.sleep(0.1)
    stop.set()
    health, beats = await running
    return took, health, beats


async def _idle() -> None:
    await asyncio.sleep(1.0)


def _row(name: str, took: float, health: list[float], beats: list[float], idle_worst: float) -> str:
    return (f"| {name} | {took:.2f} s | {statistics.median(health):.1f} / {max(health):.1f} ms | "
            f"{statistics.median(beats):.1f} / {max(beats):.1f} ms | {max(health) / idle_worst:.1f}x |")


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        server = subprocess.Popen([sys.executable, "-m", "remote_leader.cli", "serve", "--listen", f"127.0.0.1:{port}",
                                   "--state-dir", state, "--metrics-port", "0", "--initial-rebalance-delay-ms", "0",
                                   "--log-level", "error"], cwd=ROOT)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel, \
                       grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[*OPTIONS, ("grpc.channel_id", 2)]) as work_channel:
                await channel.channel_ready()
                probes = Probes(channel)
                await probes.form()
                stub = pb_grpc.GroupLeaderStub(work_channel)
                print(f"| request ({args.tasks:,} tasks) | request time | health check median / worst | "
                      "heartbeat (other group) median / worst | worst health vs idle |")
                print("| --- | --- | --- | --- | --- |")
                for round_ in range(args.repeat):
                    _, idle_health, idle_beats = await _measured(probes, _idle)
                    idle_worst = max(idle_health)
                    print(_row("idle (baseline)", 1.0, idle_health, idle_beats, idle_worst))

                    topology = _topology(args.tasks)
                    lags = {(t.id, p): 1_000 for t in topology.subtopologies for p in range(t.source_topics[0].partition_count)}

                    async def join(round_=round_, topology=topology, lags=lags) -> None:
                        request = _join(f"largest-{round_}", topology, lags)
                        answer = await stub.JoinGroup(request, timeout=600)
                        if answer.error_code != 0:
                            raise RuntimeError(f"the largest join failed: {answer}")
                        sync = await stub.SyncGroup(pb.SyncGroupRequest(group_id=request.group_id, member_id=answer.member_id,
                                                                        generation_id=answer.generation_id), timeout=600)
                        if sync.error_code != 0:
                            raise RuntimeError(f"the largest sync failed: {sync.error_code}")

                    print(_row(f"JoinGroup + rebalance, {len(request_bytes(topology, lags)) / 1e6:.1f} MB", *await _measured(probes, join), idle_worst))

                    async def describe(group=f"largest-{round_}") -> None:
                        for _ in range(DESCRIBES):
                            answer = await stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group), timeout=600)
                            if answer.error_code != 0:
                                raise RuntimeError(f"the describe failed: {answer.error_code}")

                    print(_row(f"DescribeGroup of that group x {DESCRIBES}", *await _measured(probes, describe), idle_worst))

                    problem = apb.AssignmentProblem()
                    for p in range(args.tasks):
                        problem.tasks.add(id=apb.TaskId(subtopology=p // 10_000, partition=p % 10_000), changelog_offsets=1_000)
                    share = args.tasks // args.assign_clients
                    for c in range(args.assign_clients):
                        client = problem.clients.add(id=f"client-{c:05}", threads=1)
                        for p in range(c * share, (c + 1) * share):
                            client.lags.add(task=apb.TaskId(subtopology=p // 10_000, partition=p % 10_000), lag=-1)

                    async def assign(problem=problem) -> None:
                        await stub.Assign(pb.AssignRequest(problem=problem), timeout=600)

                    name = f"Assign x {args.assign_clients} clients, {problem.ByteSize() / 1e6:.1f} MB"
                    print(_row(name, *await _measured(probes, assign), idle_worst))
                    if args.concurrent_assigns:
                        await _flood_row(stub, pb.AssignRequest(problem=problem), args.concurrent_assigns, round_)
        finally:
            server.terminate()
            server.wait(20)


async def _flood_row(stub: pb_grpc.GroupLeaderStub, request: pb.AssignRequest, calls: int, round_: int) -> None:
    """``calls`` Assign calls at once, then a new group of 5,000 tasks forms: its rebalance (join
    to sync) against the same group's alone, just before. The Assign calls run apart from the
    groups' rebalances, at most --max-concurrent-assigns at once (docs/security.md)."""
    async def form(group: str) -> float:
        started = time.perf_counter()
        answer = await stub.JoinGroup(_join(group, _topology(5_000), {}), timeout=600)
        sync = await stub.SyncGroup(pb.SyncGroupRequest(group_id=group, member_id=answer.member_id,
                                                        generation_id=answer.generation_id), timeout=600)
        if answer.error_code or sync.error_code:
            raise RuntimeError(f"the group {group} did not form: {answer.error_code} / {sync.error_code}")
        return time.perf_counter() - started

    async def assign() -> str:
        try:
            await stub.Assign(request, timeout=600)
            return "answered"
        except grpc.aio.AioRpcError as error:
            return error.code().name

    alone = await form(f"alone-{round_}")
    flood = [asyncio.create_task(assign()) for _ in range(calls)]
    await asyncio.sleep(4.0)
    beside = await form(f"beside-{round_}")
    outcomes = await asyncio.gather(*flood)
    counts = ", ".join(f"{outcomes.count(o)} {o}" for o in sorted(set(outcomes)))
    print(f"| a 5,000-task group's rebalance beside {calls} Assign calls ({counts}) | {beside:.2f} s "
          f"(alone {alone:.2f} s) | | | |")


def request_bytes(topology: pb.Topology, lags: dict) -> bytes:
    return _join("x", topology, lags).SerializeToString()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--assign-clients", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--concurrent-assigns", type=int, default=12,
                        help="one more row: this many Assign calls at once beside a group's rebalance (0: none)")
    asyncio.run(main(parser.parse_args()))
