"""The sidecar as a separate process: a real server here, ``remote-leader sidecar`` in a
subprocess, and the test acting as the worker through the local gRPC API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest

from assignor.model import TaskId
from client.lags import StaticLagSource
from client.member import GroupMember
from remote_leader.sidecar.v1 import sidecar_pb2 as spb
from remote_leader.sidecar.v1 import sidecar_pb2_grpc as spb_grpc
from remote_leader.v1 import assignment_pb2 as apb
from tests.client.conftest import member_config

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = """
application_id: app
subtopologies:
  - id: 0
    source_topics: [orders]
    partitions: 4
    stores: [counts]
config:
  num_standby_replicas: 1
"""


async def start_sidecar(tmp_path, server: str, *extra: str) -> tuple[asyncio.subprocess.Process, str]:
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "remote_leader.cli", "sidecar", "--group", "g", "--server", server,
        "--topology", str(topology), "--listen", "127.0.0.1:0", "--endpoint", "127.0.0.1:7070",
        "--session-timeout-ms", "1000", "--heartbeat-interval-ms", "100", "--apply-timeout-ms", "60000",
        "--log-level", "warning", *extra,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    if not line:
        raise AssertionError((await process.stderr.read()).decode())
    ready = json.loads(line)
    assert ready["event"] == "sidecar.ready" and ready["group_id"] == "g"
    return process, ready["listen"]


def tasks(messages) -> set[TaskId]:
    return {TaskId(t.subtopology, t.partition) for t in messages}


async def test_sidecar_api_from_a_separate_process(leader, tmp_path):
    process, address = await start_sidecar(tmp_path, leader.address)
    other = None
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            sidecar = spb_grpc.SidecarServiceStub(channel)
            await sidecar.ReportLags(spb.ReportLagsRequest(task_lags=[
                apb.TaskLag(task=apb.TaskId(subtopology=0, partition=1), lag=5)]))
            watch = sidecar.WatchAssignment(spb.WatchAssignmentRequest(acknowledge=True))
            first = await asyncio.wait_for(watch.read(), 10)
            assert tasks(first.assignment.active) == {TaskId(0, p) for p in range(4)}  # alone: every active
            # if the watcher was there before the assignment, the member waits for this ack
            await sidecar.AcknowledgeAssignment(
                spb.AcknowledgeAssignmentRequest(generation_id=first.assignment.generation_id))
            for _ in range(100):
                got = await sidecar.GetAssignment(spb.GetAssignmentRequest())
                if got.state == spb.MEMBER_STATE_STABLE:
                    break
                await asyncio.sleep(0.02)
            assert got.state == spb.MEMBER_STATE_STABLE and got.has_assignment
            assert got.assignment.generation_id == first.assignment.generation_id

            # a second member joins: the sidecar's worker must apply the new assignment and say
            # so before the state-cleanup lock is free again (KIP-441, across the process boundary)
            other = GroupMember(leader.address, member_config("g", 9, partitions=4), StaticLagSource())
            await other.start()
            update = await asyncio.wait_for(watch.read(), 10)
            assert update.assignment.generation_id > first.assignment.generation_id
            assert tasks(update.change.revoked_active) and tasks(update.change.revoked_active) <= tasks(first.assignment.active)
            hold = sidecar.HoldCleanupLock(spb.HoldCleanupLockRequest(holder="test-cleaner"))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(held := asyncio.ensure_future(hold.read())), 0.5)
            ack = await sidecar.AcknowledgeAssignment(
                spb.AcknowledgeAssignmentRequest(generation_id=update.assignment.generation_id))
            assert ack.accepted
            assert (await asyncio.wait_for(held, 5)).held
            hold.cancel()  # release by closing the call

            await other.wait_for_assignment(lambda a: a.generation == update.assignment.generation_id, timeout=10)
            # KIP-535 from the sidecar: murmur2(b"foobar") = -790332482 -> & 0x7fffffff = 1357151166 -> % 4 = 2
            meta = await sidecar.QueryMetadata(spb.QueryMetadataRequest(store="counts", key=b"foobar"))
            owner = "127.0.0.1:7070" if TaskId(0, 2) in tasks(update.assignment.active) else "127.0.0.1:7009"
            assert meta.partition == 2 and f"{meta.active_host.host}:{meta.active_host.port}" == owner
            routed = await sidecar.RouteQuery(spb.RouteQueryRequest(store="counts", partition=2))
            assert [f"{h.host.host}:{h.host.port}" for h in routed.hosts] == [owner]
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await sidecar.QueryMetadata(spb.QueryMetadataRequest(store="nope", partition=0))
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "store" in error.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await sidecar.ReportLags(spb.ReportLagsRequest(task_lags=[
                    apb.TaskLag(task=apb.TaskId(subtopology=0, partition=0), lag=-7)]))
            assert "task_lags[0].lag" in error.value.details()
            watch.cancel()

        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 10) == 0
        await other.wait_for_assignment(lambda a: len(a.active) == 4, timeout=10)  # it left: all tasks move
        group = await leader.describe("g")
        assert [m.process_id for m in group.members] == [other.config.process_id]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if other is not None:
            await other.close()


async def test_sidecar_refuses_a_bad_topology_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("application_id: app\nsubtopologies:\n  - {id: 0, source_topics: [t], partitions: 0}\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "remote_leader.cli", "sidecar", "--group", "g", "--server", "127.0.0.1:1",
        "--topology", str(bad), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "topology.subtopologies[0].partitions" in stderr.decode()
