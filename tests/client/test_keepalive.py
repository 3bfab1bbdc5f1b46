"""A member's calls do not outlive a leader that stopped answering (client.member keepalive).

An HA audit's find: a JoinGroup parked at a replica that was then paused (SIGSTOP) waited out
its deadline, more than a minute, while another replica had long taken the group over. The
member's channel now pings while a call is out; unanswered, the call fails UNAVAILABLE within a
ping interval, its timeout and one connection attempt, and the member looks for the group's
owner elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest

from client.member import CONNECT_TIMEOUT_MS, KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS, open_channel
from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from tests.pg_server import free_port

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = pb.Topology(subtopologies=[pb.Subtopology(id=0, source_topics=[pb.SourceTopic(name="in", partition_count=2)])])


def _join(member_id: str = "") -> pb.JoinGroupRequest:
    subscription = pb.Subscription(version=2, latest_supported_version=2, process_id=str(uuid.uuid4()), num_threads=1,
                                   topology=TOPOLOGY, config=apb.AssignmentConfig())
    return pb.JoinGroupRequest(group_id="app", member_id=member_id, session_timeout_ms=60_000,
                               rebalance_timeout_ms=60_000, subscription=subscription)


@pytest.mark.timeout(120)
async def test_a_join_parked_at_a_paused_leader_fails_over_in_a_ping_not_at_its_deadline(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "remote_leader.cli", "serve", "--listen", f"127.0.0.1:{port}", "--metrics-port", "0",
         "--state-dir", str(tmp_path), "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "1000",
         "--log-level", "error"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 60)
            stub = pb_grpc.GroupLeaderStub(channel)
            first = await stub.JoinGroup(_join(), timeout=30)  # a group of one, Stable once it syncs
            await stub.SyncGroup(pb.SyncGroupRequest(group_id="app", member_id=first.member_id,
                                                     generation_id=first.generation_id), timeout=30)
            # a newcomer's join waits at the barrier for the first member, who does not rejoin
            parked = asyncio.ensure_future(stub.JoinGroup(_join(), timeout=90))
            await asyncio.sleep(1.0)
            assert not parked.done()
            server.send_signal(signal.SIGSTOP)
            paused = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await parked
            waited = time.monotonic() - paused
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value
        # a ping's interval and timeout, one connection attempt, room for a loaded machine; not
        # the call's deadline (90 s), which it waited out before
        assert waited < (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS + CONNECT_TIMEOUT_MS) / 1000 + 10, waited
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(30)
