"""A real remote-leader server per test (127.0.0.1, port 0, real clock, short timings)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import structlog

from assignor.model import AssignmentConfig, HostInfo, StateStore
from assignor.topology import Subtopology, Topology
from client.member import GroupMember, MemberConfig
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from server.app import LeaderServer, Settings

SESSION_MS = 1_000
HEARTBEAT_MS = 100

FAST = {
    "listen": "127.0.0.1:0", "metrics_port": 0, "initial_rebalance_delay_ms": 100, "min_session_timeout_ms": 500,
    "min_probe_interval_ms": 200, "drain_timeout_s": 1.0, "log_level": "warning",
}


@pytest.fixture(autouse=True)
def _quiet_logs():
    """Warnings and up while a client test runs; the previous configuration afterwards."""
    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    yield
    structlog.configure(**previous)


@dataclass
class Leader:
    server: LeaderServer
    address: str
    stub: pb_grpc.GroupLeaderStub

    async def describe(self, group: str) -> pb.GroupDescription:
        return (await self.stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group), timeout=5)).group


async def start_leader(state_dir: Path, **settings) -> LeaderServer:
    server = LeaderServer(Settings(state_dir=state_dir, **{**FAST, **settings}))
    await server.start()
    return server


@pytest.fixture
async def leader(tmp_path):
    server = await start_leader(tmp_path / "leader")
    address = f"127.0.0.1:{server.port}"
    channel = grpc.aio.insecure_channel(address)
    try:
        yield Leader(server, address, pb_grpc.GroupLeaderStub(channel))
    finally:
        await channel.close()
        await server.stop(grace_s=0.5)


def topology(partitions: int = 6) -> Topology:
    return Topology.of("app", (Subtopology.of(0, ("orders",), partitions, (StateStore("counts"),)),))


def member_config(group: str, index: int, partitions: int = 6, standbys: int = 1, **overrides) -> MemberConfig:
    values = dict(
        group_id=group, topology=topology(partitions), process_id=str(uuid.UUID(int=index + 1)),
        endpoint=HostInfo("127.0.0.1", 7000 + index), assignment_config=AssignmentConfig(num_standby_replicas=standbys),
        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS, retry_backoff_ms=20, retry_backoff_max_ms=200)
    values.update(overrides)
    return MemberConfig(**values)


async def close_all(members: list[GroupMember]) -> None:
    for member in members:
        await member.close()
