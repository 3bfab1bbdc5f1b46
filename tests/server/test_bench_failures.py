"""bench/bench_server.py counts failed calls instead of raising or dropping them (a figure that
cannot show a failure is not a measurement)."""

from __future__ import annotations

import socket

import grpc

from bench import bench_server
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc


async def test_heartbeats_answered_with_an_error_are_counted(leader):
    async def heartbeat(k: int) -> bool:  # nobody joined: every answer is UNKNOWN_MEMBER_ID
        response = await leader.stub.Heartbeat(pb.HeartbeatRequest(group_id="bench", member_id=f"m{k}", generation_id=1))
        return response.error_code == 0

    rate, failed = await bench_server._closed_loop(heartbeat, 0.2)
    assert failed > 0  # every call made failed (how many fit in 0.2 s depends on the load)
    assert rate == 0


async def test_calls_whose_rpc_fails_are_counted_not_raised():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.GroupLeaderStub(channel)

        async def heartbeat(k: int) -> bool:
            await stub.Heartbeat(pb.HeartbeatRequest(group_id="bench", member_id="m", generation_id=1), timeout=1)
            return True

        rate, failed = await bench_server._closed_loop(heartbeat, 0.2)
    assert failed > 0
    assert rate == 0


def test_the_failed_column_shows_both_sides():
    leader, bare = bench_server.Rates(), bench_server.Rates()
    leader.add(900.0, 3)
    leader.add(1000.0, 2)
    bare.add(2000.0, 0)
    bare.add(2000.0, 1)
    row = bench_server._heartbeat_row("heartbeats/s", leader, bare)
    assert row[-1] == "5 / 1 / n/a"
    assert row[3] == "0.47x"
