"""Many members joining one group at once: does every join get its answer, and how many
assignor runs does the group pay? (docs/protocol.md, "CompletingRebalance"; docs/benchmarks.md)

    python bench/bench_join_flood.py                          # 3,000 joins, this checkout
    python bench/bench_join_flood.py --baseline REV           # the same flood on git revision REV first

A ``remote-leader serve`` subprocess (its default limits, an initial rebalance delay of 1 s)
receives ``--joins`` JoinGroup calls of new members at once, over one channel. Prints how the
calls ended (answered, or which gRPC status), when the last one ended, the generation the
group reached (one per assignor run started: a run whose result is dropped is wasted work) and
the server's peak memory. ``--baseline REV`` checks REV out in a temporary git worktree and
runs the same flood on it first, in the same invocation.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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

GROUP = "flood"
TOPOLOGY = pb.Topology(subtopologies=[pb.Subtopology(id=0, source_topics=[pb.SourceTopic(name="in", partition_count=8)],
                                                     state_stores=[pb.StateStore(name="s", logged=True)])])



def _join() -> pb.JoinGroupRequest:
    sub = pb.Subscription(version=2, latest_supported_version=2, process_id=str(uuid.uuid4()), num_threads=1,
                          topology=TOPOLOGY, config=apb.AssignmentConfig())
    return pb.JoinGroupRequest(group_id=GROUP, session_timeout_ms=60_000, rebalance_timeout_ms=20_000, subscription=sub)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _flood(root: Path, joins: int) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        server = subprocess.Popen([sys.executable, "-P", "-m", "remote_leader.cli", "serve", "--listen", f"127.0.0.1:{port}",
                                   "--state-dir", state, "--metrics-port", "0", "--initial-rebalance-delay-ms", "1000",
                                   "--log-level", "error"], cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await asyncio.wait_for(channel.channel_ready(), 60)
                stub = pb_grpc.GroupLeaderStub(channel)
                started = time.perf_counter()

                async def join() -> tuple[str, float, int]:
                    try:
                        answer = await stub.JoinGroup(_join(), timeout=300)
                        status = "answered" if answer.error_code == 0 else f"error {answer.error_code}"
                        return status, time.perf_counter() - started, answer.generation_id
                    except grpc.aio.AioRpcError as error:
                        return error.code().name, time.perf_counter() - started, 0

                ended = await asyncio.gather(*(join() for _ in range(joins)))
                described = await stub.DescribeGroup(pb.DescribeGroupRequest(group_id=GROUP))
                return {"ends": collections.Counter(status for status, _, _ in ended),
                        "last_s": max(t for _, t, _ in ended), "generation": described.group.generation_id,
                        "members": len(described.group.members), "rss_mb": _peak_rss_mb(server.pid)}
        finally:
            server.terminate()
            server.wait(30)


def _row(name: str, figures: dict) -> str:
    ends = ", ".join(f"{count:,} {status}" for status, count in sorted(figures["ends"].items()))
    return (f"| {name} | {ends} | {figures['last_s']:.1f} | {figures['generation']:,} | {figures['members']:,} "
            f"| {figures['rss_mb']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--joins", type=int, default=3000)
    parser.add_argument("--baseline", help="also run the flood on this git revision (a temporary worktree), first")
    args = parser.parse_args()
    rows = []
    if args.baseline:
        with tempfile.TemporaryDirectory() as parent:
            tree = Path(parent) / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.baseline], check=True)
            try:
                rows.append((args.baseline, asyncio.run(_flood(tree, args.joins))))
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    rows.append(("this checkout", asyncio.run(_flood(ROOT, args.joins))))
    print(f"{args.joins:,} JoinGroup calls of new members at once into one group, one channel")
    print("| code | calls ended | last call ended, s | generation reached | members | server peak RSS MB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, figures in rows:
        print(_row(name, figures))


if __name__ == "__main__":
    main()
