"""Test-side helpers: a real server on 127.0.0.1 port 0 with a fake clock, and a thin worker
built on the generated stubs only (the real worker library is ``client/``; these tests must
not depend on it, nor compute expectations with the server's code)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from server.app import LeaderServer, Settings
from server.timers import FakeClock

LATEST = -1
UNKNOWN = -2
SESSION_MS = 10_000


def topology(partitions: int = 3, *, stores: tuple[tuple[str, bool], ...] = (("counts", True),), topic: str = "orders") -> pb.Topology:
    """One subtopology reading ``topic`` with ``partitions`` partitions, with these stores."""
    return pb.Topology(
        subtopologies=[
            pb.Subtopology(
                id=0,
                source_topics=[pb.SourceTopic(name=topic, partition_count=partitions)],
                state_stores=[pb.StateStore(name=name, logged=logged) for name, logged in stores],
            )
        ]
    )


def lags(mapping: dict[str, int]) -> pb.LagReport:
    """{"0_1": lag} -> LagReport with task lags."""
    report = pb.LagReport()
    for text, lag in sorted(mapping.items()):
        sub, part = (int(x) for x in text.split("_"))
        report.task_lags.add(task=apb.TaskId(subtopology=sub, partition=part), lag=lag)
    return report


def task_names(tasks) -> list[str]:
    return [f"{t.task.subtopology}_{t.task.partition}" if hasattr(t, "task") else f"{t.subtopology}_{t.partition}" for t in tasks]


@dataclass
class Worker:
    """One worker process speaking the group protocol through the generated stub."""

    stub: pb_grpc.GroupLeaderStub
    group_id: str = "app"
    process_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    instance_id: str | None = None
    version: int = 2
    latest_supported_version: int = 2
    threads: int = 1
    port: int = 0
    rack: str | None = None
    topo: pb.Topology = field(default_factory=topology)
    config: apb.AssignmentConfig = field(default_factory=lambda: apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=0))
    task_lags: dict[str, int] = field(default_factory=dict)
    member_id: str = ""
    generation: int = -1
    assignment: pb.Assignment | None = None

    def subscription(self) -> pb.Subscription:
        sub = pb.Subscription(
            version=self.version,
            latest_supported_version=self.latest_supported_version,
            process_id=self.process_id,
            num_threads=self.threads,
            topology=self.topo,
            lags=lags(self.task_lags),
            config=self.config,
        )
        if self.port:
            sub.endpoint.CopyFrom(pb.HostInfo(host="127.0.0.1", port=self.port))
        if self.rack is not None:
            sub.rack = self.rack
        return sub

    def join_request(self) -> pb.JoinGroupRequest:
        request = pb.JoinGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=SESSION_MS,
            subscription=self.subscription(),
        )
        if self.instance_id is not None:
            request.group_instance_id = self.instance_id
        return request

    async def join(self) -> pb.JoinGroupResponse:
        response = await self.stub.JoinGroup(self.join_request())
        if response.error_code == epb.ERROR_CODE_NONE:
            self.member_id, self.generation = response.member_id, response.generation_id
        return response

    async def sync(self) -> pb.SyncGroupResponse:
        request = pb.SyncGroupRequest(group_id=self.group_id, member_id=self.member_id, generation_id=self.generation)
        if self.instance_id is not None:
            request.group_instance_id = self.instance_id
        response = await self.stub.SyncGroup(request)
        if response.error_code == epb.ERROR_CODE_NONE:
            self.assignment = response.assignment
        return response

    async def heartbeat(self, report: dict[str, int] | None = None) -> pb.HeartbeatResponse:
        request = pb.HeartbeatRequest(group_id=self.group_id, member_id=self.member_id, generation_id=self.generation)
        if self.instance_id is not None:
            request.group_instance_id = self.instance_id
        if report is not None:
            self.task_lags = dict(report)
            request.lags.CopyFrom(lags(report))
        return await self.stub.Heartbeat(request)

    async def leave(self) -> pb.LeaveGroupResponse:
        request = pb.LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)
        if self.instance_id is not None:
            request.group_instance_id = self.instance_id
        return await self.stub.LeaveGroup(request)

    def active(self) -> list[str]:
        return task_names(self.assignment.active_tasks) if self.assignment else []

    def standby(self) -> list[str]:
        return task_names(self.assignment.standby_tasks) if self.assignment else []

    def warmups(self) -> list[str]:
        if not self.assignment:
            return []
        return task_names([t for t in self.assignment.standby_tasks if t.warmup])

    def runs_as_caught_up(self) -> None:
        """Report what it now runs: actives LATEST, standbys caught up (lag 0)."""
        report = {t: 0 for t in self.standby()}
        report.update({t: LATEST for t in self.active()})
        self.task_lags = report


async def rebalance(clock: FakeClock, workers: list[Worker], *, advance_ms: int = 0) -> list[pb.JoinGroupResponse]:
    """All workers join concurrently (the barrier), optionally advancing the fake clock while they
    wait, then all sync."""
    responses = await joined(clock, workers, advance_ms=advance_ms)
    syncs = await asyncio.gather(*(w.sync() for w in workers))
    for s in syncs:
        assert s.error_code == epb.ERROR_CODE_NONE, s
    return responses


async def joined(clock: FakeClock, workers: list[Worker], *, advance_ms: int = 0) -> list[pb.JoinGroupResponse]:
    """``rebalance`` up to the syncs: every join answered NONE, nobody synced yet."""
    joins = [asyncio.create_task(w.join()) for w in workers]
    await settle()
    if advance_ms:
        # Under load, wait until every join has reached the server before time moves on.
        stub, group_id = workers[0].stub, workers[0].group_id
        for _ in range(1000):
            described = await stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group_id))
            if len(described.group.members) >= len(workers):
                break
            await asyncio.sleep(0.01)
        await clock.advance(advance_ms)
    responses = await asyncio.wait_for(asyncio.gather(*joins), 30)
    for w, r in zip(workers, responses, strict=True):
        assert r.error_code == epb.ERROR_CODE_NONE, (w.member_id, r)
    return list(responses)


async def settle(rounds: int = 20) -> None:
    """Let in-flight calls reach the server (real sockets: a few loop turns and a short sleep)."""
    for _ in range(rounds):
        await asyncio.sleep(0.005)


@dataclass
class Running:
    server: LeaderServer
    clock: FakeClock
    channel: grpc.aio.Channel
    stub: pb_grpc.GroupLeaderStub
    state_dir: Path

    def worker(self, **kwargs) -> Worker:
        return Worker(self.stub, **kwargs)


@contextlib.asynccontextmanager
async def running_server(state_dir: Path, clock: FakeClock | None = None, **settings):
    """A real grpc.aio server on 127.0.0.1, port 0, with a fake clock; yields ``Running``."""
    clock = clock or FakeClock()
    values = {"listen": "127.0.0.1:0", "state_dir": state_dir, "metrics_port": 0, "initial_rebalance_delay_ms": 3_000,
              "min_session_timeout_ms": 1_000, "drain_timeout_s": 1.0, "log_level": "warning"}
    values.update(settings)
    server = LeaderServer(Settings(**values), clock=clock)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield Running(server, clock, channel, pb_grpc.GroupLeaderStub(channel), state_dir)
    finally:
        await channel.close()
        await server.stop(grace_s=0.5)


async def run_for(clock: FakeClock, workers: list[Worker], ms: int, step_ms: int = SESSION_MS // 2) -> list[pb.HeartbeatResponse]:
    """Let ``ms`` of fake time pass while the workers heartbeat every ``step_ms`` (so that their
    sessions stay alive); stop early at the first heartbeat round that is not all NONE."""
    elapsed = 0
    responses: list[pb.HeartbeatResponse] = []
    while elapsed < ms:
        step = min(step_ms, ms - elapsed)
        await clock.advance(step)
        elapsed += step
        responses = [await w.heartbeat() for w in workers]
        if any(r.error_code != epb.ERROR_CODE_NONE for r in responses):
            break
    return responses
